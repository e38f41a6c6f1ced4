"""A finished run directory read for export and comparison.

Strict where the plots are lenient (:mod:`reports.run_records`): an export or a
comparison of partial records would look complete, so a ``requests.csv`` whose rows
do not match ``summary.json``'s ``num_finished``, or that has a value that is not a
number, is refused (``ValueError`` naming the file).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import yaml

from calibrate.frontend import FrontendModel
from sim.app.outdir import read_kind

REQUEST_COLUMNS = (
    "arrival_s",
    "first_token_s",
    "finish_s",
    "prompt_tokens",
    "output_tokens",
)
"""The ``requests.csv`` columns exports read (besides ``request_id``)."""


@dataclass(frozen=True)
class RunData:
    """One run: its finished requests in arrival order (ties: request id) as arrays,
    ``summary.json`` and ``config.yaml``.

    Times are seconds of simulated time from t = 0 (the run's start), engine-side
    (:meth:`client` gives the client's view)."""

    path: Path
    request_id: np.ndarray
    arrival_s: np.ndarray
    first_token_s: np.ndarray
    finish_s: np.ndarray
    prompt_tokens: np.ndarray
    output_tokens: np.ndarray
    summary: dict[str, Any]
    config: dict[str, Any]

    def client(self) -> RunData:
        """The run as a benchmark client measures it: first and last token later by the
        API server's costs that ``config.yaml``'s ``frontend`` records
        (:class:`calibrate.frontend.FrontendModel`); a run without one, as it is."""
        recorded = self.config.get("frontend")
        if not isinstance(recorded, dict):
            return self
        delay = FrontendModel(**recorded).delay_s(self.prompt_tokens)
        return replace(
            self, first_token_s=self.first_token_s + delay, finish_s=self.finish_s + delay
        )

    @property
    def num_finished(self) -> int:
        """Finished requests (rows of ``requests.csv``)."""
        return int(self.arrival_s.size)

    @property
    def ttft_s(self) -> np.ndarray:
        """Time to first token per request, seconds."""
        return self.first_token_s - self.arrival_s

    @property
    def e2e_s(self) -> np.ndarray:
        """End-to-end latency per request, seconds."""
        return self.finish_s - self.arrival_s

    @property
    def tpot_s(self) -> np.ndarray:
        """Time per output token after the first, seconds, for requests with more than
        one output token (vLLM's ``tpot``: (latency - ttft) / (output_len - 1))."""
        many = self.output_tokens > 1
        return (self.finish_s[many] - self.first_token_s[many]) / (self.output_tokens[many] - 1)


def _read_json(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ValueError(f"{path}: missing (not a finished kvsim run directory)") from None
    except (OSError, UnicodeDecodeError, ValueError) as e:
        raise ValueError(f"{path}: not readable as JSON ({e})") from None
    if not isinstance(data, dict):
        raise ValueError(f"{path}: expected a JSON object")
    return data


def read_run(path: str | Path) -> RunData:
    """Read the run directory ``path``; ValueError (naming the file) when it is not a
    finished kvsim run or its records are incomplete."""
    run_dir = Path(path)
    if not run_dir.is_dir():
        raise ValueError(f"{run_dir}: not a directory (a kvsim run directory is expected)")
    kind = read_kind(run_dir)
    if kind is not None and kind != "run":
        raise ValueError(
            f"{run_dir}: is a kvsim {kind} directory; name one run directory "
            f"(a {kind}'s runs are in its subdirectories)"
        )
    summary = _read_json(run_dir / "summary.json")
    config_path = run_dir / "config.yaml"
    try:
        config = yaml.safe_load(config_path.read_text(encoding="utf-8")) or {}
    except FileNotFoundError:
        raise ValueError(f"{config_path}: missing (not a finished kvsim run directory)") from None
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as e:
        raise ValueError(f"{config_path}: not readable as YAML ({e})") from None
    if not isinstance(config, dict):
        raise ValueError(f"{config_path}: expected a mapping")
    csv = run_dir / "requests.csv"
    try:
        df = pd.read_csv(csv, dtype={"request_id": str})
    except FileNotFoundError:
        raise ValueError(f"{csv}: missing (not a finished kvsim run directory)") from None
    except (OSError, UnicodeDecodeError, pd.errors.ParserError, pd.errors.EmptyDataError) as e:
        raise ValueError(f"{csv}: not readable as CSV ({e})") from None
    missing = [c for c in ("request_id", *REQUEST_COLUMNS) if c not in df.columns]
    if missing:
        raise ValueError(f"{csv}: header: missing column(s) {', '.join(missing)}")
    numeric = df[list(REQUEST_COLUMNS)].apply(pd.to_numeric, errors="coerce")
    bad = numeric.isna().any(axis=1).to_numpy()
    if bad.any():
        raise ValueError(f"{csv}: line {int(bad.argmax()) + 2}: a value that is not a number")
    expected = summary.get("num_finished")
    if isinstance(expected, int) and expected != len(df):
        raise ValueError(
            f"{csv}: holds {len(df):,} rows but summary.json counts {expected:,} finished "
            "requests (the records are incomplete)"
        )
    df = df.assign(**{c: numeric[c] for c in REQUEST_COLUMNS})
    df = df.sort_values(["arrival_s", "request_id"], kind="stable").reset_index(drop=True)
    return RunData(
        path=run_dir,
        request_id=df["request_id"].to_numpy(dtype=object),
        arrival_s=df["arrival_s"].to_numpy(dtype=np.float64),
        first_token_s=df["first_token_s"].to_numpy(dtype=np.float64),
        finish_s=df["finish_s"].to_numpy(dtype=np.float64),
        prompt_tokens=df["prompt_tokens"].to_numpy(dtype=np.int64),
        output_tokens=df["output_tokens"].to_numpy(dtype=np.int64),
        summary=summary,
        config=config,
    )

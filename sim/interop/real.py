"""Real benchmark results, read for ``kvsim compare``.

Three kinds, told apart by their content:

- ``vllm-bench``: the JSON ``vllm bench serve --save-result`` writes (one object; with
  ``--append-result``, one object per line: ``index`` picks one);
- ``guidellm``: GuideLLM's ``benchmarks.json`` (``benchmarks``: ``index`` picks one);
- ``llmservingsim``: a real vLLM run's request log as LLMServingSim publishes it
  (a directory holding ``requests.jsonl``, or that file): per-request engine
  timestamps, from which TTFT = ``first_token_ts - queued_ts``, TPOT = ``(last_token_ts
  - first_token_ts) / max(1, output_toks - 1)``, latency = ``last_token_ts -
  queued_ts`` (the definitions of that repository's ``summary.txt``).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

KINDS = ("vllm-bench", "guidellm", "llmservingsim")


@dataclass(frozen=True)
class RealResult:
    """One real result: its kind, the file it came from, and either the result object
    (``vllm-bench``, ``guidellm``: one benchmark) or per-request arrays
    (``llmservingsim``: ``request_id`` (the file's, else the line's index),
    ``start_s``, ``first_token_s``, ``finish_s`` on the engine's clock,
    ``prompt_tokens``, ``output_tokens``)."""

    kind: str
    path: Path
    data: dict[str, Any]
    count: int
    """How many results the file holds (``index`` chose one)."""


def _pick(items: list[Any], index: int, path: Path, what: str) -> Any:
    if not items:
        raise ValueError(f"{path}: holds no {what}")
    if not -len(items) <= index < len(items):
        raise ValueError(
            f"{path}: --benchmark {index}: the file holds {len(items)} {what} "
            f"(0 to {len(items) - 1})"
        )
    return items[index]


def _json_objects(path: Path) -> list[Any]:
    """One JSON document, or (``--append-result``) one per non-blank line."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise ValueError(f"{path}: cannot read ({e})") from None
    try:
        return [json.loads(text)]
    except ValueError:
        pass
    out = []
    for number, line in enumerate(text.splitlines(), start=1):
        if line.strip():
            try:
                out.append(json.loads(line))
            except ValueError as e:
                raise ValueError(f"{path}: line {number}: not valid JSON ({e})") from None
    return out


def _llmservingsim(path: Path) -> RealResult:
    rows, ids = [], []
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
            ids.append(str(obj.get("request_id", number - 1)))
            rows.append(
                (
                    float(obj["queued_ts"]),
                    float(obj["first_token_ts"]),
                    float(obj["last_token_ts"]),
                    int(obj["input_toks"]),
                    int(obj["output_toks"]),
                )
            )
        except (ValueError, KeyError, TypeError) as e:
            raise ValueError(
                f"{path}: line {number}: expected queued_ts, first_token_ts, last_token_ts, "
                f"input_toks, output_toks ({type(e).__name__}: {e})"
            ) from None
    if not rows:
        raise ValueError(f"{path}: holds no requests")
    a = np.asarray(rows, dtype=np.float64)
    data = {
        "request_id": ids,
        "start_s": a[:, 0],
        "first_token_s": a[:, 1],
        "finish_s": a[:, 2],
        "prompt_tokens": a[:, 3].astype(np.int64),
        "output_tokens": a[:, 4].astype(np.int64),
    }
    return RealResult("llmservingsim", path, data, 1)


def read_real(path: str | Path, index: int = 0) -> RealResult:
    """Read a real result (see the module docstring); ValueError naming the file when it
    is none of the three kinds."""
    p = Path(path)
    if p.is_dir():
        log = p / "requests.jsonl"
        if not log.is_file():
            raise ValueError(
                f"{p}: a directory without requests.jsonl; give a vllm bench serve result "
                "JSON, a GuideLLM benchmarks.json or an LLMServingSim run directory"
            )
        return _llmservingsim(log)
    if not p.is_file():
        raise ValueError(f"{p}: no such file")
    objects = _json_objects(p)
    first = objects[0] if objects else None
    if isinstance(first, dict) and "input_toks" in first and "queued_ts" in first:
        return _llmservingsim(p)
    if len(objects) == 1 and isinstance(first, dict) and isinstance(first.get("benchmarks"), list):
        bench = _pick(first["benchmarks"], index, p, "benchmarks")
        if not isinstance(bench, dict) or not isinstance(bench.get("metrics"), dict):
            raise ValueError(f"{p}: benchmarks[{index}]: no metrics (not a GuideLLM report)")
        return RealResult("guidellm", p, bench, len(first["benchmarks"]))
    results = [o for o in objects if isinstance(o, dict) and "completed" in o and "duration" in o]
    if results and len(results) == len(objects):
        return RealResult("vllm-bench", p, _pick(results, index, p, "results"), len(results))
    raise ValueError(
        f"{p}: not a result kvsim compare reads: expected a vllm bench serve --save-result "
        "JSON (completed, duration, ...), a GuideLLM benchmarks.json (metadata, benchmarks) "
        "or an LLMServingSim requests.jsonl (input_toks, queued_ts, ...)"
    )

"""``vllm bench serve`` options (vLLM 0.33.0) -> a kvsim workload.

Read: ``--num-prompts`` (default 1000), ``--request-rate`` (default inf),
``--burstiness`` (default 1), ``--max-concurrency``, ``--seed`` (default 0),
``--dataset-name`` (only ``random``) and the random dataset's
``--random-input-len`` (1024), ``--random-output-len`` (128), ``--random-range-ratio``
(0; a number or ``{"input": a, "output": b}``) and ``--random-prefix-len`` (0).

- Arrivals: rate inf sends every request at once (``burst``), or, with
  ``--max-concurrency C``, keeps C requests in flight (``closed_loop``); a finite rate
  gives ``poisson`` (burstiness 1) or ``gamma`` gaps. A finite rate and a concurrency
  cap together are not modelled: the rate is kept, the cap noted.
- Lengths: a range ratio r draws each length uniformly from ``[floor(L (1 - r)),
  ceil(L (1 + r))]`` (output at least 1), as vLLM's random dataset; r = 0 is fixed.
  vLLM subtracts the tokenizer's special tokens from the input length; kvsim has no
  tokenizer and does not.
- ``--random-prefix-len P``: one random prefix of P tokens in front of every prompt
  (``shared_prefix`` with one group).

Options that do not shape the load (``--model``, ``--host``, ``--save-result``...)
are ignored; an unknown option is noted.
"""

from __future__ import annotations

import argparse
import json
import math
from collections.abc import Sequence
from typing import Any, NoReturn

from workloads.errors import WorkloadError
from workloads.imported import ImportedWorkload, require

SOURCE = "vllm bench serve"
IGNORED = (
    "--model", "--tokenizer", "--host", "--port", "--base-url", "--endpoint", "--backend",
    "--served-model-name", "--save-result", "--result-dir", "--result-filename",
    "--percentile-metrics", "--metric-percentiles", "--ignore-eos", "--trust-remote-code",
    "--label", "--metadata", "--goodput", "--disable-tqdm", "--save-detailed",
)  # fmt: skip
"""Options that do not change the load (kvsim always runs to ``max_tokens``)."""


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog=SOURCE, add_help=False, exit_on_error=False)
    p.add_argument("--num-prompts", type=int, default=1000)
    p.add_argument("--request-rate", type=float, default=math.inf)
    p.add_argument("--burstiness", type=float, default=1.0)
    p.add_argument("--max-concurrency", type=int, default=None)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--dataset-name", default="random")
    p.add_argument("--random-input-len", type=int, default=1024)
    p.add_argument("--random-output-len", type=int, default=128)
    p.add_argument("--random-range-ratio", default="0.0")
    p.add_argument("--random-prefix-len", type=int, default=0)
    for name in IGNORED:
        p.add_argument(name, nargs="?")
    return p


def _ratios(text: str) -> tuple[float, float]:
    """(input, output) range ratios of ``--random-range-ratio``."""
    try:
        value = json.loads(text)
    except json.JSONDecodeError:
        value = None
    if isinstance(value, dict) and set(value) == {"input", "output"}:
        return float(value["input"]), float(value["output"])
    if isinstance(value, int | float) and not isinstance(value, bool):
        return float(value), float(value)
    raise ValueError(text)


def _length(mean: int, ratio: float, floor: int) -> int | dict[str, Any]:
    low = max(math.floor(mean * (1 - ratio)), floor)
    high = max(math.ceil(mean * (1 + ratio)), floor)
    return low if low == high else {"type": "uniform", "min": low, "max": high}


def vllm_bench_workload(argv: Sequence[str]) -> ImportedWorkload:
    """The kvsim workload of a ``vllm bench serve`` command line (its options only).

    Raises:
        WorkloadError: naming ``vllm bench serve`` and the option, for a value vLLM
            would refuse or a dataset kvsim cannot rebuild.
    """
    try:
        args, unknown = _parser().parse_known_args(list(argv))
    except argparse.ArgumentError as exc:
        raise_option(exc.argument_name or "", exc.message)
    notes = [f"ignored option {u}" for u in unknown if u.startswith("--")]
    require(
        args.dataset_name == "random",
        SOURCE,
        "--dataset-name",
        f"only the random dataset can be rebuilt without its data (got "
        f"{args.dataset_name!r}; allowed: random)",
    )
    require(args.num_prompts >= 1, SOURCE, "--num-prompts", "must be >= 1")
    require(args.random_input_len >= 1, SOURCE, "--random-input-len", "must be >= 1")
    require(args.random_output_len >= 1, SOURCE, "--random-output-len", "must be >= 1")
    require(args.random_prefix_len >= 0, SOURCE, "--random-prefix-len", "must be >= 0")
    try:
        in_ratio, out_ratio = _ratios(args.random_range_ratio)
    except ValueError:
        raise_option("--random-range-ratio", 'a number, or {"input": a, "output": b}')
    for ratio in (in_ratio, out_ratio):
        require(0 <= ratio < 1, SOURCE, "--random-range-ratio", "must be in [0, 1)")
    data: dict[str, Any] = {"name": "vllm-bench-random", "seed": args.seed}
    data["arrival"] = _arrival(args, notes)
    data["prompt_len"] = _length(args.random_input_len, in_ratio, 1)
    data["output_len"] = _length(args.random_output_len, out_ratio, 1)
    if args.random_prefix_len > 0:
        data["shared_prefix"] = {"num_groups": 1, "prefix_len": args.random_prefix_len}
    data["num_requests"] = args.num_prompts
    imported = ImportedWorkload(data, SOURCE + " " + " ".join(argv), notes)
    imported.check(SOURCE)
    return imported


def _arrival(args: argparse.Namespace, notes: list[str]) -> dict[str, Any]:
    rate, burstiness, cap = args.request_rate, args.burstiness, args.max_concurrency
    require(rate > 0, SOURCE, "--request-rate", "must be > 0 (inf: all at once)")
    require(burstiness > 0, SOURCE, "--burstiness", "must be > 0")
    require(cap is None or cap >= 1, SOURCE, "--max-concurrency", "must be >= 1")
    if math.isinf(rate):
        if cap is not None:
            return {"type": "closed_loop", "concurrency": cap}
        return {"type": "burst"}
    if cap is not None:
        notes.append(
            f"--max-concurrency {cap} with a finite --request-rate: kvsim sends at the rate "
            "and does not cap the requests in flight"
        )
    if burstiness == 1.0:
        return {"type": "poisson", "rate": rate}
    return {"type": "gamma", "rate": rate, "burstiness": burstiness}


def raise_option(option: str, reason: str) -> NoReturn:
    """Raise the WorkloadError of a bad ``vllm bench serve`` option."""
    raise WorkloadError(SOURCE, option, reason)

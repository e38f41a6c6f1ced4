"""The field list of vLLM 0.33.0's ``vllm bench serve --save-result`` JSON.

Checked in so that kvsim's export can be checked without vLLM installed; where vLLM's
source is at hand (``.venv-vllm``), :func:`fields_from_source` reads the same list
from ``vllm/benchmarks/serve.py`` and ``tests/test_export.py`` requires both to agree.

Where each group comes from in ``serve.py`` (0.33.0):

- :data:`SETUP_FIELDS`: ``main_async`` sets ``result_json["..."]`` before merging the
  benchmark result (``RAMP_UP_FIELDS`` only with ``--ramp-up-strategy``; ``--metadata
  KEY=VALUE`` adds keys of the user's);
- :data:`RESULT_FIELDS`: the dict ``benchmark()`` returns for a generation task;
- :data:`DETAILED_FIELDS`: removed from the saved file unless ``--save-detailed``;
- per selected metric (``--percentile-metrics``, default ``ttft,tpot,itl``; ``e2el``
  on request) and percentile (``--metric-percentiles``, default ``99``):
  :data:`METRIC_KEY_PATTERNS`, written by ``process_one_metric``.
"""

from __future__ import annotations

import ast
from pathlib import Path

VLLM_VERSION = "0.33.0"

SETUP_FIELDS = (
    "date",
    "endpoint_type",
    "backend",
    "label",
    "model_id",
    "tokenizer_id",
    "num_prompts",
    "request_rate",
    "burstiness",
    "max_concurrency",
)
RAMP_UP_FIELDS = ("ramp_up_strategy", "ramp_up_start_rps", "ramp_up_end_rps")
RESULT_FIELDS = (
    "duration",
    "completed",
    "failed",
    "total_input_tokens",
    "total_output_tokens",
    "request_throughput",
    "request_goodput",
    "output_throughput",
    "total_token_throughput",
    "input_lens",
    "output_lens",
    "ttfts",
    "itls",
    "latencies",
    "start_times",
    "queue_times",
    "generated_texts",
    "errors",
    "max_output_tokens_per_s",
    "max_concurrent_requests",
    "rtfx",
)
DETAILED_FIELDS = (
    "input_lens",
    "output_lens",
    "start_times",
    "ttfts",
    "itls",
    "generated_texts",
    "errors",
    "server_queue_times",
    "server_ttfts",
)
METRIC_KEY_PATTERNS = (
    "mean_{metric}_ms",
    "median_{metric}_ms",
    "std_{metric}_ms",
    "p{percentile}_{metric}_ms",
)
GENERATION_METRICS = ("ttft", "tpot", "itl", "e2el")
"""Metrics ``process_one_metric`` reports for a generation task (client-queue ones
only with ``--max-concurrency``)."""
DEFAULT_PERCENTILE_METRICS = ("ttft", "tpot", "itl")
DEFAULT_METRIC_PERCENTILES = (99.0,)


def percentile_word(p: float) -> str:
    """How vLLM names a percentile in a key: ``99`` -> ``"99"``, ``99.9`` -> ``"99.9"``."""
    return str(int(p)) if int(p) == p else str(p)


def metric_keys(metrics: tuple[str, ...], percentiles: tuple[float, ...]) -> list[str]:
    """The statistic keys ``process_one_metric`` writes, in its order."""
    keys = []
    for m in metrics:
        keys += [f"mean_{m}_ms", f"median_{m}_ms", f"std_{m}_ms"]
        keys += [f"p{percentile_word(p)}_{m}_ms" for p in percentiles]
    return keys


def saved_fields(
    metrics: tuple[str, ...] = DEFAULT_PERCENTILE_METRICS,
    percentiles: tuple[float, ...] = DEFAULT_METRIC_PERCENTILES,
    detailed: bool = False,
) -> list[str]:
    """Every key of a saved result (no ramp-up, no ``--metadata``), in vLLM's order."""
    dropped = () if detailed else DETAILED_FIELDS
    result = [f for f in RESULT_FIELDS if f not in dropped]
    return [*SETUP_FIELDS, *result, *metric_keys(metrics, percentiles)]


# ---- reading the same lists from vLLM's source ---------------------------------------


def _str_constants(node: ast.AST) -> list[str]:
    """The string constants of a literal list or tuple node."""
    return [
        e.value
        for e in getattr(node, "elts", [])
        if isinstance(e, ast.Constant) and isinstance(e.value, str)
    ]


def _fstring_pattern(node: ast.JoinedStr) -> str:
    """``f"mean_{metric_attribute_name}_ms"`` -> ``"mean_{metric}_ms"`` (``p_word`` ->
    ``{percentile}``)."""
    parts = []
    for v in node.values:
        if isinstance(v, ast.Constant):
            parts.append(str(v.value))
        else:
            name = ast.unparse(v.value)
            parts.append("{percentile}" if name == "p_word" else "{metric}")
    return "".join(parts)


def fields_from_source(serve_py: str | Path) -> dict[str, tuple[str, ...]]:
    """Read the field groups of this module from vLLM's ``benchmarks/serve.py``.

    Returns ``{"setup", "ramp_up", "result", "detailed", "metric_key_patterns",
    "generation_metrics"}``, each in source order. ValueError when a group is not
    found (the source changed shape)."""
    tree = ast.parse(Path(serve_py).read_text(encoding="utf-8"))
    funcs = {
        n.name: n for n in ast.walk(tree) if isinstance(n, ast.AsyncFunctionDef | ast.FunctionDef)
    }
    main = funcs.get("main_async")
    if main is None:
        raise ValueError(f"{serve_py}: no main_async")
    setup, ramp = _setup_fields(main)
    detailed = _detailed_fields(main)
    bench = funcs.get("benchmark")
    if bench is None:
        raise ValueError(f"{serve_py}: no benchmark()")
    groups = {
        "setup": tuple(setup),
        "ramp_up": tuple(ramp),
        "result": tuple(_result_fields(bench)),
        "detailed": tuple(detailed),
        "metric_key_patterns": tuple(_metric_key_patterns(bench)),
        "generation_metrics": tuple(_generation_metrics(bench)),
    }
    empty = [k for k, v in groups.items() if not v]
    if empty:
        raise ValueError(f"{serve_py}: found no {', '.join(empty)} fields (the source changed)")
    return groups


def _setup_fields(main: ast.FunctionDef | ast.AsyncFunctionDef) -> tuple[list[str], list[str]]:
    """``(setup, ramp_up)``: the ``result_json`` keys ``main_async`` sets, those under
    its ``ramp_up_strategy`` test apart."""
    setup: list[str] = []
    ramp: list[str] = []
    for node in ast.walk(main):
        if isinstance(node, ast.If) and "ramp_up_strategy" in ast.unparse(node.test):
            for sub in ast.walk(node):
                if isinstance(sub, ast.Assign) and _is_result_json_key(sub):
                    ramp.append(sub.targets[0].slice.value)  # type: ignore[attr-defined]
    for node in main.body:
        for sub in ast.walk(node):
            if isinstance(sub, ast.Assign) and _is_result_json_key(sub):
                key = sub.targets[0].slice.value  # type: ignore[attr-defined]
                if key not in ramp and key not in setup:
                    setup.append(key)
    return setup, ramp


def _detailed_fields(main: ast.AST) -> list[str]:
    """The keys ``main_async`` removes unless ``--save-detailed`` (its loop's list)."""
    detailed: list[str] = []
    for node in ast.walk(main):
        if isinstance(node, ast.If) and ast.unparse(node.test) == "not args.save_detailed":
            for sub in ast.walk(node):
                if isinstance(sub, ast.For):
                    detailed = _str_constants(sub.iter)
                    break
    return detailed


def _result_fields(bench: ast.AST) -> list[str]:
    """The keys of the ``result`` dict ``benchmark()`` builds for a generation task."""
    result: list[str] = []
    for node in ast.walk(bench):
        if (
            isinstance(node, ast.Assign)
            and isinstance(node.value, ast.Dict)
            and any(isinstance(t, ast.Name) and t.id == "result" for t in node.targets)
        ):
            keys = [k.value for k in node.value.keys if isinstance(k, ast.Constant)]
            if "ttfts" in keys:  # the generation branch
                result = keys
    return result


def _metric_key_patterns(bench: ast.AST) -> list[str]:
    """The f-string keys ``process_one_metric`` (inside ``benchmark()``) writes into
    ``result``, as patterns (:func:`_fstring_pattern`)."""
    patterns: list[str] = []
    one = next(
        (
            n
            for n in ast.walk(bench)
            if isinstance(n, ast.FunctionDef) and n.name == "process_one_metric"
        ),
        None,
    )
    if one is not None:
        for sub in ast.walk(one):
            if isinstance(sub, ast.Assign) and isinstance(sub.targets[0], ast.Subscript):
                target = sub.targets[0]
                if ast.unparse(target.value) == "result" and isinstance(
                    target.slice, ast.JoinedStr
                ):
                    patterns.append(_fstring_pattern(target.slice))
    return patterns


def _generation_metrics(bench: ast.AST) -> list[str]:
    """The metric names ``benchmark()`` passes to ``process_one_metric`` without a
    values list of their own, in source order."""
    metrics: list[str] = []
    calls = [
        n
        for n in ast.walk(bench)
        if isinstance(n, ast.Call) and ast.unparse(n.func) == "process_one_metric"
    ]
    for node in sorted(calls, key=lambda n: n.lineno):
        arg = node.args[0] if node.args else None
        if isinstance(arg, ast.Constant) and len(node.args) == 3:  # no values list of its own
            metrics.append(arg.value)
    return metrics


def _is_result_json_key(node: ast.Assign) -> bool:
    """Whether ``node`` assigns ``result_json["<key>"]``."""
    t = node.targets[0]
    return (
        isinstance(t, ast.Subscript)
        and isinstance(t.value, ast.Name)
        and t.value.id == "result_json"
        and isinstance(t.slice, ast.Constant)
        and isinstance(t.slice.value, str)
    )


CHECKED_IN = {
    "setup": SETUP_FIELDS,
    "ramp_up": RAMP_UP_FIELDS,
    "result": RESULT_FIELDS,
    "detailed": DETAILED_FIELDS,
    "metric_key_patterns": METRIC_KEY_PATTERNS,
    "generation_metrics": GENERATION_METRICS,
}
"""This module's lists under :func:`fields_from_source`'s keys."""

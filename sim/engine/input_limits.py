"""Requests that meet ``max_model_len``: rejected prompts and capped outputs.

vLLM 0.33.0 semantics, kept by the simulator:

- a prompt of ``max_model_len`` tokens or more is rejected before it reaches the
  scheduler (the engine's input check; the request never runs, it has no output);
- a request whose prompt plus ``max_tokens`` exceeds ``max_model_len`` runs, and stops
  when prompt and output reach ``max_model_len`` (vLLM caps ``max_tokens`` at
  ``max_model_len - prompt`` tokens): it produces fewer output tokens than asked.

Both are counted as requests arrive (in arrival order, whichever replica serves them)
and reported in ``summary.json``::

    "rejected": {"prompt_too_long": N, "max_model_len": L, "first_request_id": ID,
                 "first_line": LINE, "first_prompt_tokens": T},
    "num_capped_outputs": M,
    "capped_outputs": {"max_model_len": L, "first_request_id": ID, "first_line": LINE},

(``first_*`` are null when there is none; ``first_line`` is the trace line of that
request, null for synthetic workloads), as one warning line each on ``kvsim run``'s
stderr and as rows of its summary table.
"""

from __future__ import annotations

from typing import Any


class InputLimits:
    """Counts of rejected and capped requests, with the first of each."""

    __slots__ = (
        "first_capped",
        "first_rejected",
        "first_rejected_tokens",
        "max_model_len",
        "num_capped",
        "num_rejected",
    )

    def __init__(self, max_model_len: int) -> None:
        self.max_model_len = max_model_len
        self.num_rejected = 0
        self.first_rejected: str | None = None
        self.first_rejected_tokens = 0
        self.num_capped = 0
        self.first_capped: str | None = None

    def observe(self, request: Any) -> bool:
        """Count one arriving workload request (``SimRequest``); True when it will be
        rejected (its token ids need not be built)."""
        prompt = request.num_prompt_tokens
        if prompt >= self.max_model_len:
            if self.num_rejected == 0:
                self.first_rejected = request.request_id
                self.first_rejected_tokens = prompt
            self.num_rejected += 1
            return True
        if prompt + request.max_tokens > self.max_model_len:
            if self.num_capped == 0:
                self.first_capped = request.request_id
            self.num_capped += 1
        return False

    def summary(self, workload: Any) -> dict[str, Any]:
        """The ``summary.json`` fields (see the module docstring); ``workload`` locates
        the first requests (``Workload.locate``)."""

        def line(request_id: str | None) -> int | None:
            locate = getattr(workload, "locate", None)
            if request_id is None or locate is None:
                return None
            return locate(request_id)

        return {
            "rejected": {
                "prompt_too_long": self.num_rejected,
                "max_model_len": self.max_model_len,
                "first_request_id": self.first_rejected,
                "first_line": line(self.first_rejected),
                "first_prompt_tokens": self.first_rejected_tokens or None,
            },
            "num_capped_outputs": self.num_capped,
            "capped_outputs": {
                "max_model_len": self.max_model_len,
                "first_request_id": self.first_capped,
                "first_line": line(self.first_capped),
            },
        }


def _first(entry: dict[str, Any]) -> str:
    """``request 'a' (line 3)`` for the first request of a summary entry."""
    text = f"request {entry['first_request_id']!r}"
    if entry.get("first_line") is not None:
        text += f" (line {entry['first_line']})"
    return text


def warnings(summary: dict[str, Any]) -> list[str]:
    """One line per kind of request that met max_model_len (none when none did)."""
    lines = []
    rejected = summary.get("rejected") or {}
    if rejected.get("prompt_too_long"):
        n, limit = rejected["prompt_too_long"], rejected["max_model_len"]
        lines.append(
            f"{n:,} of {summary['num_requests']:,} requests rejected: prompt of at least "
            f"max_model_len ({limit:,}) tokens, as vLLM rejects them; first: "
            f"{_first(rejected)}, {rejected['first_prompt_tokens']:,} tokens"
        )
    capped = summary.get("capped_outputs") or {}
    if summary.get("num_capped_outputs"):
        lines.append(
            f"{summary['num_capped_outputs']:,} of {summary['num_requests']:,} requests' "
            "outputs capped: prompt + output "
            f"tokens exceed max_model_len ({capped['max_model_len']:,}), so vLLM stops them "
            f"at max_model_len; first: {_first(capped)}"
        )
    return lines


def nothing_served_message(workload: str, summary: dict[str, Any]) -> str:
    """The one-line error when every request was rejected: names the workload file
    and, for a trace, the first offending line."""
    rejected = summary["rejected"]
    where = f"line {rejected['first_line']}: " if rejected.get("first_line") is not None else ""
    n = rejected["prompt_too_long"]
    every = f"all {n:,} requests have prompts" if n > 1 else "the only request has a prompt"
    return (
        f"{workload}: {where}max_model_len: {every} of at least max_model_len "
        f"({rejected['max_model_len']:,}) tokens, rejected as vLLM rejects them "
        f"(first: request {rejected['first_request_id']!r}, "
        f"{rejected['first_prompt_tokens']:,} tokens); "
        "raise --max-model-len or shorten the workload's prompts"
    )

"""The export formats of ``kvsim export`` and ``kvsim run --export``: names and files.

Light on imports (no pandas): ``kvsim run`` checks ``--export`` before simulating
and loads the exporters only when one is asked for.
"""

from __future__ import annotations

FORMATS = {"vllm-bench": "vllm-bench.json", "guidellm": "guidellm-benchmarks.json"}
"""Export formats and the file each writes in a run directory."""


def check_format(fmt: str, flag: str) -> str:
    """``fmt`` if it is an export format, else ValueError naming ``flag`` and the formats."""
    if fmt not in FORMATS:
        raise ValueError(f"{flag}: unknown format {fmt!r} (allowed: {', '.join(FORMATS)})")
    return fmt

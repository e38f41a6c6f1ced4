"""kvsim's KV block budget against 59 real vLLM 0.19 start-ups on H100 (the llm-d
planner's data in ``tests/data/llmd_memory/``): per start-up, every term measured and
computed, the signed error of the block count, and the medians.

    python scripts/validate_memory.py
"""

from __future__ import annotations

import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from rich.console import Console  # noqa: E402

from sim.validate.memory import memory_table, validate_memory  # noqa: E402

DATA = REPO / "tests" / "data" / "llmd_memory"


def main() -> int:
    v = validate_memory(DATA / "results_raw.csv", DATA / "configs")
    Console(width=200).print(memory_table(v))
    print(
        f"{v.count} start-ups kvsim expresses: median |error| {v.median_abs_error_pct:.2f}%, "
        f"max {v.max_abs_error_pct:.2f}%"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

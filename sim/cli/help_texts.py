"""Help lines that more than one ``kvsim`` command shows (run and plan)."""

from __future__ import annotations

STEPS_HELP = (
    "steps.csv: full (a row per engine step), thin (at most 20,000 rows: steps bucketed "
    "by time, levels sampled, counts summed) or none (not written); for long runs"
)
STEPS_FORMAT_HELP = (
    "csv (steps.csv) or parquet (steps.parquet: the same columns at full precision; "
    "needs pyarrow, kvsim's optional parquet extra)"
)
ROUTER_HELP = "round_robin, least_outstanding, least_kv or prefix_aware"

"""What a verdict (:mod:`sim.records.verdict`) is judged from: the arrival and finish
times, the latencies, the preemptions, each replica's waiting queue and its longest
streak of steps without progress; gathered from the recorders of a run that just ended
or read back from a run directory's record tables.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:  # pandas only for reading run directories back
    import pandas as pd

    from sim.records.recorders import StepRecorder
    from sim.records.request_recorder import RequestRecorder


@dataclass(frozen=True)
class VerdictInputs:
    """What a verdict is judged from.

    ``arrivals`` / ``finishes``: seconds, one per finished request; ``waiting``: per
    replica, ``(times, values)`` of ``num_waiting`` at step starts (every step or only
    where it changes: the value of the last record at or before a time is the same);
    ``longest_no_progress``: the longest streak, on one replica, of steps that decode
    nothing, counted when the streak holds a preemption; ``ttft`` / ``tpot``: seconds,
    one per finished request in the order of ``arrivals`` (TPOT NaN with one output
    token), for the measurement window.
    """

    arrivals: np.ndarray
    finishes: np.ndarray
    ttft: np.ndarray
    tpot: np.ndarray
    num_preemptions: int
    waiting: list[tuple[np.ndarray, np.ndarray]]
    longest_no_progress: int

    @classmethod
    def from_recorders(cls, steps: StepRecorder, requests: RequestRecorder) -> VerdictInputs:
        """From the recorders of a run that just ended (no file is read)."""
        waiting = [  # a replica whose queue stayed empty adds nothing
            (np.frombuffer(r.waiting_s, dtype=np.float64), np.frombuffer(r.waiting, dtype=np.int64))
            for _, r in sorted(steps.per_replica.items())
            if len(r.waiting)
        ]
        return cls(
            arrivals=np.array(requests.arrival_s, dtype=np.float64),
            finishes=np.array(requests.finish_s, dtype=np.float64),
            ttft=np.array(requests.ttft_s, dtype=np.float64),
            tpot=np.array(requests.tpot_s, dtype=np.float64),
            num_preemptions=requests.num_preemptions,
            waiting=waiting,
            longest_no_progress=max(
                (r.longest_stuck for r in steps.per_replica.values()), default=0
            ),
        )

    @classmethod
    def from_frames(cls, steps: pd.DataFrame, requests: pd.DataFrame) -> VerdictInputs:
        """From ``steps.csv`` / ``requests.csv`` columns (``STEP_USECOLS``, ...)."""
        arrivals = requests["arrival_s"].to_numpy(dtype=np.float64)
        finishes = requests["finish_s"].to_numpy(dtype=np.float64)
        first = requests["first_token_s"].to_numpy(dtype=np.float64)
        tokens = requests["output_tokens"].to_numpy(dtype=np.float64)
        with np.errstate(divide="ignore", invalid="ignore"):
            tpot = np.where(tokens > 1, (finishes - first) / (tokens - 1), np.nan)
        return cls(
            arrivals=arrivals,
            finishes=finishes,
            ttft=first - arrivals,
            tpot=tpot,
            num_preemptions=int(requests["num_preemptions"].sum()),
            waiting=[
                (g["start_s"].to_numpy(np.float64), g["num_waiting"].to_numpy())
                for _, g in steps.groupby("replica", sort=True)
            ],
            longest_no_progress=_longest_no_progress(steps) if len(steps) else 0,
        )


def _longest_no_progress(steps: pd.DataFrame) -> int:
    """Longest run, on one replica, of steps that decode nothing, if it preempts."""
    best = 0
    for _, g in steps.groupby("replica", sort=True):
        pre = g["num_preempted"].to_numpy()
        if not pre.any():
            continue
        stuck = (g["num_decode_tokens"].to_numpy() == 0).astype(np.int8)
        run = pre_in_run = 0
        for s, p in zip(stuck, pre):
            if s:
                run += 1
                pre_in_run += int(p)
                if pre_in_run > 0:
                    best = max(best, run)
            else:
                run = pre_in_run = 0
    return best

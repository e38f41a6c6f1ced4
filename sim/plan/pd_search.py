"""The fewest prefill + decode instances that meet the SLOs, and their split.

A P/D deployment's SLOs hold more easily with more instances in either pool, so
``passes(P, D)`` is monotone in both counts: more prefill or more decode instances
never turn a pass into a failure. The smallest total ``P + D`` is found by a walk
along the frontier between passing and failing splits, from the fewest prefill
instances up:

1. the corner ``(max P, max D)`` (the plan's ``pd`` counts) must pass, else no split
   within the limits does (``infeasible``);
2. for ``P = 1, 2, ...``: the only splits that could beat the best total ``T`` so far
   have ``D <= T - P - 1``; the walk probes ``(P, min(max D, T - P - 1))``; a pass
   there is bisected down to the fewest decode instances that pass with ``P``, a new
   best; a failure means no ``D`` small enough passes with ``P``;
3. the walk ends when ``T - P - 1 < 1`` or ``P`` passes its limit.

By monotonicity every split with ``T - 1`` instances then fails (each was probed, or
lies below a probed failure), so the bracket is ``[T - 1, T]`` instances. Among the
splits with the fewest instances the walk returns the one with the fewest prefill
instances. About ``max P + log2(max D)`` probes per improvement; ``max_probes`` bounds
them (status ``max_probes``: the best split found so far, no bracket).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

Split = tuple[int, int]
"""``(prefill instances, decode instances)``."""


class Unknown(LookupError):
    """Raised by an oracle that cannot say whether a split passes (it was not probed)."""


class OutOfProbes(RuntimeError):
    """Raised by an oracle whose probe budget is spent."""


@dataclass
class SplitResult:
    """The walk's outcome. ``status``: ``bracketed`` (the answer, and every split with
    one instance fewer fails), ``infeasible`` (the corner fails), ``max_probes`` (out of
    probes: ``best`` is the best split found, nothing is known below it)."""

    status: str
    best: Split | None
    frontier: list[dict[str, int | None]] = field(default_factory=list)
    """Per prefill count probed: the fewest decode instances found to pass with it
    (``decode``; None: none up to ``decode_at_most``, the largest probed)."""

    @property
    def total(self) -> int | None:
        return None if self.best is None else self.best[0] + self.best[1]


def fewest_decode(passes: Callable[[int, int], bool], p: int, high: int) -> int:
    """The fewest decode instances in ``[1, high]`` that pass with ``p`` prefill
    instances, given that ``(p, high)`` passes (integer bisection)."""
    good, bad = high, 0
    while good - bad > 1:
        mid = (good + bad) // 2
        if passes(p, mid):
            good = mid
        else:
            bad = mid
    return good


def walk_splits(
    passes: Callable[[int, int], bool], max_prefill: int, max_decode: int
) -> SplitResult:
    """The split with the fewest instances within ``[1, max_prefill] x [1,
    max_decode]`` (see the module). ``passes`` may raise :class:`OutOfProbes`
    (the result is then ``max_probes``) or :class:`Unknown` (propagated)."""
    frontier: list[dict[str, int | None]] = []
    try:
        if not passes(max_prefill, max_decode):
            return SplitResult("infeasible", None, frontier)
    except OutOfProbes:
        return SplitResult("max_probes", None, frontier)
    best: Split = (max_prefill, max_decode)
    try:
        for p in range(1, max_prefill + 1):
            high = min(max_decode, sum(best) - p - 1)
            if high < 1:
                break
            if passes(p, high):
                best = (p, fewest_decode(passes, p, high))
                frontier.append({"prefill": p, "decode": best[1], "decode_at_most": high})
            else:
                frontier.append({"prefill": p, "decode": None, "decode_at_most": high})
    except OutOfProbes:
        return SplitResult("max_probes", best, frontier)
    return SplitResult("bracketed", best, frontier)


def seed_split_answers(
    verdicts: dict[Split, list[bool]], seeds: list[int], max_prefill: int, max_decode: int
) -> dict[int, int | None]:
    """Each seed's own fewest instances: the walk replayed on that seed's verdicts at
    the splits probed (``verdicts[(P, D)][i]``: seed ``seeds[i]`` passed); None where
    its walk needs a split that was not probed, or finds none."""

    out: dict[int, int | None] = {}
    for i, seed in enumerate(seeds):

        def passes(p: int, d: int, i: int = i) -> bool:
            if (p, d) not in verdicts:
                raise Unknown((p, d))
            return verdicts[(p, d)][i]

        try:
            result = walk_splits(passes, max_prefill, max_decode)
        except Unknown:
            out[seed] = None
            continue
        out[seed] = result.total if result.status == "bracketed" else None
    return out

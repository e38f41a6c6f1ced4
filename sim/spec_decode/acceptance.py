"""How many draft tokens the target model accepts: kvsim's acceptance model.

kvsim samples no real tokens, so whether a draft token matches what the target model
would have sampled is drawn at random. The model is vLLM's rejection sampler seen
from outside: a request's drafts ``d_1 .. d_s`` are verified in order and the first
mismatch ends the run, so position ``i`` (1-based) is accepted only if positions
``< i`` were. ``rates[i-1]`` is the *conditional* acceptance rate of position ``i``
(the chance ``d_i`` is accepted given ``d_1 .. d_{i-1}`` were); one float means the
same rate at every position.

With ``k`` drafts and conditional rates ``p_1 .. p_k`` the accepted count ``a`` has

    P(a >= i) = p_1 * p_2 * ... * p_i
    E[a]      = sum_{i=1..k} p_1 * ... * p_i

and the step emits ``1 + a`` tokens (the accepted drafts and the target's own token
at the first rejected position, or the bonus token when all ``k`` are accepted). With
one rate ``p``: ``E[a] = p (1 - p^k) / (1 - p)``.

For ``ngram`` (prompt lookup) the drafter proposes only when the last n-gram of the
context occurs earlier in it: ``proposal_rate`` is the chance it finds a match and
proposes ``k`` drafts, else it proposes none (the request then decodes one token).
Per scheduled decode the mean tokens are ``1 + q * E[a]`` with ``q`` the proposal rate.

Defaults, per method (assumptions for planning, chosen to sit inside the ranges
public write-ups give; none of them is a kvsim measurement):

- ``ngram`` / ``ngram_gpu``: conditional rates 0.5, 0.45, 0.4, ... (0.05 less per
  position, at least 0.2) and a proposal rate of 0.6. vLLM's blog post "How
  Speculative Decoding Boosts vLLM Performance by up to 2.8x" (2024-10-17) reports
  prompt lookup paying off on input-grounded work (summarization, up to 2.8x) and
  little on open chat (ShareGPT); prompt lookup's own write-up
  (github.com/apoorvumang/prompt-lookup-decoding) shows the same split. Chat traffic
  therefore gets low acceptance (about 0.3-0.5 at the first positions).
- ``draft_model``: conditional rates 0.75, 0.7, 0.65, ... (at least 0.4), always
  proposing: the usual range (0.6-0.8) quoted for a small same-family draft model
  (e.g. Llama-3.2-1B for Llama-3.1-8B) on chat in the same blog post and in the
  EAGLE paper's draft-model baselines (Li et al., 2024).
- ``eagle``: 0.75, 0.68, 0.61, ... (at least 0.4); ``eagle3``: 0.8, 0.75, 0.7, ...
  (at least 0.5), always proposing. The EAGLE papers report mean acceptance lengths
  on MT-bench chat of about 3.6-3.8 tokens (EAGLE, Li et al., 2024, 5 drafts in a
  tree) and 6+ (EAGLE-3, Li et al., 2025, a tree of 8); with a chain of ``k`` drafts
  (vLLM's) these rates give a mean acceptance length of 2.8 tokens at ``k`` = 3 for
  EAGLE-3: a chain is shorter than those trees, so below their figures; an
  assumption, not a measurement.

They are planning defaults, not predictions: measure your own traffic (vLLM's
``vllm:spec_decode_num_accepted_tokens_per_pos`` over ``..._num_drafts``) and pass
the per-position rates (``acceptance_rate`` in ``--speculative-config``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

SPEC_RNG_STREAM = 0x5BEC
"""Mixed into a run's seed for the acceptance draws (independent of the workload's)."""


def _declining(first: float, step: float, floor: float, k: int) -> tuple[float, ...]:
    return tuple(max(floor, round(first - step * i, 6)) for i in range(k))


def default_rates(method: str, k: int) -> tuple[float, ...]:
    """The default conditional acceptance rate of each of ``k`` positions (see the
    module docstring for the sources)."""
    if method == "draft_model":
        return _declining(0.75, 0.05, 0.4, k)
    if method == "eagle3":
        return _declining(0.8, 0.05, 0.5, k)
    if method == "eagle":
        return _declining(0.75, 0.07, 0.4, k)
    return _declining(0.5, 0.05, 0.2, k)


def default_proposal_rate(method: str) -> float:
    """The default chance the drafter proposes (``ngram`` / ``ngram_gpu``: a lookup
    match; a draft model or EAGLE head always proposes)."""
    return 0.6 if method.startswith("ngram") else 1.0


@dataclass(frozen=True)
class AcceptanceModel:
    """Per-position conditional acceptance rates (``len(rates) == k``, each in
    [0, 1]) and the drafter's proposal rate (in [0, 1])."""

    rates: tuple[float, ...]
    proposal_rate: float = 1.0

    def __post_init__(self) -> None:
        if not self.rates:
            raise ValueError("acceptance rates: need at least one position")
        for r in (*self.rates, self.proposal_rate):
            if not 0.0 <= r <= 1.0:
                raise ValueError(f"acceptance rates must be in [0, 1], got {r!r}")

    @classmethod
    def build(
        cls,
        method: str,
        k: int,
        rates: float | Sequence[float] | None = None,
        proposal_rate: float | None = None,
    ) -> AcceptanceModel:
        """The model of ``k`` drafts of ``method``: ``rates`` one float (every
        position), ``k`` floats, or None (:func:`default_rates`); ``proposal_rate``
        None: :func:`default_proposal_rate`. ValueError on a list of another length."""
        if rates is None:
            per_pos = default_rates(method, k)
        elif isinstance(rates, (int, float)):
            per_pos = (float(rates),) * k
        else:
            per_pos = tuple(float(r) for r in rates)
            if len(per_pos) != k:
                raise ValueError(
                    f"acceptance_rate: {len(per_pos)} rates for {k} speculative tokens "
                    "(give one rate, or one per position)"
                )
        q = default_proposal_rate(method) if proposal_rate is None else float(proposal_rate)
        return cls(per_pos, q)

    @property
    def k(self) -> int:
        """Draft positions modelled."""
        return len(self.rates)

    def survival(self) -> np.ndarray:
        """``P(a >= i)`` for ``i = 1 .. k``: the running products of the rates."""
        return np.cumprod(np.array(self.rates, dtype=np.float64))

    def mean_accepted(self, num_drafts: int | None = None) -> float:
        """``E[a]`` for a draft of ``num_drafts`` tokens (default ``k``), given a
        proposal."""
        s = self.survival()[: self.k if num_drafts is None else num_drafts]
        return float(s.sum())

    def mean_tokens_per_decode(self) -> float:
        """Mean tokens one scheduled decode emits: ``1 + q * E[a]``."""
        return 1.0 + self.proposal_rate * self.mean_accepted()

    def describe(self) -> dict[str, object]:
        """The rates as ``config.yaml`` records them."""
        return {
            "acceptance_rate_per_pos": list(self.rates),
            "proposal_rate": self.proposal_rate,
            "mean_accepted_tokens": self.mean_accepted(),
            "mean_tokens_per_decode": self.mean_tokens_per_decode(),
        }


class AcceptanceSampler:
    """Draws accepted counts and proposals from one ``numpy`` Generator (a replica's,
    seeded from the run's seed): the same seed gives the same draws, in the order the
    engine asks for them."""

    def __init__(self, model: AcceptanceModel, rng: np.random.Generator) -> None:
        self.model = model
        self.rng = rng
        self._rates = np.array(model.rates, dtype=np.float64)

    @classmethod
    def seeded(cls, model: AcceptanceModel, seed: int | None, replica_id: int) -> AcceptanceSampler:
        """A sampler whose Generator comes from the run's ``seed`` (None: 0) and the
        replica's id, on a stream of its own."""
        return cls(model, np.random.default_rng([SPEC_RNG_STREAM, seed or 0, replica_id]))

    def accepted(self, num_drafts: Sequence[int]) -> list[int]:
        """The accepted count of each draft (``0 <= a <= num_drafts[j]``): leading
        successes of independent draws with the per-position rates."""
        n = len(num_drafts)
        if n == 0:
            return []
        k = self.model.k
        ok = self.rng.random((n, k)) < self._rates  # (n, k)
        # Leading run of True per row: index of the first False (k when none).
        lead = np.where(ok.all(axis=1), k, np.argmin(ok, axis=1))
        return [min(int(a), s) for a, s in zip(lead, num_drafts)]

    def proposes(self, n: int) -> list[bool]:
        """Whether the drafter proposes for each of ``n`` requests (always when the
        proposal rate is 1, without a draw)."""
        q = self.model.proposal_rate
        if q >= 1.0:
            return [True] * n
        if n == 0:
            return []
        return [bool(x) for x in self.rng.random(n) < q]

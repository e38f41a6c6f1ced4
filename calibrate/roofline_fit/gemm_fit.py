"""GEMM efficiency as a function of size, fitted to Vidur's A100 CodeLlama-34B
projections (``mlp_codellama34b.csv``: QKV, output, gated up and down projections at
TP 1/2/4/8, 1-4096 tokens).

A ``K x N`` BF16 projection of ``n`` tokens takes, on the roofline,
``max(memory, compute)`` with

* ``memory = (2 K N + W0) / (e_m BW)``: the weights streamed at ``e_m`` of HBM
  bandwidth plus a fixed cost of ``W0`` bytes' worth per kernel, so a matrix of
  ``W`` bytes reaches ``e_m W / (W + W0)`` (small matrices stream worse);
* ``compute = 2 (n + n0) K N / (e_c F)``: FLOPs at ``e_c`` of the tensor-core peak
  plus ``n0`` tokens' worth per kernel, so ``n`` tokens reach ``e_c n / (n + n0)``
  (tiles fill as the token count grows).

``e_m, W0`` are fitted on the memory-bound sizes (``n <= 32``), ``e_c`` on the
compute-bound ones (``n >= 1024``), least absolute relative error, for each ``n0`` of a
grid (0-200 tokens); ``n0`` is the one whose model errs least (median) on the ridge and
compute-bound sizes together (``n >= 64``). Every third token count is held out of all
of it; errors are reported per regime: memory-bound, ridge (``32 < n < 1024``),
compute-bound. On another GPU the roofline takes ``W0`` as the same time (``W0 / BW``:
a kernel's fixed start and drain) and ``n0`` as the same tokens, with that GPU's own
peaks ``BW`` and ``F``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from calibrate.roofline_fit.common import (
    A100_BF16_FLOPS,
    A100_HBM_BYTES_PER_S,
    DATA,
    Errors,
    holdout_mask,
    relative_lstsq,
)

HIDDEN, INTERMEDIATE, Q_HEADS, KV_HEADS, HEAD = 8192, 22016, 64, 8, 128
"""CodeLlama-34B's shapes."""
MEMORY_MAX_TOKENS, COMPUTE_MIN_TOKENS = 32, 1024


def shapes(tp: int) -> dict[str, tuple[int, int]]:
    """``(K, N)`` of each projection on one of ``tp`` ranks."""
    qkv = (Q_HEADS + 2 * KV_HEADS) * HEAD // tp
    return {
        "attn_pre_proj": (HIDDEN, qkv),
        "attn_post_proj": (Q_HEADS * HEAD // tp, HIDDEN),
        "mlp_up_proj": (HIDDEN, 2 * INTERMEDIATE // tp),
        "mlp_down_proj": (INTERMEDIATE // tp, HIDDEN),
    }


@dataclass(frozen=True)
class GemmFit:
    """Fitted curves and errors per regime (train / held-out token counts)."""

    memory_efficiency: float  # e_m
    kernel_bytes: float  # W0

    @property
    def kernel_s(self) -> float:
        """``W0`` in seconds at the A100's peak HBM bandwidth."""
        return self.kernel_bytes / A100_HBM_BYTES_PER_S

    compute_efficiency: float  # e_c
    kernel_tokens: float  # n0
    memory_train: Errors
    memory_holdout: Errors
    compute_train: Errors
    compute_holdout: Errors
    ridge_train: Errors
    ridge_holdout: Errors

    def predict(
        self,
        n: np.ndarray,
        k: np.ndarray,
        nn: np.ndarray,
        bw: float = A100_HBM_BYTES_PER_S,
        flops: float = A100_BF16_FLOPS,
    ) -> np.ndarray:
        """Seconds of ``n``-token ``K x N`` BF16 projections (module docstring)."""
        memory = (2.0 * k * nn + self.kernel_bytes) / (self.memory_efficiency * bw)
        compute = 2.0 * (n + self.kernel_tokens) * k * nn / (self.compute_efficiency * flops)
        return np.maximum(memory, compute)


def load() -> pd.DataFrame:
    """Long form: ``tp, num_tokens, op, k, n_out, seconds``."""
    wide = pd.read_csv(DATA / "mlp_codellama34b.csv")
    rows = []
    for tp, sub in wide.groupby("tp"):
        for op, (k, n_out) in shapes(int(tp)).items():
            rows.append(
                pd.DataFrame(
                    {
                        "tp": int(tp),
                        "num_tokens": sub.num_tokens.to_numpy(),
                        "op": op,
                        "k": k,
                        "n_out": n_out,
                        "seconds": sub[op + "_ms"].to_numpy() * 1e-3,
                    }
                )
            )
    return pd.concat(rows, ignore_index=True)


def fit_gemm(data: pd.DataFrame | None = None) -> GemmFit:
    """The fit of the module docstring."""
    d = load() if data is None else data
    n = d.num_tokens.to_numpy(np.float64)
    k, nn = d.k.to_numpy(np.float64), d.n_out.to_numpy(np.float64)
    y = d.seconds.to_numpy(np.float64)
    held = holdout_mask(n)
    mem = n <= MEMORY_MAX_TOKENS
    comp = n >= COMPUTE_MIN_TOKENS
    bw, f = A100_HBM_BYTES_PER_S, A100_BF16_FLOPS
    x_mem = np.column_stack([2.0 * k * nn / bw, np.full_like(n, 1.0 / bw)])
    a, b = relative_lstsq(x_mem[mem & ~held], y[mem & ~held])
    x_comp = 2.0 * n * k * nn / f
    best: tuple[float, float, float] | None = None  # (error, n0, 1 / e_c)
    for n0 in np.arange(0.0, 201.0, 2.0):
        x = (x_comp + 2.0 * n0 * k * nn / f)[:, None]
        inv = relative_lstsq(x[comp & ~held], y[comp & ~held])[0]
        pred = np.maximum((x_mem @ np.array([a, b])), x[:, 0] * inv)
        err = float(np.median(np.abs(pred / y - 1.0)[(n >= 2 * MEMORY_MAX_TOKENS) & ~held]))
        if best is None or err < best[0]:
            best = (err, float(n0), float(inv))
    assert best is not None
    fit = GemmFit(1.0 / a, b / a, 1.0 / best[2], best[1], *([Errors(0, 0.0, 0.0)] * 6))
    pred = fit.predict(n, k, nn)
    ridge = ~mem & ~comp

    def errs(sel: np.ndarray) -> tuple[Errors, Errors]:
        return Errors.of(pred[sel & ~held], y[sel & ~held]), Errors.of(
            pred[sel & held], y[sel & held]
        )

    return GemmFit(
        fit.memory_efficiency, fit.kernel_bytes, fit.compute_efficiency, fit.kernel_tokens,
        *errs(mem), *errs(comp), *errs(ridge),
    )  # fmt: skip

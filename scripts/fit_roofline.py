"""Fit the roofline's size curves and NCCL's all-reduce costs to Vidur's public A100-80GB
measurements (``tests/data/vidur_a100``) and print each fit with its errors: on the
sizes fitted, on held-out sizes, and, for comparison, the errors of the constant
efficiencies kvsim used before (0.75 of HBM, 0.7 of the GEMM peak, 0.3 for attention,
a 10 us kernel floor, 20 us + 0.6 of the link per all-reduce) on the same held-out
points.

    python scripts/fit_roofline.py
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pandas as pd

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from calibrate.roofline_fit import allreduce_fit, attention_fit, gemm_fit  # noqa: E402
from calibrate.roofline_fit.common import A100_BF16_FLOPS as F  # noqa: E402
from calibrate.roofline_fit.common import A100_HBM_BYTES_PER_S as BW  # noqa: E402
from calibrate.roofline_fit.common import DATA, Errors, holdout_mask  # noqa: E402


def _row(name: str, e: Errors) -> str:
    return f"  {name:34} n={e.n:5d}  median {100 * e.median:5.1f}%  p90 {100 * e.p90:5.1f}%"


def main() -> int:
    print("all-reduce (NCCL ring: latency + 2(w-1)/w S / (efficiency * link))")
    ar = allreduce_fit.load()
    for f in allreduce_fit.fit_nccl(ar):
        print(f"  {f.workers} GPUs over {f.link}: latency {1e6 * f.latency_s:.1f} us, "
              f"efficiency {f.efficiency:.3f}")  # fmt: skip
        print(_row("fitted sizes", f.train))
        print(_row("held-out sizes", f.holdout))
        x = ar[(ar.num_workers == f.workers) & (ar.size_bytes <= allreduce_fit.MAX_BYTES)]
        size = x.size_bytes.to_numpy(np.float64)
        held = holdout_mask(size)
        link = allreduce_fit.LINKS[f.workers][1]
        old = allreduce_fit.predict(size, f.workers, link, 20e-6, 0.6)
        measured = 1e-3 * x.all_reduce_ms.to_numpy()
        print(_row("held-out, 20 us + 0.6 of link", Errors.of(old[held], measured[held])))

    g = gemm_fit.fit_gemm()
    print("GEMM (max of (2KN + W0) / (e_m BW) and 2 (n + n0) K N / (e_c F))")
    print(f"  e_m {g.memory_efficiency:.3f}, W0 {g.kernel_bytes / 1e6:.2f} MB "
          f"({1e6 * g.kernel_s:.2f} us at peak), "
          f"e_c {g.compute_efficiency:.3f}, n0 {g.kernel_tokens:.1f} tokens")  # fmt: skip
    names = ("memory", "ridge", "compute")
    for name in [f"{r}_{part}" for r in names for part in ("train", "holdout")]:
        print(_row(name.replace("_", " "), getattr(g, name)))
    d = gemm_fit.load()
    n, k, nn = (d[c].to_numpy(np.float64) for c in ("num_tokens", "k", "n_out"))
    old = np.maximum(2 * k * nn / (0.75 * BW), 2 * n * k * nn / (0.7 * F))
    held = holdout_mask(n)
    for name, sel in (
        ("memory held-out, constants", (n <= gemm_fit.MEMORY_MAX_TOKENS) & held),
        ("compute held-out, constants", (n >= gemm_fit.COMPUTE_MIN_TOKENS) & held),
        (
            "ridge held-out, constants",
            (n > gemm_fit.MEMORY_MAX_TOKENS) & (n < gemm_fit.COMPUTE_MIN_TOKENS) & held,
        ),
    ):
        print(_row(name, Errors.of(old[sel], d.seconds.to_numpy()[sel])))

    dec = attention_fit.fit_decode()
    print(f"decode attention: floor {1e6 * dec.floor_s:.1f} us, efficiency {dec.efficiency:.3f}")
    print(_row("fitted kv sizes", dec.train))
    print(_row("held-out kv sizes", dec.holdout))
    x = pd.read_csv(DATA / "attention_decode_tp2.csv")
    kv = x.batch_size * x.kv_cache_size * attention_fit.KV_BYTES_PER_TOKEN
    old = 10e-6 + kv.to_numpy() / (0.75 * BW)
    held = holdout_mask(x.kv_cache_size.to_numpy())
    print(_row("held-out, constants", Errors.of(old[held], 1e-3 * x.decode_ms.to_numpy()[held])))

    pre = attention_fit.fit_prefill()
    print(f"prefill attention: floor {1e6 * pre.floor_s:.1f} us, efficiency {pre.efficiency:.3f}, "
          f"causal weight {pre.causal_weight:.2f}")  # fmt: skip
    print(_row("fitted chunk sizes", pre.train))
    print(_row("held-out chunk sizes", pre.holdout))
    x = pd.read_csv(DATA / "attention_prefill_tp2.csv")
    q, c = x.prefill_chunk_size.to_numpy(np.float64), x.kv_cache_size.to_numpy(np.float64)
    pairs = q * c + q * (q + 1) / 2
    old = 10e-6 + pairs * attention_fit.FLOPS_PER_PAIR / (0.3 * F)
    held = holdout_mask(q)
    print(_row("held-out, constants", Errors.of(old[held], 1e-3 * x.prefill_ms.to_numpy()[held])))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

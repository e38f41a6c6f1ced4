"""The GPU check behind ``calibrate/gpu_check.sh``: versions, Triton vs reference in
bf16, then a quick CUDA calibration (sweep + profile_run) of a Llama-3.1-8B-shaped
model with fewer layers. Writes ``calibration.yaml``, ``calibration.csv`` and
``kernel_check.json`` into the output directory. Needs torch, triton, numpy, pydantic
and PyYAML; no network.
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import time
from pathlib import Path


def kernel_check() -> dict[str, object]:
    """Max abs error of the Triton kernel against the reference, 8B-shaped heads."""
    import torch as t

    from calibrate.harness.paged_attention import paged_attention_reference
    from calibrate.harness.triton_attention import triton_paged_attention

    g = t.Generator(device="cuda").manual_seed(0)
    out: dict[str, object] = {}
    for dtype in (t.bfloat16, t.float16):
        nb, bs, hkv, hq, d = 2048, 16, 8, 32, 128
        k = t.randn(nb, bs, hkv, d, device="cuda", generator=g).to(dtype)
        v = t.randn(nb, bs, hkv, d, device="cuda", generator=g).to(dtype)
        q_lens, seq_lens = [1, 300, 1, 1, 517, 64], [2000, 300, 45, 1500, 1517, 4000]
        table = t.randperm(nb, device="cuda", generator=g)[: 6 * 256].view(6, 256).int()
        qsl = t.tensor([0, *t.tensor(q_lens).cumsum(0).tolist()], dtype=t.int32, device="cuda")
        lens = t.tensor(seq_lens, dtype=t.int32, device="cuda")
        q = t.randn(sum(q_lens), hq, d, device="cuda", generator=g).to(dtype)
        for window in (None, 1024):
            ref = paged_attention_reference(q, k, v, table, lens, qsl, d**-0.5, window)
            got = triton_paged_attention(q, k, v, table, lens, qsl, d**-0.5, window)
            err = (got.float() - ref.float()).abs().max().item()
            out[f"{str(dtype).split('.')[-1]}_window{window}_max_abs_err"] = err
    ok = all(v < 3e-2 for v in out.values())  # type: ignore[operator]
    out["ok"] = ok
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="gpu_check")
    ap.add_argument("out_dir")
    ap.add_argument("--model", default="Llama-3.1-8B")
    ap.add_argument("--num-layers", type=int, default=8)
    args = ap.parse_args(argv)
    out = Path(args.out_dir)
    out.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    import torch
    import triton

    print(f"python {platform.python_version()} torch {torch.__version__} "
          f"triton {triton.__version__} cuda {torch.version.cuda}")  # fmt: skip
    if not torch.cuda.is_available():
        print("no CUDA device", file=sys.stderr)
        return 2
    print(f"device {torch.cuda.get_device_name(0)}, "
          f"{torch.cuda.mem_get_info(0)[1] / 2**30:.1f} GiB")  # fmt: skip
    kc = kernel_check()
    print("kernel check:", json.dumps(kc))
    (out / "kernel_check.json").write_text(json.dumps(kc, indent=1))

    from calibrate.budget import compute_kv_budget
    from calibrate.catalog import load_model
    from calibrate.harness.measure import CalibrateOptions, calibrate

    def progress(phase: str, done: int, total: int) -> None:
        if done == total or done % 20 == 0:
            print(f"  {phase} {done}/{total} ({time.perf_counter() - t0:.0f} s)", flush=True)

    opts = CalibrateOptions(
        "cuda", args.model, 1, True, str(out / "calibration.yaml"), args.num_layers
    )
    cal, path, csv_path = calibrate(opts, progress)
    lat, kv = cal.latency, cal.kv_budget
    print("coefficients:", json.dumps(lat.coefficients))
    print("holdout MAPE:", json.dumps({k: round(v, 4) for k, v in lat.holdout_mape.items()}))
    print("kv budget:", json.dumps(kv))
    if cal.gpu.catalog_name:
        analytic = compute_kv_budget(
            load_model(args.model), cal.gpu.as_gpu_spec(),
            max_model_len=kv["max_model_len"], cudagraph_memory_bytes=kv["cudagraph_bytes"],
        )  # fmt: skip
        print(f"num_gpu_blocks measured {kv['num_gpu_blocks']} vs analytic "
              f"{analytic.num_gpu_blocks}")  # fmt: skip
    print(f"wrote {path} and {csv_path} in {time.perf_counter() - t0:.0f} s")
    return 0 if kc["ok"] else 1


if __name__ == "__main__":
    raise SystemExit(main())

"""Body of ``kvsim calibrate``: progress bar, run, printed summary (exit 0/2)."""

from __future__ import annotations

import signal
import sys
import time
from collections.abc import Callable

from rich.console import Console
from rich.progress import Progress
from rich.table import Table

from calibrate.calibration_file import Calibration
from calibrate.gpu_spec import GIB

BUDGET_ROWS = (
    "total_memory_bytes",
    "requested_memory_bytes",
    "weights_bytes",
    "missing_layer_bytes",
    "total_consumed_bytes",
    "transient_peak_headroom_bytes",
    "non_torch_increase_bytes",
    "cudagraph_bytes",
    "available_kv_bytes",
    "bytes_per_block",
)


def _fail(message: str) -> int:
    print(f"kvsim: error: {message}", file=sys.stderr)
    return 2


def _summary(cal: Calibration, wall_s: float) -> list[Table]:
    lat, gpu, budget = cal.latency, cal.gpu, cal.kv_budget
    head = Table(
        title=f"calibration: {cal.model.name} on {gpu.name} ({cal.device}, "
        f"TP {cal.tensor_parallel_size}, {cal.dtype}, {cal.attention_backend})"
    )
    head.add_column("coefficient")
    head.add_column("value", justify="right")
    for name, value in lat.coefficients.items():
        head.add_row(name, f"{value:.4g}")
    total = lat.num_train + lat.num_holdout
    err = Table(title=f"holdout MAPE ({lat.num_holdout} of {total} steps held out)")
    err.add_column("regime")
    err.add_column("holdout", justify="right")
    err.add_column("train", justify="right")
    for regime, value in lat.holdout_mape.items():
        err.add_row(regime, f"{100 * value:.1f} %", f"{100 * lat.train_mape.get(regime, 0):.1f} %")
    mem = Table(title=f"KV budget terms (per rank; {wall_s:.1f} s in all)")
    mem.add_column("term")
    mem.add_column("GiB", justify="right")
    mem.add_column("bytes", justify="right")
    for key in BUDGET_ROWS:
        mem.add_row(key.removesuffix("_bytes"), f"{budget[key] / GIB:,.3f}", f"{budget[key]:,}")
    mem.add_row("num_gpu_blocks", f"{budget['num_gpu_blocks']:,}")
    return [head, err, mem]


def calibrate_command(
    progress_bar: Callable[[Console], Progress],
    device: str = "cpu",
    model: str | None = None,
    tp: int = 1,
    quick: bool = False,
    out: str | None = None,
    num_layers: int | None = None,
    force: bool = False,
) -> int:
    """Run ``kvsim calibrate`` with the CLI's ``progress_bar``; return the exit status."""
    if device not in ("cpu", "cuda"):
        return _fail(f"--device: unknown {device!r}; allowed: cpu, cuda")
    if tp < 1:
        return _fail(f"--tp must be >= 1, got {tp}")
    try:
        import torch  # noqa: F401
    except ImportError:
        return _fail("kvsim calibrate needs torch: pip install 'kvsim[calibrate]'")
    from calibrate.harness.measure import CalibrateOptions, calibrate

    opts = CalibrateOptions(device, model, tp, quick, out, num_layers, force=force)
    console = Console(stderr=True)
    start = time.perf_counter()
    try:
        with progress_bar(console) as progress:
            task = progress.add_task("profile_run", total=1)

            def report(phase: str, done: int, total: int) -> None:
                progress.update(task, description=phase, completed=done, total=total)

            cal, path, csv_path = calibrate(opts, report)
    except ValueError as exc:
        return _fail(str(exc))
    except KeyboardInterrupt as exc:
        # SIGTERM / SIGHUP arrive as KeyboardInterrupt subclasses carrying ``signum``.
        signum = getattr(exc, "signum", signal.SIGINT)
        print(
            f"kvsim: interrupted ({signal.Signals(signum).name}); no calibration file "
            "written (an earlier one is unchanged)",
            file=sys.stderr,
        )
        return 128 + int(signum)
    out_console = Console()
    for table in _summary(cal, time.perf_counter() - start):
        out_console.print(table)
    out_console.print(f"wrote {path} and {csv_path}")
    return 0

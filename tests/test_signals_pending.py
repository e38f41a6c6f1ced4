"""A SIGTERM whose exception Python swallowed (raised inside an at-fork hook, a
``__del__``...) is raised again at the run's next finished request."""

from __future__ import annotations

import contextlib
import signal

import pytest

from sim import signals

HANDLED = (signal.SIGTERM, signal.SIGHUP, signal.SIGINT)


def test_a_swallowed_terminated_is_raised_again_once() -> None:
    saved = {sig: signal.getsignal(sig) for sig in HANDLED}
    try:
        # What Python does with an exception raised in a __del__ or a fork hook:
        with contextlib.suppress(signals.Terminated):
            signals._raise(signal.SIGTERM, None)
        with pytest.raises(signals.Terminated) as err:
            signals.raise_pending()
        assert err.value.signum == signal.SIGTERM
        signals.raise_pending()  # once: nothing pending any more
    finally:
        for sig, handler in saved.items():
            signal.signal(sig, handler)


def test_a_swallowed_ctrl_c_is_raised_again_as_a_keyboard_interrupt() -> None:
    saved = {sig: signal.getsignal(sig) for sig in HANDLED}
    try:
        with contextlib.suppress(KeyboardInterrupt):
            signals._raise(signal.SIGINT, None)
        assert signal.getsignal(signal.SIGTERM) == signal.SIG_IGN  # cleanup runs once
        with pytest.raises(KeyboardInterrupt) as err:
            signals.raise_pending()
        assert not isinstance(err.value, signals.Terminated)  # "interrupted", exit 130
        assert signals.exit_status(err.value) == 130
        signals.raise_pending()
    finally:
        for sig, handler in saved.items():
            signal.signal(sig, handler)


def test_a_run_raises_a_pending_signal_at_its_first_finish(tmp_path, monkeypatch) -> None:
    from sim_run_helpers import run_sim, write_yaml

    workload = write_yaml(
        tmp_path / "w.yaml",
        {
            "name": "w",
            "arrival": {"type": "poisson", "rate": 5.0},
            "prompt_len": 32,
            "output_len": 4,
            "num_requests": 50,
        },
    )
    monkeypatch.setattr(signals, "_pending", signal.SIGHUP)
    with pytest.raises(signals.Terminated):
        run_sim(workload, tmp_path / "out")
    assert not (tmp_path / "out").exists()  # a failed run leaves nothing complete
    assert signals._pending is None


WORKER = """
import os, sys, time
sys.path.insert(0, {root!r})
from pathlib import Path
from sim import signals

out = Path({out!r})

def point():
    try:
        (out / "started").write_text("")
        time.sleep(60)
    finally:  # the point's cleanup (a run's: its helpers reaped, its directory removed)
        time.sleep(1.0)
        (out / "cleaned").write_text("")

signals.worker_init(os.getppid())
signals.run_in_worker(point)
"""


def test_a_second_signal_does_not_cut_a_workers_cleanup_short(tmp_path) -> None:
    """A sweep worker whose parent dies gets SIGTERM twice (the kernel's parent-death
    signal and the watchdog's, up to 0.5 s apart): the second must not interrupt the
    cleanup the first started (it once left a point's temporary directory behind)."""
    import subprocess
    import sys
    import time
    from pathlib import Path

    root = str(Path(__file__).resolve().parents[1])
    code = WORKER.format(root=root, out=str(tmp_path))
    proc = subprocess.Popen([sys.executable, "-c", code])
    try:
        deadline = time.monotonic() + 30
        while not (tmp_path / "started").exists():
            assert time.monotonic() < deadline and proc.poll() is None, "the worker did not start"
            time.sleep(0.02)
        proc.send_signal(signal.SIGTERM)
        time.sleep(0.3)  # inside the cleanup
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 128 + signal.SIGTERM
    finally:
        if proc.poll() is None:
            proc.kill()
    assert (tmp_path / "cleaned").exists()


SWALLOWED = """
import contextlib, os, signal, sys
sys.path.insert(0, {root!r})
from sim import signals

def point():
    # A SIGTERM whose exception is swallowed (as in a __del__ or a fork hook).
    with contextlib.suppress(signals.Terminated):
        os.kill(os.getpid(), signal.SIGTERM)
        signal.pthread_sigmask(signal.SIG_BLOCK, [])  # a point where the handler runs
    return "done"

signals.worker_init(os.getppid())
signals.run_in_worker(point)
print("idle", flush=True)
"""


def test_a_worker_whose_signal_was_swallowed_ends_after_its_point(tmp_path) -> None:
    """Its handlers ignore signals after the first, so it must not go back to waiting
    idle for points from a parent that is gone."""
    import subprocess
    import sys
    from pathlib import Path

    root = str(Path(__file__).resolve().parents[1])
    done = subprocess.run(
        [sys.executable, "-c", SWALLOWED.format(root=root)],
        capture_output=True, text=True, timeout=30, check=False,
    )  # fmt: skip
    assert done.returncode == 128 + signal.SIGTERM and "idle" not in done.stdout

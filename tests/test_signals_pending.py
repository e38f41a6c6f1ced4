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

"""Signals: SIGTERM and SIGHUP end kvsim the way Ctrl-C does, and no process kvsim
starts outlives it.

In the main process, :func:`install` turns SIGTERM and SIGHUP into :class:`Terminated`,
a ``KeyboardInterrupt``, so the cleanup that runs on Ctrl-C (temporary directories
removed, helper processes reaped, one line saying what was kept) runs for them too.
Worker processes (sweep points) call :func:`worker_init`: they get SIGTERM when their
parent dies (Linux ``PR_SET_PDEATHSIG``, and a watchdog thread everywhere), clean up
the point they are running and exit; an idle worker exits at once.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import sys
import threading
import time
from collections.abc import Callable
from types import FrameType
from typing import Any, TypeVar

T = TypeVar("T")

_PR_SET_PDEATHSIG = 1
_HANDLED = (signal.SIGTERM, signal.SIGHUP)
_busy = False
_pending: int | None = None
"""The signal whose :class:`Terminated` was last raised, until :func:`raise_pending`."""


class Terminated(KeyboardInterrupt):
    """The process got SIGTERM or SIGHUP (``signum``)."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


def _interrupt(signum: int) -> KeyboardInterrupt:
    """What a signal raises: ``KeyboardInterrupt`` for SIGINT (Ctrl-C), else
    :class:`Terminated`."""
    return KeyboardInterrupt() if signum == signal.SIGINT else Terminated(signum)


def _first_signal(signum: int) -> None:
    """Cleanup runs once: later signals are ignored, so none cuts it short; ``signum``
    is kept for :func:`raise_pending` in case its exception is swallowed."""
    global _pending
    for sig in (*_HANDLED, signal.SIGINT):
        signal.signal(sig, signal.SIG_IGN)
    _pending = signum


def _raise(signum: int, frame: FrameType | None) -> None:
    _first_signal(signum)
    raise _interrupt(signum)


def raise_pending() -> None:
    """Raise the interrupt again for a signal whose first one was swallowed.

    Python ignores (prints and drops) an exception raised where it cannot propagate:
    a ``__del__``, a weakref callback, an at-fork hook such as logging's. A SIGTERM or
    a Ctrl-C that lands there would be lost, and with the handlers now ignoring them
    the run would go on to its end (a test saw a SIGINT lost so, under load). Long
    loops call this at points they pass often (each finished request): it raises once,
    then clears. When the first exception did
    propagate, nothing calls this again before the process ends.
    """
    global _pending
    if _pending is not None:
        signum, _pending = _pending, None
        raise _interrupt(signum)


def install() -> None:
    """Main process: SIGTERM and SIGHUP raise :class:`Terminated`, SIGINT
    ``KeyboardInterrupt`` as Python's own handler does (in the main thread), each
    remembered until it propagates (:func:`raise_pending`)."""
    for sig in (*_HANDLED, signal.SIGINT):
        signal.signal(sig, _raise)


def interrupted(exc: BaseException) -> str:
    """``interrupted`` or ``interrupted (SIGTERM)``, for one line on stderr."""
    if isinstance(exc, Terminated):
        return f"interrupted ({signal.Signals(exc.signum).name})"
    return "interrupted"


def exit_status(exc: BaseException) -> int:
    """The shell's status for a process ended by the signal behind ``exc`` (128 + n)."""
    signum = exc.signum if isinstance(exc, Terminated) else signal.SIGINT
    return 128 + int(signum)


def die_with_parent(sig: int, parent: int) -> None:
    """Have ``sig`` sent to this process when its parent (pid ``parent``) dies: by the
    kernel on Linux (``PR_SET_PDEATHSIG``) and, everywhere, by a thread that watches
    the parent every 0.5 s. The kernel's signal alone once left an idle sweep worker
    orphaned and waiting on its task queue (on a clean-clone CI run whose sweep was
    killed; its SIGTERM handler was still in place, so no signal had come). The cause
    was not found: the kernel sends it when the *thread* that forked the process ends,
    which need not be when the parent process does."""
    if sys.platform.startswith("linux"):
        with contextlib.suppress(OSError, AttributeError):
            libc = ctypes.CDLL(None, use_errno=True)
            libc.prctl(_PR_SET_PDEATHSIG, int(sig), 0, 0, 0)
    threading.Thread(target=_watch_parent, args=(sig, parent), daemon=True).start()
    if os.getppid() != parent:  # the parent died before we were armed
        os.kill(os.getpid(), sig)


def _watch_parent(sig: int, parent: int) -> None:
    while os.getppid() == parent:
        time.sleep(0.5)
    os.kill(os.getpid(), sig)


def _worker_signal(signum: int, frame: FrameType | None) -> None:
    if _busy:
        # Its parent's death sends two (the kernel's and the watchdog's): the second
        # must not cut the point's cleanup short and leave its directory behind.
        _first_signal(signum)
        raise Terminated(signum)
    os._exit(128 + signum)


def worker_init(parent: int) -> None:
    """Initializer of a worker process forked by ``parent``: SIGTERM, SIGHUP and SIGINT
    interrupt the point being run (see :func:`run_in_worker`) or end an idle worker;
    the parent's death sends SIGTERM."""
    for sig in (*_HANDLED, signal.SIGINT):
        signal.signal(sig, _worker_signal)
    die_with_parent(signal.SIGTERM, parent)


def run_in_worker(fn: Callable[..., T], *args: Any) -> T:
    """Call ``fn(*args)`` in a worker set up by :func:`worker_init`. Interrupted, ``fn``
    cleans up as on Ctrl-C and the worker exits (it is not reused)."""
    global _busy
    _busy = True
    try:
        result = fn(*args)
    except KeyboardInterrupt as e:
        os._exit(exit_status(e))
    finally:
        _busy = False
    if _pending is not None:
        # A signal came and its exception was swallowed: the point is done, and this
        # worker, whose handlers now ignore signals, ends instead of waiting idle.
        os._exit(128 + _pending)
    return result

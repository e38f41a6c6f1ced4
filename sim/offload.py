"""Helper processes for a single run: record writing and workload drawing off the loop.

The simulation loop is one Python thread. Some pieces of a run do not depend on what
the loop decides next: formatting and writing the rows of ``steps.csv`` and
``requests.csv`` (the loop only hands over raw values), and drawing an open-loop
workload's requests (what request ``i`` holds depends on the seed and ``i`` alone).
On a machine with a spare CPU each runs in a forked helper process and talks to the
loop through a pipe (pickled chunks); the results are the same bytes as doing the work
in the loop, because both sides run the same code on the same inputs in the same
order.

Helpers are used when ``allowed()``: POSIX ``fork`` exists, this process may run on
at least two CPUs, and ``KVSIM_HELPERS`` is not ``0``. Sweeps turn them off in their
workers (they already use every CPU). A helper never returns into the caller's
code: it leaves with ``os._exit`` (no ``atexit``, no flushing of the parent's
buffers), with garbage collection off so no inherited object is finalized.
"""

from __future__ import annotations

import contextlib
import gc
import os
import pickle
import signal
import sys
import traceback
from collections.abc import Callable, Iterator
from typing import Any, BinaryIO, Protocol

from sim.signals import die_with_parent

ENV_SWITCH = "KVSIM_HELPERS"


def allowed() -> bool:
    """Whether helper processes may be used here (see the module docstring)."""
    if os.environ.get(ENV_SWITCH, "1") == "0" or not hasattr(os, "fork"):
        return False
    try:
        return len(os.sched_getaffinity(0)) >= 2
    except AttributeError:  # no sched_getaffinity (not Linux)
        return (os.cpu_count() or 1) >= 2


PIPE_BYTES = 1 << 20
"""Pipe capacity asked for (Linux caps it at ``/proc/sys/fs/pipe-max-size``, 1 MiB by
default): a chunk that fits is written without waiting for the other side to wake."""


def _pipe() -> tuple[int, int]:
    read_fd, write_fd = os.pipe()
    with contextlib.suppress(ImportError, AttributeError, OSError):  # not Linux; a limit
        import fcntl

        fcntl.fcntl(write_fd, fcntl.F_SETPIPE_SZ, PIPE_BYTES)
    return read_fd, write_fd


HELPER_NICENESS = 10
"""How much lower a helper's scheduling priority is than the run's (``os.nice``). On
two CPUs the loop and three helpers plus the report's worker are often runnable at
once, and at equal priority the kernel shares the loop's CPU with them. A helper at
lower priority takes the loop's CPU mostly while the loop waits. On the 20,000-request
trace of ``tests/bench/bench_user_path.py``, whole processes paired with and without:
wall 0.983 and 0.963 (medians of 12 pairs, two rounds).
The report's worker runs lower still (``reports.render_worker.NICENESS``)."""


def lower_priority(niceness: int = HELPER_NICENESS) -> None:
    """Make this process ``niceness`` steps nicer (lower priority); where the system
    has no ``os.nice`` or refuses, leave it."""
    with contextlib.suppress(AttributeError, OSError):
        os.nice(niceness)


class HelperFailed(RuntimeError):
    """A helper process died or exited with an error."""


def _child_exit(body: Callable[[], None], parent: int) -> None:
    """Run ``body`` in a freshly forked child of ``parent`` and leave the process;
    never returns."""
    status = 0
    try:
        gc.disable()
        # The parent decides (its cleanup closes our pipe: EOF ends us); its death
        # ends us too.
        for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
            signal.signal(sig, signal.SIG_IGN)
        die_with_parent(signal.SIGKILL, parent)
        lower_priority()
        body()
    except BrokenPipeError:
        status = 0  # the parent stopped reading (a producer no longer needed)
    except BaseException:
        status = 1
        with contextlib.suppress(BaseException):
            os.write(2, traceback.format_exc().encode(errors="replace"))
    finally:
        os._exit(status)


_PARENT_ENDS: set[int] = set()
"""This process's ends of its helpers' pipes (file descriptors), while open: a helper
forked later closes its copies, so that each helper's pipe ends (EOF) when this process
closes its end, whatever order the helpers are closed in."""


def _fork_helper(serve: Callable[[BinaryIO], None], helper_writes: bool) -> tuple[int, BinaryIO]:
    """Fork a helper that runs ``serve`` on its end of a new pipe (the end it writes
    when ``helper_writes``); return its pid and this process's end."""
    read_fd, write_fd = _pipe()
    mine, theirs = (read_fd, write_fd) if helper_writes else (write_fd, read_fd)
    sys.stdout.flush()
    sys.stderr.flush()
    parent = os.getpid()
    pid = os.fork()
    if pid == 0:
        os.close(mine)
        for fd in _PARENT_ENDS:  # the other helpers' pipes
            with contextlib.suppress(OSError):
                os.close(fd)

        def body() -> None:
            with os.fdopen(theirs, "wb" if helper_writes else "rb", buffering=1 << 16) as pipe:
                serve(pipe)

        _child_exit(body, parent)
    os.close(theirs)
    _PARENT_ENDS.add(mine)
    return pid, os.fdopen(mine, "rb" if helper_writes else "wb", buffering=1 << 16)


def _close_end(pipe: BinaryIO) -> None:
    """Close this process's end of a helper's pipe."""
    _PARENT_ENDS.discard(pipe.fileno())
    pipe.close()


def _wait(pid: int, what: str) -> None:
    _, status = os.waitpid(pid, 0)
    code = os.waitstatus_to_exitcode(status)
    if code != 0:
        raise HelperFailed(f"the {what} helper process failed (exit status {code})")


class Consumer(Protocol):
    """What a :class:`ChunkWriter` feeds: ``write`` each chunk, then ``close``."""

    def write(self, chunk: Any) -> None: ...

    def close(self) -> None: ...


class ChunkWriter:
    """Hands chunks to ``consumer`` in a forked helper (or calls it in-process when
    ``fork`` is False). The consumer is built before the fork, so opening its file
    fails here, in the caller, when it fails; it must hold no unwritten buffered data
    at the fork (the parent closes its copy without using it again)."""

    def __init__(self, consumer: Consumer, fork: bool, what: str) -> None:
        self._consumer = consumer
        self._what = what
        self._pid = 0
        self._pipe: Any = None
        self._finished = False
        if not fork:
            return
        self._pid, self._pipe = _fork_helper(self._serve, helper_writes=False)
        consumer.close()  # the helper owns the consumer's file now

    def _serve(self, pipe: BinaryIO) -> None:
        consumer = self._consumer
        while True:
            try:
                chunk = pickle.load(pipe)
            except EOFError:
                break
            consumer.write(chunk)
        consumer.close()

    def write(self, chunk: Any) -> None:
        """Write one chunk (in order)."""
        if self._pipe is None:
            self._consumer.write(chunk)
            return
        try:
            pickle.dump(chunk, self._pipe, protocol=pickle.HIGHEST_PROTOCOL)
        except BrokenPipeError:
            pid, self._pid = self._pid, 0
            pipe, self._pipe = self._pipe, None
            self._finished = True
            with contextlib.suppress(OSError):  # what it still buffers cannot go
                _close_end(pipe)
            _wait(pid, self._what)
            raise HelperFailed(f"the {self._what} helper process stopped early") from None

    def finish(self) -> None:
        """No more chunks: the consumer is closed, by the helper once it has written
        what it was handed (this does not wait for it: the caller may work meanwhile),
        or here when there is no helper. Nothing may be written after it."""
        if self._finished:
            return
        self._finished = True
        pipe, self._pipe = self._pipe, None
        if pipe is not None:
            _close_end(pipe)
        elif self._pid == 0:
            self._consumer.close()

    def close(self) -> None:
        """:meth:`finish`, then wait for the helper; raises :class:`HelperFailed` when
        it failed."""
        try:
            self.finish()
        finally:
            pid, self._pid = self._pid, 0
            if pid:
                _wait(pid, self._what)


class ChunkReader:
    """Iterates over the chunks ``produce()`` yields, produced ahead in a forked
    helper. :meth:`close` stops the helper wherever it is."""

    def __init__(self, produce: Callable[[], Iterator[Any]], what: str) -> None:
        self._what = what

        def serve(pipe: BinaryIO) -> None:
            for chunk in produce():
                pickle.dump(chunk, pipe, protocol=pickle.HIGHEST_PROTOCOL)
                pipe.flush()

        self._pid, self._pipe = _fork_helper(serve, helper_writes=True)

    def next(self) -> Any:
        """The next chunk; raises ``StopIteration`` after the last."""
        if self._pipe is None:
            raise StopIteration
        try:
            return pickle.load(self._pipe)
        except (EOFError, pickle.UnpicklingError):
            pid, self._pid = self._pid, 0
            _close_end(self._pipe)
            self._pipe = None
            _wait(pid, self._what)  # raises when the helper failed part-way
            raise StopIteration from None

    def close(self) -> None:
        """Stop the helper (if still running) and reap it."""
        pid, self._pid = self._pid, 0
        pipe, self._pipe = self._pipe, None
        if pipe is not None:
            _close_end(pipe)
        if pid:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)  # it ignores SIGTERM; it holds nothing to clean
            os.waitpid(pid, 0)

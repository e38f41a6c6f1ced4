"""A run's plots and ``report.html`` rendered by a second process that starts with
the run, so that importing matplotlib and pandas (about half a second) overlaps the
run instead of following it.

:class:`RenderWorker` starts ``python -m reports.render_worker`` when the run starts,
or takes the one :func:`start_early` started when ``kvsim`` itself started (its imports
then overlap the run's own, not the simulation's first second, where they took CPU
from the helper processes). The worker imports :mod:`reports.run_report` and reads
lines on its stdin: ``follow PATH`` (optional, first) names the run's ``steps.csv``,
which it then reads and checks while the run writes it (:mod:`reports.step_follow`),
so that the report does not parse it after the run; ``render DIR`` names the
directory to render, once the run's records, ``config.yaml`` and ``summary.json`` are
written. It answers ``ok`` when the plots and the page are written. Whatever goes
wrong in it (it cannot start, dies, or rendering raises) the run renders the
directory itself, in process, as it did before the worker existed: the same files,
and the same errors raised the same way. The worker ignores Ctrl-C (the run's own
cleanup stops it) and exits when its stdin closes, so it never outlives the run.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import select
import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

_ROOT = Path(__file__).resolve().parents[1]


_early: subprocess.Popen[str] | None = None  # started by start_early, not yet taken


def start_early() -> None:
    """Start the worker of the run this process is about to make (``kvsim run``, from
    before its imports); a :class:`RenderWorker` made later takes it. One not taken is
    killed when this process exits."""
    global _early
    if _early is None:
        _early = _spawn()
        if _early is not None:
            atexit.register(_drop_early)


def _drop_early() -> None:
    global _early
    proc, _early = _early, None
    if proc is not None:
        proc.kill()  # an unused worker holds nothing
        proc.wait()


def _spawn() -> subprocess.Popen[str] | None:
    """A new worker process, or None when it cannot start."""
    env = dict(os.environ)
    path = env.get("PYTHONPATH")
    env["PYTHONPATH"] = str(_ROOT) if not path else os.pathsep.join([str(_ROOT), path])
    try:
        return subprocess.Popen(
            [sys.executable, "-m", "reports.render_worker"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            env=env,
        )
    except OSError:
        return None


class RenderWorker:
    """The worker process of one run (see the module docstring)."""

    def __init__(self, follow: Path | None = None) -> None:
        """``follow``: the run's ``steps.csv``, written one row per step while the run
        runs (None: the worker reads the steps file only when asked to render)."""
        global _early
        proc, _early = _early, None
        if proc is None or proc.poll() is not None:
            proc = _spawn()
        if proc is not None and follow is not None and not _write(proc, f"follow {follow}\n"):
            _stop(proc)
            proc = None
        self._proc: subprocess.Popen[str] | None = proc

    def render(self, run_dir: Path, meanwhile: Callable[[], object] | None = None) -> bool:
        """Render ``run_dir``: by the worker (True), or here when it cannot (False; then
        as :func:`reports.run_report.render_run` does, errors included). ``meanwhile``
        is called once the worker has the directory, before its answer is awaited (or
        before rendering here)."""
        then = meanwhile or _nothing
        proc, self._proc = self._proc, None
        if proc is None:
            then()
        else:
            try:
                sent = _send(proc, run_dir)
                then()
                answer = _answer(proc) if sent else ""
            finally:
                _stop(proc)
            if proc.returncode == 0 and answer.strip() == "ok":
                return True
        from reports.run_report import render_run

        render_run(run_dir)
        return False

    def close(self) -> None:
        """Stop the worker if it is still waiting (the run failed or rendered nothing)."""
        proc, self._proc = self._proc, None
        if proc is not None:
            _stop(proc)


def _nothing() -> None:
    pass


def _write(proc: subprocess.Popen[str], line: str) -> bool:
    """Send ``line`` to the worker ``proc``; False when it is gone."""
    assert proc.stdin is not None
    try:
        proc.stdin.write(line)
        proc.stdin.flush()
    except OSError:
        return False
    return True


def _send(proc: subprocess.Popen[str], run_dir: Path) -> bool:
    """Hand ``run_dir`` to the worker ``proc`` (its last line); False when it is gone."""
    assert proc.stdin is not None
    if not _write(proc, f"render {run_dir}\n"):
        return False
    try:
        proc.stdin.close()
    except OSError:
        return False
    return True


def _answer(proc: subprocess.Popen[str]) -> str:
    """The worker's answer (``ok`` when it rendered); empty when it is gone."""
    assert proc.stdout is not None
    try:
        with proc.stdout:
            return proc.stdout.read()
    except OSError:
        return ""


def _stop(proc: subprocess.Popen[str]) -> None:
    """End ``proc`` (closing its stdin first: an idle worker exits on its own)."""
    if proc.poll() is None:
        try:
            if proc.stdin is not None:
                proc.stdin.close()
            proc.wait(timeout=1.0)
        except (OSError, subprocess.TimeoutExpired):
            proc.kill()
            proc.wait()


NICENESS = 19
"""How much lower the worker's scheduling priority is than the run's (``os.nice``):
the lowest, below the run's helper processes (``sim.offload.HELPER_NICENESS``). Its
imports and its reading of the steps file then take a CPU that neither the simulation
loop nor the helpers the loop waits on need; once the loop ends it has both CPUs to
itself. On the 20,000-request trace of ``tests/bench/bench_user_path.py``, whole
processes paired against the helpers' niceness (10): wall 0.946 and 0.949 (medians of
16 and 20 pairs); with the helpers at 19 as well, 0.982 (16 pairs)."""

POLL_S = 0.05
"""How often the worker reads what the followed steps file has gained (s)."""


def main() -> int:
    """The worker: import the renderer, follow the steps file if told to, then render
    the directory named on stdin."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    with contextlib.suppress(AttributeError, OSError):  # no os.nice, or refused
        os.nice(NICENESS)
    from reports.figures import warm_up
    from reports.run_report import render_run  # the imports that take the time
    from reports.step_follow import StepFollower

    warm_up()  # while the run runs, not when it waits for the plots

    follower = None
    verb, _, arg = _line().partition(" ")
    if verb == "follow":
        follower = StepFollower(Path(arg))
        while not follower.failed:
            ready, _, _ = select.select([0], [], [], POLL_S)
            if ready:
                break
            follower.poll()
        verb, _, arg = _line().partition(" ")
    if verb != "render" or not arg:
        return 0  # the run ended without a report
    try:
        # The run waits for it: both cores draw.
        render_run(Path(arg), parallel=True, follower=follower)
    except Exception:  # the run renders again itself, and reports what fails there
        return 1
    print("ok", flush=True)
    # Out at once: the run waits for this process to end, and everything it wrote is
    # closed (an interpreter's orderly exit with matplotlib and pandas loaded: ~0.1 s).
    os._exit(0)


def _line() -> str:
    """The next line on stdin, without its newline ("" at its end). Read a byte at a
    time: nothing is buffered past it, so ``select`` on the descriptor still tells
    when the next line comes."""
    out = bytearray()
    while (byte := os.read(0, 1)) and byte != b"\n":
        out += byte
    return out.decode()


if __name__ == "__main__":
    raise SystemExit(main())

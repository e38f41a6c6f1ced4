"""A run's plots and ``report.html`` rendered by a second process that starts with
the run, so that importing matplotlib and pandas (about a second) overlaps the
simulation instead of following it.

:class:`RenderWorker` starts ``python -m reports.render_worker`` when the run starts;
the worker imports :mod:`reports.run_report` and waits for one line on its stdin: the
directory to render, once the run's records, ``config.yaml`` and ``summary.json`` are
written. It answers ``ok`` when the plots and the page are written. Given the run's
``steps.csv`` (``follow``), it reads and checks the file while it waits, as the run
writes it (:mod:`reports.step_follow`), so that the report does not parse it after the
run. Whatever goes
wrong in it (it cannot start, dies, or rendering raises) the run renders the
directory itself, in process, as it did before the worker existed: the same files,
and the same errors raised the same way. The worker ignores Ctrl-C (the run's own
cleanup stops it) and exits when its stdin closes, so it never outlives the run.
"""

from __future__ import annotations

import os
import select
import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

_ROOT = Path(__file__).resolve().parents[1]


class RenderWorker:
    """The worker process of one run (see the module docstring)."""

    def __init__(self, follow: Path | None = None) -> None:
        """``follow``: the run's ``steps.csv``, written one row per step while the run
        runs (None: the worker reads the steps file only when asked to render)."""
        env = dict(os.environ)
        path = env.get("PYTHONPATH")
        env["PYTHONPATH"] = str(_ROOT) if not path else os.pathsep.join([str(_ROOT), path])
        try:
            self._proc: subprocess.Popen[str] | None = subprocess.Popen(
                [sys.executable, "-m", "reports.render_worker"]
                + ([] if follow is None else [str(follow)]),
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                text=True,
                env=env,
            )
        except OSError:
            self._proc = None

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


def _send(proc: subprocess.Popen[str], run_dir: Path) -> bool:
    """Hand ``run_dir`` to the worker ``proc``; False when it is gone."""
    assert proc.stdin is not None
    try:
        proc.stdin.write(f"{run_dir}\n")
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


POLL_S = 0.05
"""How often the worker reads what the followed steps file has gained (s)."""


def main(argv: list[str]) -> int:
    """The worker: import the renderer, then render the one directory named on stdin;
    ``argv``: the steps file to follow meanwhile, if any."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    from reports.run_report import render_run  # the imports that take the time
    from reports.step_follow import StepFollower

    follower = StepFollower(Path(argv[0])) if argv else None
    while follower is not None and not follower.failed:
        ready, _, _ = select.select([sys.stdin], [], [], POLL_S)
        if ready:
            break
        follower.poll()
    line = sys.stdin.readline().strip()
    if not line:
        return 0  # the run ended without a report
    try:
        # The run waits for it: both cores draw.
        render_run(Path(line), parallel=True, follower=follower)
    except Exception:  # the run renders again itself, and reports what fails there
        return 1
    print("ok", flush=True)
    # Out at once: the run waits for this process to end, and everything it wrote is
    # closed (an interpreter's orderly exit with matplotlib and pandas loaded: ~0.1 s).
    os._exit(0)


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))

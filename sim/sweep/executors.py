"""Where sweep points run: a local process pool, or tasks on a Ray cluster.

Both call ``on_done(index, status)`` in the driver as each point finishes (in
completion order) and return the internal errors of points that raised. Local workers
write their point directories in place; Ray workers send theirs back packed, and the
driver unpacks each under a temporary name and renames it into place.
"""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Callable
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from pathlib import Path
from typing import Any

from sim.signals import run_in_worker, worker_init
from sim.sweep.spec import SweepSpecError
from sim.sweep.worker import run_point, run_point_packed, unpack_point

OnDone = Callable[[int, str], None]
Payload = dict[str, Any]


def default_jobs() -> int:
    """Worker processes when ``--jobs`` is not given: the CPUs this process may use."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # pragma: no cover - not Linux
        return max(1, os.cpu_count() or 1)


def execute_local(
    payloads: list[tuple[int, Payload]], jobs: int, on_done: OnDone
) -> dict[int, BaseException]:
    """Run each ``(index, payload)`` in a pool of ``jobs`` worker processes."""
    errors: dict[int, BaseException] = {}
    if not payloads:
        return errors
    # Forked workers inherit these modules instead of each importing matplotlib again.
    import reports.html  # noqa: F401
    import reports.plots  # noqa: F401

    pool = ProcessPoolExecutor(
        max_workers=max(1, min(jobs, len(payloads))),
        initializer=worker_init,
        initargs=(os.getpid(),),
    )
    try:
        futures: dict[Future, int] = {
            pool.submit(run_in_worker, run_point, p): i for i, p in payloads
        }
        pending = set(futures)
        while pending:
            done, pending = wait(pending, return_when=FIRST_COMPLETED)
            for fut in sorted(done, key=lambda f: futures[f]):
                index = futures[fut]
                try:
                    status = fut.result()
                except Exception as e:  # internal error in one point: keep the others going
                    errors[index] = e
                    status = "error"
                on_done(index, status)
    except KeyboardInterrupt:
        _stop_workers(pool)
        raise
    finally:
        pool.shutdown(wait=True, cancel_futures=True)
    return errors


def _stop_workers(pool: ProcessPoolExecutor) -> None:
    """Interrupt every worker's point (each removes its temporary directory and exits)."""
    for process in list(getattr(pool, "_processes", {}).values()):
        if process.is_alive():
            process.terminate()


def _import_ray() -> Any:
    try:
        import ray
    except ImportError:
        raise SweepSpecError(
            "--executor ray: Ray is not installed (pip install 'kvsim[ray]')"
        ) from None
    return ray


def _local_runtime_env() -> dict[str, Any]:
    """Workers of a local Ray instance see the driver's import path (an uninstalled
    checkout run with PYTHONPATH works too)."""
    paths = [p for p in sys.path if p and Path(p).is_dir()]
    return {"env_vars": {"PYTHONPATH": os.pathsep.join(paths)}}


def execute_ray(
    payloads: list[tuple[int, Payload]],
    jobs: int | None,
    address: str | None,
    dest: Callable[[int], Path],
    on_done: OnDone,
) -> dict[int, BaseException]:
    """Run each point as a Ray task (``address``: a cluster; ``None``: a local instance
    with ``jobs`` CPUs). At most ``jobs`` tasks are in flight when given."""
    ray = _import_ray()
    errors: dict[int, BaseException] = {}
    if not payloads:
        return errors
    started = not ray.is_initialized()
    if started:
        kwargs: dict[str, Any] = {
            "include_dashboard": False,
            "log_to_driver": False,
            "logging_level": logging.ERROR,
        }
        if address:
            kwargs["address"] = address
        else:
            kwargs["num_cpus"] = jobs or default_jobs()
            kwargs["runtime_env"] = _local_runtime_env()
        try:
            ray.init(**kwargs)
        except (ConnectionError, ValueError, RuntimeError) as e:
            raise SweepSpecError(f"--address {address}: cannot connect to Ray: {e}") from None
    task = ray.remote(num_cpus=1, max_retries=0)(run_point_packed)
    try:
        queue = list(payloads)
        limit = jobs or len(queue)
        in_flight: dict[Any, int] = {}
        while queue or in_flight:
            while queue and len(in_flight) < limit:
                index, payload = queue.pop(0)
                in_flight[task.remote(payload)] = index
            done, _ = ray.wait(list(in_flight), num_returns=1)
            for ref in done:
                index = in_flight.pop(ref)
                try:
                    status, data = ray.get(ref)
                    unpack_point(data, dest(index))
                except Exception as e:
                    errors[index] = e
                    status = "error"
                on_done(index, status)
    finally:
        if started:
            ray.shutdown()
    return errors

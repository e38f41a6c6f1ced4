"""A fake worker side for the KV offloading connector, shared by both replays.

Both the oracle driver (vLLM 0.33.0's scheduler with its ``OffloadingConnector``,
run by the oracle environment's interpreter) and kvcore's replay use this one class,
so that the only difference between the two runs is the scheduler side. Standard
library only (the oracle imports it by path).

A transfer job issued in step ``s`` (a load or a store of the step's connector
metadata) is reported finished in the output of step ``s + latency - 1``: with
latency 1 in the same step's output, as a copy that ends while the step runs. A job
the scheduler asks to flush (``jobs_to_flush``: a store whose source block is handed
to another request, or a job of a preempted request) is waited for, as vLLM's
``OffloadingConnectorWorker.handle_preemptions`` does, so it is reported in the
current step. Finished loads also report their request in ``finished_recving``
(vLLM's worker does that for asynchronous loads; stores report no request).
"""

from __future__ import annotations


class FakeOffloadWorker:
    """Schedules job completions a fixed number of steps after they are issued."""

    def __init__(self, load_latency: int, store_latency: int) -> None:
        if load_latency < 1 or store_latency < 1:
            raise ValueError("latencies are in steps, at least 1")
        self.load_latency = load_latency
        self.store_latency = store_latency
        self.due: dict[int, int] = {}
        """Job id -> step whose output reports it."""
        self.load_req: dict[int, str] = {}

    def submit(
        self,
        step: int,
        load_jobs: dict[int, str],
        store_jobs: list[int],
        jobs_to_flush: set[int] | list[int],
    ) -> None:
        """Take one step's metadata: load job id -> request id, store job ids, and the
        job ids to flush (finished in this step)."""
        for job_id, req_id in load_jobs.items():
            self.due[job_id] = step + self.load_latency - 1
            self.load_req[job_id] = req_id
        for job_id in store_jobs:
            self.due[job_id] = step + self.store_latency - 1
        for job_id in jobs_to_flush:
            if job_id in self.due:
                self.due[job_id] = min(self.due[job_id], step)

    def finished(self, step: int) -> tuple[dict[int, int], list[str]]:
        """Jobs reported by the output of ``step`` (id -> 1 worker, in id order) and
        the requests whose load finished (sorted)."""
        done = sorted(j for j, s in self.due.items() if s <= step)
        recving = []
        for job_id in done:
            del self.due[job_id]
            req_id = self.load_req.pop(job_id, None)
            if req_id is not None:
                recving.append(req_id)
        return {j: 1 for j in done}, sorted(recving)

"""A fake worker side for the NIXL connector, shared by both replays.

Both the oracle driver (vLLM 0.33.0's scheduler with its NIXL connector, run by the
oracle environment's interpreter) and kvcore's replay use this one class, so that
the only difference between the two runs is the scheduler side. Standard library
only (the oracle imports it by path).

It is called once per scheduled batch, right after ``schedule()`` (when the batch
starts executing), with the batch's connector metadata in a neutral form, and
returns what the workers report in that batch's output, as vLLM's NIXL worker does
in ``get_transfer_results``:

* a receive the request waits for (pull: ``awaiting_kvs``; push: a registration) is
  reported in ``finished_recving`` ``xfer_steps`` batches later counting its own
  (1: in the same batch's output); a request with ``fail_load`` is reported there
  and in ``failed_recving``, with its blocks in ``invalid_block_ids``; a receive that
  only tells the prefill side to free (``awaiting_kvs`` false) is never reported;
* a prefill-side request in ``reqs_to_send`` is reported in ``finished_sending``
  after ``xfer_steps`` (the decode side read it) or, with ``read`` false, after the
  case's ``lease_steps`` (the lease ran out).

Per-request knobs come from the trace entry: ``xfer_steps`` [1], ``fail_load``
[false], ``read`` [true].
"""

from __future__ import annotations

from typing import Any


class FakeNixlWorker:
    """Reports transfers a fixed number of batches after they are handed over."""

    def __init__(self, trace: list[dict[str, Any]], lease_steps: int) -> None:
        if lease_steps < 1:
            raise ValueError("lease_steps is in steps, at least 1")
        self.knobs = {str(r["request_id"]): r for r in trace}
        self.lease_steps = lease_steps
        self.recv_due: dict[str, int] = {}
        self.recv_blocks: dict[str, list[int]] = {}
        self.send_due: dict[str, int] = {}

    def _xfer(self, rid: str) -> int:
        return max(1, int(self.knobs.get(rid, {}).get("xfer_steps", 1)))

    def step(self, step: int, meta: dict[str, Any]) -> dict[str, list[Any]]:
        """Take one batch's metadata as the step lines hold it (``recv``: [request,
        blocks, computed blocks, awaiting]; ``send``: request ids; ``push_reg``:
        [request, blocks]; other keys unread) and return the batch's report (sorted
        lists)."""
        for rid, blocks, _computed, awaiting in meta["recv"]:
            if awaiting:
                self.recv_due[rid] = step + self._xfer(rid) - 1
                self.recv_blocks[rid] = list(blocks)
        for rid, blocks in meta["push_reg"]:
            self.recv_due[rid] = step + self._xfer(rid) - 1
            self.recv_blocks[rid] = list(blocks)
        for rid in meta["send"]:
            read = bool(self.knobs.get(rid, {}).get("read", True))
            self.send_due[rid] = step + (self._xfer(rid) if read else self.lease_steps) - 1
        recving = sorted(r for r, s in self.recv_due.items() if s <= step)
        sending = sorted(r for r, s in self.send_due.items() if s <= step)
        failed: list[str] = []
        invalid: set[int] = set()
        for rid in recving:
            del self.recv_due[rid]
            blocks = self.recv_blocks.pop(rid)
            if self.knobs.get(rid, {}).get("fail_load"):
                failed.append(rid)
                invalid.update(blocks)
        for rid in sending:
            del self.send_due[rid]
        return {
            "sending": sending,
            "recving": recving,
            "failed": failed,
            "invalid": sorted(invalid),
        }

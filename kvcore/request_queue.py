"""Waiting queues (mirror ``vllm/v1/core/sched/request_queue.py``, vLLM 0.33.0)."""

from __future__ import annotations

import heapq
from collections import deque
from collections.abc import Iterable, Iterator

from kvcore.request import Request

SCHEDULING_POLICIES = ("fcfs", "priority")


class FCFSRequestQueue(deque):
    """Mirrors ``FCFSRequestQueue``.

    First come, first served; preempted requests go back to the front."""

    def add_request(self, request: Request) -> None:
        self.append(request)

    def pop_request(self) -> Request:
        return self.popleft()

    def peek_request(self) -> Request:
        return self[0]

    def prepend_request(self, request: Request) -> None:
        self.appendleft(request)

    def prepend_requests(self, requests: Iterable[Request]) -> None:
        """Put ``requests`` at the front, one by one (so they end up in reverse order,
        as vLLM's ``extendleft``)."""
        self.extendleft(requests)

    def remove_requests(self, requests: Iterable[Request]) -> None:
        drop = set(requests)
        kept = [r for r in self if r not in drop]
        self.clear()
        self.extend(kept)


class PriorityRequestQueue:
    """Mirrors ``PriorityRequestQueue``.

    Heap ordered by (priority, arrival time, request id); 'prepend' just re-adds."""

    def __init__(self) -> None:
        self._heap: list[Request] = []

    def add_request(self, request: Request) -> None:
        heapq.heappush(self._heap, request)

    def pop_request(self) -> Request:
        return heapq.heappop(self._heap)

    def peek_request(self) -> Request:
        return self._heap[0]

    def prepend_request(self, request: Request) -> None:
        self.add_request(request)

    def prepend_requests(self, requests: Iterable[Request]) -> None:
        for request in requests:
            self.add_request(request)

    def remove_requests(self, requests: Iterable[Request]) -> None:
        drop = set(requests)
        self._heap = [r for r in self._heap if r not in drop]
        heapq.heapify(self._heap)

    def __bool__(self) -> bool:
        return bool(self._heap)

    def __len__(self) -> int:
        return len(self._heap)

    def __iter__(self) -> Iterator[Request]:
        heap = self._heap[:]
        while heap:
            yield heapq.heappop(heap)


def create_request_queue(policy: str) -> FCFSRequestQueue | PriorityRequestQueue:
    """The waiting queue for a scheduling policy ("fcfs" or "priority")."""
    if policy == "fcfs":
        return FCFSRequestQueue()
    if policy == "priority":
        return PriorityRequestQueue()
    raise ValueError(f"scheduling_policy: unknown policy {policy!r}; allowed: fcfs, priority")

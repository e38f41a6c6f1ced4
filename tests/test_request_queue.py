"""Waiting queues: FCFS front insertion, priority heap order."""

import pytest

from kvcore.request import Request
from kvcore.request_queue import FCFSRequestQueue, PriorityRequestQueue, create_request_queue


def reqs():
    return [
        Request(f"r{i}", [1], 1, priority=p, arrival_time=t)
        for i, (p, t) in enumerate([(2, 0.0), (1, 1.0), (1, 0.5)])
    ]


def test_fcfs_prepend_puts_request_first():
    q = create_request_queue("fcfs")
    assert isinstance(q, FCFSRequestQueue)
    a, b, c = reqs()
    q.add_request(a)
    q.add_request(b)
    q.prepend_request(c)
    assert [q.pop_request().request_id for _ in range(3)] == ["r2", "r0", "r1"]


def test_priority_heap_and_removal():
    q = create_request_queue("priority")
    assert isinstance(q, PriorityRequestQueue)
    a, b, c = reqs()
    for r in (a, b, c):
        q.add_request(r)
    assert [r.request_id for r in q] == ["r2", "r1", "r0"]
    q.remove_requests([c])
    assert q.peek_request() is b and len(q) == 2


def test_unknown_policy():
    with pytest.raises(ValueError, match="fcfs, priority"):
        create_request_queue("lifo")

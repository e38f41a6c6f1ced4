"""Request bookkeeping, stop checks and priority order."""

import pytest

from kvcore.request import LoRARequest, Request, RequestStatus, check_stop


def test_token_counts_and_append():
    r = Request("a", [1, 2, 3], 5)
    r.append_output_token_ids([4, 5])
    r.append_output_token_ids(6)
    assert (r.num_tokens, r.num_output_tokens, r.num_prompt_tokens) == (6, 3, 3)
    assert r.all_token_ids == [1, 2, 3, 4, 5, 6]


def test_check_stop_order():
    r = Request("a", [1, 2], 10, eos_token_id=9, stop_token_ids=[8])
    r.append_output_token_ids(8)
    assert check_stop(r, 100) and r.status == RequestStatus.FINISHED_STOPPED
    assert r.stop_reason == 8
    r2 = Request("b", [1, 2], 1)
    r2.append_output_token_ids(3)
    assert check_stop(r2, 100) and r2.status == RequestStatus.FINISHED_LENGTH_CAPPED
    r3 = Request("c", [1, 2], 10)
    r3.append_output_token_ids(3)
    assert check_stop(r3, 3) and r3.is_finished()
    r4 = Request("d", [1, 2], 10)
    r4.append_output_token_ids(3)
    assert not check_stop(r4, 100) and not r4.is_finished()


def test_priority_order_priority_then_arrival_then_id():
    a = Request("a", [1], 1, priority=1, arrival_time=0.0)
    b = Request("b", [1], 1, priority=0, arrival_time=5.0)
    c = Request("c", [1], 1, priority=0, arrival_time=5.0)
    assert sorted([a, c, b]) == [b, c, a]


def test_invalid_requests():
    with pytest.raises(ValueError, match="max_tokens"):
        Request("a", [1], 0)
    with pytest.raises(ValueError, match="prompt_token_ids"):
        Request("a", [], 1)


def test_lora_from_id():
    assert LoRARequest.from_id(3) == LoRARequest("lora3", 3, "/lora/3")
    assert RequestStatus.is_finished(RequestStatus.FINISHED_ABORTED)
    assert not RequestStatus.is_finished(RequestStatus.PREEMPTED)

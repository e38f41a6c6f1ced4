"""SchedulerConfig validation mirrors vLLM's verify_max_model_len checks."""

import pytest

from kvcore.scheduler_config import SchedulerConfig


@pytest.mark.parametrize(
    "kwargs,needle",
    [
        ({"max_model_len": 0}, "max_model_len"),
        ({"max_model_len": 4096, "enable_chunked_prefill": False}, "max_num_batched_tokens"),
        ({"max_model_len": 512, "max_num_batched_tokens": 64, "max_num_seqs": 128}, "max_num_seqs"),
        ({"max_model_len": 512, "long_prefill_token_threshold": 1000}, "long_prefill"),
        ({"max_model_len": 512, "policy": "lifo"}, "policy"),
    ],
)
def test_invalid_settings_name_the_field(kwargs, needle):
    with pytest.raises(ValueError, match=needle):
        SchedulerConfig(**kwargs)


def test_defaults_are_vllms():
    c = SchedulerConfig(max_model_len=1024)
    assert (c.max_num_batched_tokens, c.max_num_seqs, c.enable_chunked_prefill) == (2048, 128, True)
    assert c.scheduler_reserve_full_isl and c.policy == "fcfs"

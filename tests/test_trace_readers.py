"""Trace readers: each format replays with the right arrivals and lengths; bad traces
give one WorkloadError naming the file, the line and the field."""

from __future__ import annotations

from pathlib import Path

import pytest
import simpy

from workloads import SimRequest, TraceWorkload, WorkloadError, load_workload, read_trace

DATA = Path(__file__).parent / "data" / "workloads"


def replay(spec: str, seed: int | None = None) -> tuple[TraceWorkload, list[SimRequest]]:
    workload = load_workload(spec, seed=seed)
    assert isinstance(workload, TraceWorkload)
    env = simpy.Environment()
    requests: list[SimRequest] = []

    def submit(request: SimRequest) -> None:
        assert request.arrival_s == env.now
        requests.append(request)

    workload.start(env, submit)
    env.run()
    assert workload.done() and len(requests) == workload.num_requests
    return workload, requests


def test_kvsim_jsonl():
    workload, reqs = replay(str(DATA / "kvsim_small.jsonl"))
    assert workload.spec["format"] == "kvsim"
    assert [r.request_id for r in reqs] == ["a", "b", "c", "d"]
    assert [r.arrival_s for r in reqs] == [0.0, 0.25, 0.25, 1.5]
    assert [len(r.prompt_token_ids) for r in reqs] == [5, 40, 20, 30]
    assert [r.max_tokens for r in reqs] == [4, 8, 3, 1]
    assert reqs[0].prompt_token_ids == [1, 2, 3, 4, 5]
    assert (reqs[1].priority, reqs[1].session_id) == (2, "s1")
    assert (reqs[2].lora_id, reqs[2].cache_salt) == (1, "tenant-x")
    # Equal hash ids, equal tokens: "c" and "d" share block 7 (16 tokens).
    assert reqs[2].prompt_token_ids[:16] == reqs[3].prompt_token_ids[:16]
    assert reqs[2].prompt_token_ids[16:20] != reqs[3].prompt_token_ids[16:20]


def test_mooncake_jsonl_expands_hash_blocks():
    workload, reqs = replay(str(DATA / "mooncake_small.jsonl"))
    assert workload.spec["format"] == "mooncake"
    assert [r.arrival_s for r in reqs] == [0.0, 0.25, 1.25]
    assert [len(r.prompt_token_ids) for r in reqs] == [1100, 600, 1024]
    assert [r.max_tokens for r in reqs] == [12, 5, 30]
    a, b, c = (r.prompt_token_ids for r in reqs)
    assert a[:512] == b[:512] == c[:512]  # hash id 0
    assert a[512:1024] == c[512:1024]  # hash id 1
    assert b[512:600] != a[512:600]  # hash id 3 vs 1
    assert all(0 <= t < 32000 for t in a)


def test_mooncake_tokens_depend_on_seed_only():
    _, first = replay(str(DATA / "mooncake_small.jsonl"), seed=3)
    _, again = replay(str(DATA / "mooncake_small.jsonl"), seed=3)
    _, other = replay(str(DATA / "mooncake_small.jsonl"), seed=4)
    assert first == again and first[0].prompt_token_ids != other[0].prompt_token_ids


def test_azure_csv():
    workload, reqs = replay(str(DATA / "azure_small.csv"))
    assert workload.spec["format"] == "azure" and workload.spec["skipped_rows"] == 1
    assert [r.arrival_s for r in reqs] == pytest.approx([0.0, 4.314579, 14.81941])
    assert [len(r.prompt_token_ids) for r in reqs] == [374, 396, 2000]
    assert [r.max_tokens for r in reqs] == [44, 109, 7]
    assert [r.request_id for r in reqs] == ["req-0", "req-1", "req-2"]


def test_burstgpt_csv_skips_failed_rows():
    workload, reqs = replay(str(DATA / "burstgpt_small.csv"))
    assert workload.spec["format"] == "burstgpt" and workload.spec["skipped_rows"] == 1
    assert [r.arrival_s for r in reqs] == [0.0, 41.0, 45.5]
    assert [len(r.prompt_token_ids) for r in reqs] == [472, 417, 1360]
    assert [r.max_tokens for r in reqs] == [18, 276, 238]


def test_azure_time_zones_and_fraction_digits(tmp_path):
    path = tmp_path / "az.csv"
    path.write_text(
        "TIMESTAMP,ContextTokens,GeneratedTokens\n"
        "2024-05-10 00:00:00.009930+00:00,10,2\n"
        "2024-05-10 02:00:01.5+02:00,10,2\n"
    )
    table = read_trace(path)
    assert table.arrival_s.tolist() == pytest.approx([0.0, 1.49007])


def write(tmp_path: Path, name: str, text: str) -> str:
    path = tmp_path / name
    path.write_text(text)
    return str(path)


MC = '{"timestamp": %d, "input_length": 10, "output_length": 1, "hash_ids": [1]}\n'
KV = '{"request_id": "%s", "arrival_s": %s, "prompt_tokens": 4, "output_tokens": 2}\n'
BAD_TRACES = [
    # (file name, contents, words that must appear in the message)
    ("empty.jsonl", "", "trace holds no requests"),
    ("blank.jsonl", "\n\n", "trace holds no requests"),
    ("empty.csv", "", "no header"),
    ("header_only.csv", "TIMESTAMP,ContextTokens,GeneratedTokens\n", "trace holds no requests"),
    (
        "azure.csv",
        "TIMESTAMP,ContextTokens\n2023-11-16 18:15:46,3\n",
        "header: missing column 'GeneratedTokens'",
    ),
    (
        "burst.csv",
        "Timestamp,Model,Request tokens\n1,x,3\n",
        "header: missing column 'Response tokens'",
    ),
    ("other.csv", "a,b\n1,2\n", "header: unrecognised CSV trace"),
    (
        "azure_time.csv",
        "TIMESTAMP,ContextTokens,GeneratedTokens\nyesterday,3,4\n",
        "line 2: TIMESTAMP: not a date-time",
    ),
    (
        "azure_neg.csv",
        "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46,-3,4\n",
        "line 2: ContextTokens: must be >= 0",
    ),
    (
        "azure_back.csv",
        "TIMESTAMP,ContextTokens,GeneratedTokens\n"
        "2023-11-16 18:15:46,3,4\n2023-11-16 18:15:40,3,4\n",
        "line 3: TIMESTAMP",
    ),
    (
        "burst_back.csv",
        "Timestamp,Request tokens,Response tokens\n5,3,4\n4,3,4\n",
        "line 3: Timestamp: 4.0 is earlier",
    ),
    ("neg.jsonl", KV % ("a", "-1.0"), "line 1: arrival_s: must be >= 0"),
    (
        "back.jsonl",
        KV % ("a", "2.0") + KV % ("b", "1.0"),
        "line 2: arrival_s: 1.0 is earlier than the previous request's 2.0",
    ),
    (
        "dup.jsonl",
        KV % ("a", "0") + KV % ("a", "1"),
        "line 2: request_id: 'a' already used on line 1",
    ),
    (
        "missing.jsonl",
        '{"request_id": "a", "arrival_s": 0, "prompt_tokens": 4}\n',
        "line 1: output_tokens: required field is missing",
    ),
    (
        "unknown.jsonl",
        '{"request_id": "a", "arrival_s": 0, "prompt_tokens": 4, "output_tokens": 1, "temp": 1}\n',
        "line 1: temp: unknown key",
    ),
    (
        "both.jsonl",
        '{"request_id": "a", "arrival_s": 0, "output_tokens": 1}\n',
        "give exactly one of prompt_token_ids and prompt_tokens",
    ),
    (
        "cover.jsonl",
        '{"request_id": "a", "arrival_s": 0, "prompt_tokens": 600, "hash_ids": [1], '
        '"output_tokens": 1}\n',
        "need 2",
    ),
    ("json.jsonl", "{not json}\n", "line 1: not valid JSON"),
    # two records on one line would be two in one JSON array: still refused
    ("two.jsonl", KV % ("a", "0") + (KV % ("b", "1")).strip() + ", " + KV % ("c", "2"), "line 2"),
    ("late.jsonl", KV % ("a", "0") + "\n" + KV % ("b", "1") + '{"request_id": "c"}\n', "line 4"),
    (
        "mc.jsonl",
        '{"timestamp": 0, "input_length": 10, "hash_ids": [1]}\n',
        "line 1: output_length: required field is missing",
    ),
    (
        "mc_back.jsonl",
        MC % 9 + MC % 3,
        "line 2: timestamp",
    ),
    (
        "mc_cover.jsonl",
        '{"timestamp": 0, "input_length": 1100, "output_length": 1, "hash_ids": [1, 2]}\n',
        "need 3",
    ),
    ("odd.jsonl", '{"ts": 1}\n', "unrecognised JSONL trace"),
    (
        "zero_out.jsonl",
        KV.replace('"output_tokens": 2', '"output_tokens": 0') % ("a", "0"),
        "line 1: output_tokens: must be >= 1",
    ),
]


@pytest.mark.parametrize(("name", "text", "words"), BAD_TRACES)
def test_bad_traces_name_file_line_and_field(tmp_path, name, text, words):
    path = write(tmp_path, name, text)
    with pytest.raises(WorkloadError) as info:
        load_workload(path)
    message = str(info.value)
    assert message.startswith(f"{path}: ") and words in message, message
    assert "\n" not in message


def test_one_pass_and_line_by_line_reads_agree(tmp_path):
    """Blank lines, CRLF endings, an unterminated last line and a non-ASCII id: the
    one-pass read gives the rows, labels and line numbers of the line-by-line one."""
    from workloads.traces.jsonl import _bulk, _line_by_line, read_records
    from workloads.traces.kvsim_jsonl import KvsimLine, _check_row

    text = KV % ("a", "0") + "\n  \n" + (KV % ("b\u00e9", "0.5")).replace("\n", "\r\n")
    text += '{"request_id": "c", "arrival_s": 2, "prompt_token_ids": [7, 8], "output_tokens": 1}'
    path = Path(write(tmp_path, "ok.jsonl", text))
    assert _bulk(path, KvsimLine, _check_row) is not None
    rows, labels, numbers = read_records(path, str(path), KvsimLine, _check_row)
    assert (rows, numbers) == _line_by_line(path, str(path), KvsimLine)
    assert labels == ["line 1", "line 4", "line 5"] and rows[1]["request_id"] == "b\u00e9"


LINES = [
    '{"request_id": "a", "arrival_s": 1, "prompt_tokens": 5, "output_tokens": 2}',
    '{"request_id": "a", "arrival_s": "1.5", "prompt_tokens": 5, "output_tokens": 2}',
    '{"request_id": "a", "arrival_s": 1, "prompt_token_ids": [3, 4], "output_tokens": 2,'
    ' "priority": -1, "lora_id": 2, "cache_salt": "s", "session_id": "x"}',
    '{"request_id": "a", "arrival_s": 1, "prompt_tokens": 20, "hash_ids": [1, 2],'
    ' "hash_block_size": 16, "output_tokens": 2}',
    '{"request_id": "", "arrival_s": 1, "prompt_tokens": 5, "output_tokens": 2}',
    '{"request_id": "a", "arrival_s": 1, "prompt_tokens": 5.0, "output_tokens": 2}',
    '{"request_id": "a", "arrival_s": 1, "prompt_tokens": 0, "output_tokens": 2}',
    '{"request_id": "a", "arrival_s": NaN, "prompt_tokens": 5, "output_tokens": 2}',
    '{"request_id": "a", "arrival_s": 1, "prompt_tokens": 5, "output_tokens": 2, "x": 1}',
    '{"request_id": "a", "arrival_s": 1, "prompt_token_ids": [], "output_tokens": 2}',
    '{"request_id": "a", "arrival_s": 1, "prompt_token_ids": [1, true], "output_tokens": 2}',
    '{"request_id": "a", "arrival_s": 1, "prompt_tokens": 5, "output_tokens": 2, "priority": null}',
    '{"request_id": "a", "arrival_s": 1, "prompt_tokens": 5, "hash_block_size": 0,'
    ' "output_tokens": 2}',
    # Valid field by field, refused by the model's cross-field check:
    '{"request_id": "a", "arrival_s": 1, "output_tokens": 2}',
    '{"request_id": "a", "arrival_s": 1, "prompt_tokens": 5, "prompt_token_ids": [1],'
    ' "output_tokens": 2}',
    '{"request_id": "a", "arrival_s": 1, "prompt_token_ids": [-1], "output_tokens": 2}',
    '{"request_id": "a", "arrival_s": 1, "prompt_token_ids": [1], "hash_ids": [1],'
    ' "output_tokens": 2}',
    '{"request_id": "a", "arrival_s": 1, "prompt_tokens": 20, "hash_ids": [1],'
    ' "hash_block_size": 16, "output_tokens": 2}',
]


@pytest.mark.parametrize("line", LINES)
def test_one_pass_accepts_what_the_model_accepts(tmp_path, line):
    """The one pass (a dict of the model's fields, then its cross-field check) takes a
    line exactly when the model does, with the model's values, defaults included."""
    from pydantic import ValidationError

    from workloads.traces.jsonl import _bulk
    from workloads.traces.kvsim_jsonl import KvsimLine, _check_row

    path = Path(write(tmp_path, "one.jsonl", line + "\n"))
    try:
        model = dict(KvsimLine.model_validate_json(line))
    except ValidationError:
        model = None
    bulk = _bulk(path, KvsimLine, _check_row)
    assert (bulk is None) == (model is None), line
    if bulk is not None:
        assert bulk == ([model], [1])


def test_all_rows_failed_is_empty(tmp_path):
    path = write(tmp_path, "fail.csv", "Timestamp,Request tokens,Response tokens\n1,5,0\n2,6,0\n")
    with pytest.raises(WorkloadError, match="trace holds no requests"):
        load_workload(path)

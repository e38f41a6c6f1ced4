"""Each trace format replays through ``kvsim run`` with the right arrivals and lengths.

The fixtures of ``tests/data/workloads/`` are run through ``sim.app.run.run`` (default
roofline model and KV budget: ample blocks) and ``requests.csv`` is compared with
values computed here from the raw files, following each format's documented convention:

- kvsim JSONL: ``arrival_s`` as written; prompt = len(prompt_token_ids) or prompt_tokens.
- Azure CSV: arrival = TIMESTAMP - first TIMESTAMP (seconds); rows with 0 generated
  tokens are skipped.
- BurstGPT CSV: arrival = Timestamp - first Timestamp; rows with 0 response tokens are
  skipped (failed requests).
- Mooncake JSONL: arrival = (timestamp - first) / 1000 (milliseconds); prompt =
  input_length; equal ``hash_ids`` give equal tokens, which the prefix cache must see.

Tolerance: 1e-6 s on arrivals (the CSV keeps 9 significant digits); lengths exact.
"""

from __future__ import annotations

import csv
import json
from datetime import datetime, timezone

import pytest
from sim_run_helpers import read_csv, run_sim


def _azure(path):
    rows = list(csv.DictReader(path.open()))

    def stamp(text):
        whole, frac = text.split(".")
        t = datetime.strptime(whole, "%Y-%m-%d %H:%M:%S").replace(tzinfo=timezone.utc)
        return t.timestamp() + float("0." + frac)

    t0 = stamp(rows[0]["TIMESTAMP"])
    return [
        (stamp(r["TIMESTAMP"]) - t0, int(r["ContextTokens"]), int(r["GeneratedTokens"]))
        for r in rows
        if int(r["ContextTokens"]) > 0 and int(r["GeneratedTokens"]) > 0
    ]


def _burstgpt(path):
    rows = list(csv.DictReader(path.open()))
    t0 = float(rows[0]["Timestamp"])
    return [
        (float(r["Timestamp"]) - t0, int(r["Request tokens"]), int(r["Response tokens"]))
        for r in rows
        if int(r["Request tokens"]) > 0 and int(r["Response tokens"]) > 0
    ]


def _mooncake(path):
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    t0 = rows[0]["timestamp"]
    return [((r["timestamp"] - t0) / 1000.0, r["input_length"], r["output_length"]) for r in rows]


def _kvsim(path):
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return [
        (
            r["arrival_s"],
            len(r["prompt_token_ids"]) if "prompt_token_ids" in r else r["prompt_tokens"],
            r["output_tokens"],
        )
        for r in rows
    ]


READERS = {
    "kvsim_small.jsonl": _kvsim,
    "azure_small.csv": _azure,
    "burstgpt_small.csv": _burstgpt,
    "mooncake_small.jsonl": _mooncake,
}


def _simulated(out):
    _, cols = read_csv(out / "requests.csv")
    rows = zip(
        cols["request_id"],
        cols["arrival_s"],
        cols["prompt_tokens"],
        cols["output_tokens"],
        cols["cached_tokens"],
    )
    return {rid: (float(a), int(p), int(o), int(c)) for rid, a, p, o, c in rows}


@pytest.mark.parametrize("name", sorted(READERS))
def test_trace_replays_arrivals_and_lengths(tmp_path, data_dir, name):
    """requests.csv holds one row per trace request (skipped rows excluded) with the
    trace's arrival (1e-6 s) and its exact prompt and output lengths."""
    path = data_dir / "workloads" / name
    expected = sorted(READERS[name](path))
    summary = run_sim(path, tmp_path / "out")
    got = _simulated(tmp_path / "out")
    assert summary["num_finished"] == summary["num_requests"] == len(expected)
    simulated = sorted((a, p, o) for a, p, o, _ in got.values())
    for (ea, ep, eo), (ga, gp, go) in zip(expected, simulated):
        assert ga == pytest.approx(ea, abs=1e-6)
        assert (gp, go) == (ep, eo)
    assert len(simulated) == len(expected)


def test_kvsim_trace_keeps_request_ids(tmp_path, data_dir):
    """A kvsim trace's own request ids are the ids of requests.csv."""
    path = data_dir / "workloads" / "kvsim_small.jsonl"
    run_sim(path, tmp_path / "out")
    got = _simulated(tmp_path / "out")
    assert {rid: v[:3] for rid, v in got.items()} == {
        "a": (0.0, 5, 4),
        "b": (0.25, 40, 8),
        "c": (0.25, 20, 3),
        "d": (1.5, 30, 1),
    }


def test_mooncake_equal_hash_ids_share_cached_tokens(tmp_path, data_dir):
    """Mooncake hash ids re-expand to equal tokens: the 2nd request (hash 0 shared) hits
    512 tokens, the 3rd (hashes 0, 1 = its whole 1024-token prompt) hits 1008 (vLLM
    recomputes the last token, so full blocks up to 1023 tokens). Exact."""
    path = data_dir / "workloads" / "mooncake_small.jsonl"
    run_sim(path, tmp_path / "out")
    got = sorted(_simulated(tmp_path / "out").values())
    assert [c for _, _, _, c in got] == [0, 512, 1008]

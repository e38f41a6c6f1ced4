"""The oracle driver reproduces vLLM 0.33.0's own sample outputs.

The samples in ``tests/data`` were produced by vLLM 0.33.0 driven without a
model (``steps_async_*``: vLLM's AsyncScheduler behind its engine core's batch queue,
recorded with this driver). ``sim/conformance/vllm_driver.py`` runs under the oracle environment
``.venv-vllm`` (skipped when it is absent) in one batch process, and every
output line must equal the sample's line byte for byte once the timing fields
are masked.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
DATA = REPO / "tests" / "data"
DRIVER = REPO / "sim" / "conformance" / "vllm_driver.py"
VLLM_PYTHON = REPO / ".venv-vllm" / "bin" / "python"
TIMING_KEYS = ("build_s", "wall_s", "sched_loop_s", "steps_per_s")

STEPS_SAMPLES = [
    "steps_shared_prefix.jsonl",
    "steps_preempt.jsonl",
    "steps_nochunk.jsonl",
    "steps_longprefill64.jsonl",
    "steps_nocache.jsonl",
    "steps_hybrid_swa64.jsonl",
    "steps_async_preempt.jsonl",
    "steps_async_hybrid_swa64.jsonl",
]
# Knobs a sample used that its header does not echo.
STEPS_EXTRA = {
    "steps_preempt.jsonl": {"dump_block_tables": True},
    "steps_hybrid_swa64.jsonl": {
        "kv_groups": ["full", "sliding_window"],
        "sliding_window": 64,
        "enable_kv_cache_events": True,
    },
    "steps_async_preempt.jsonl": {"dump_block_tables": True},
    "steps_async_hybrid_swa64.jsonl": {
        "kv_groups": ["full", "sliding_window"],
        "sliding_window": 64,
        "enable_kv_cache_events": True,
    },
}
OPS_SAMPLES = {
    "ops_example.jsonl": {"num_gpu_blocks": 12, "enable_kv_cache_events": True},
    "ops_example_hybrid_swa32.jsonl": {
        "num_gpu_blocks": 24,
        "kv_groups": ["full", "sliding_window"],
        "sliding_window": 32,
    },
}
LAYER = {"num_kv_heads": 8, "head_size": 128, "dtype": "bfloat16"}
SIZING_SAMPLES = {
    "kvcfg_llama8b_like_40gib.json": [{"kind": "full", "count": 32, **LAYER}],
    "kvcfg_hybrid_1to5_40gib.json": [
        {"kind": "full", "count": 8, **LAYER},
        {"kind": "sliding_window", "count": 40, "sliding_window": 1024, **LAYER},
    ],
}

pytestmark = pytest.mark.skipif(
    not VLLM_PYTHON.exists(),
    reason=f"oracle environment missing: {VLLM_PYTHON.relative_to(REPO)} (vLLM 0.33.0)",
)


def steps_config(sample: str) -> dict:
    """The driver config for a steps sample: its header's knobs plus unechoed ones."""
    with open(DATA / sample) as f:
        config = dict(json.loads(f.readline())["config"])
    for derived in ("coordinator", "managers", "batch_queue_size"):
        config.pop(derived, None)
    config.update(STEPS_EXTRA.get(sample, {}))
    return config


def batch_jobs(out_dir: Path) -> list[dict]:
    """One job per sample, all written into out_dir under the sample's name."""
    jobs = [
        {
            "mode": "steps",
            "trace": str(DATA / "trace_shared_prefix.json"),
            "config": steps_config(name),
            "out": str(out_dir / name),
        }
        for name in STEPS_SAMPLES
    ]
    jobs += [
        {
            "mode": "ops",
            "ops": str(DATA / "ops_example.json"),
            "config": cfg,
            "out": str(out_dir / name),
        }
        for name, cfg in OPS_SAMPLES.items()
    ]
    jobs += [
        {
            "mode": "sizing",
            "config": {"layers": layers, "available_bytes": 40 << 30},
            "out": str(out_dir / name),
        }
        for name, layers in SIZING_SAMPLES.items()
    ]
    return jobs


@pytest.fixture(scope="module")
def oracle_out(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Run every job in one vLLM process; return the output directory."""
    out_dir = tmp_path_factory.mktemp("oracle")
    jobs_file = out_dir / "jobs.json"
    jobs_file.write_text(json.dumps(batch_jobs(out_dir)))
    proc = subprocess.run(
        [str(VLLM_PYTHON), str(DRIVER), "batch", str(jobs_file)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    return out_dir


def masked_lines(path: Path) -> list[str]:
    """Each JSON line re-serialised with its timing fields blanked (keeps key order)."""
    lines = []
    with open(path) as f:
        for raw in f:
            record = json.loads(raw)
            for key in TIMING_KEYS:
                if key in record:
                    record[key] = None
            lines.append(json.dumps(record))
    return lines


def raw_lines_without_timing(path: Path) -> list[str]:
    """Raw text lines, except that lines holding timing fields are masked."""
    with open(path) as f:
        raw = f.read().splitlines()
    masked = masked_lines(path)
    return [m if any(f'"{k}"' in r for k in TIMING_KEYS) else r for r, m in zip(raw, masked)]


@pytest.mark.parametrize("sample", STEPS_SAMPLES + list(OPS_SAMPLES))
def test_jsonl_sample_reproduced(oracle_out: Path, sample: str) -> None:
    """Every line equals vLLM's sample line, timing fields aside."""
    mine = raw_lines_without_timing(oracle_out / sample)
    ref = raw_lines_without_timing(DATA / sample)
    assert len(mine) == len(ref)
    for i, (a, b) in enumerate(zip(mine, ref)):
        assert a == b, f"{sample} line {i} differs"


@pytest.mark.parametrize("sample", list(SIZING_SAMPLES))
def test_sizing_sample_reproduced(oracle_out: Path, sample: str) -> None:
    """vLLM's KV sizing matches the recorded kvcfg sample."""
    mine = json.loads((oracle_out / sample).read_text())
    ref = json.loads((DATA / sample).read_text())
    assert mine == ref

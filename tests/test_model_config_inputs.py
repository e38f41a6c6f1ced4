"""Bad head and size keys in a model ``config.json``: exit 2, one line naming file and key.

Each case writes a copy of the bundled Llama-3.1-8B (or Gemma-3-27B, for keys under
``text_config``) config with one key changed, runs ``kvsim budget --model FILE`` in a
subprocess and must get exit 2 and exactly one stderr line, with no traceback, that
names the file and the key. Further tests check that ``kvsim run``, ``kvsim plan``,
``kvsim sweep`` (base and axis) and the calibrate harness give the same refusal, and
that an absent or null ``num_key_value_heads`` still means multi-head attention.
"""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from sim_run_helpers import REPO, kvsim_cli, write_yaml

MODELS = REPO / "calibrate" / "catalog" / "models"
LLAMA = json.loads((MODELS / "Llama-3.1-8B.json").read_text())
GEMMA = json.loads((MODELS / "Gemma-3-27B.json").read_text())
DROP = object()  # a case value that removes the key

# (id, base config, key, value, substrings of the one stderr line besides the file name)
CASES: list[tuple[str, dict[str, Any], str, Any, list[str]]] = [
    ("heads-zero", LLAMA, "num_attention_heads", 0, ["num_attention_heads", "got 0"]),
    ("heads-negative", LLAMA, "num_attention_heads", -32, ["num_attention_heads", "-32"]),
    ("kv-heads-zero", LLAMA, "num_key_value_heads", 0, ["num_key_value_heads", "got 0"]),
    ("kv-heads-negative", LLAMA, "num_key_value_heads", -8, ["num_key_value_heads", "-8"]),
    (
        "kv-heads-not-dividing",
        LLAMA,
        "num_key_value_heads",
        5,
        ["num_key_value_heads", "divide num_attention_heads (32)", "got 5"],
    ),
    (
        "kv-heads-above-heads",
        LLAMA,
        "num_key_value_heads",
        64,
        ["num_key_value_heads", "divide num_attention_heads (32)", "got 64"],
    ),
    ("hidden-size-zero", LLAMA, "hidden_size", 0, ["hidden_size", "got 0"]),
    ("layers-zero", LLAMA, "num_hidden_layers", 0, ["num_hidden_layers", "got 0"]),
    ("head-dim-negative", LLAMA, "head_dim", -128, ["head_dim", "-128"]),
    ("vocab-zero", LLAMA, "vocab_size", 0, ["vocab_size", "got 0"]),
    ("max-pos-zero", LLAMA, "max_position_embeddings", 0, ["max_position_embeddings", "got 0"]),
    ("max-pos-missing", LLAMA, "max_position_embeddings", DROP, ["max_position_embeddings"]),
    ("heads-not-a-number", LLAMA, "num_attention_heads", "many", ["num_attention_heads"]),
    (
        "text-config-kv-heads-zero",
        GEMMA,
        "num_key_value_heads",
        0,
        ["text_config.num_key_value_heads", "got 0"],
    ),
]


def _config(base: dict[str, Any], key: str, value: Any) -> dict[str, Any]:
    """``base`` with ``key`` (inside ``text_config`` when base has one) set or dropped."""
    data = json.loads(json.dumps(base))
    target = data.get("text_config", data)
    if value is DROP:
        target.pop(key, None)
    else:
        target[key] = value
    return data


def _write(path: Path, base: dict[str, Any], key: str, value: Any) -> Path:
    path.write_text(json.dumps(_config(base, key, value)))
    return path


def _one_line(proc: Any) -> str:
    """The single stderr line of a refused command (asserts exit 2, no traceback)."""
    lines = [x for x in proc.stderr.splitlines() if x.strip()]
    assert proc.returncode == 2, (proc.returncode, proc.stderr)
    assert "Traceback" not in proc.stderr, proc.stderr
    assert len(lines) == 1, proc.stderr
    return lines[0]


@pytest.fixture(scope="module")
def budget_results(tmp_path_factory):
    base = tmp_path_factory.mktemp("model-configs")

    def one(case):
        case_id, config, key, value, _ = case
        path = _write(base / f"{case_id}.json", config, key, value)
        return case_id, (path, kvsim_cli("budget", "--model", str(path), "--gpu", "H100-SXM"))

    with ThreadPoolExecutor(max_workers=2) as pool:
        return dict(pool.map(one, CASES))


@pytest.mark.parametrize(
    ("case_id", "config", "key", "value", "needles"), CASES, ids=[c[0] for c in CASES]
)
def test_budget_refuses_bad_config(budget_results, case_id, config, key, value, needles):
    """Exit 2, one stderr line naming the config.json file and the key."""
    path, proc = budget_results[case_id]
    line = _one_line(proc)
    for needle in [str(path), *needles]:
        assert needle in line, f"{needle!r} not in {line!r}"


def _blocks(tmp_path: Path, name: str, key: str, value: Any) -> int:
    path = _write(tmp_path / f"{name}.json", LLAMA, key, value)
    proc = kvsim_cli(
        "budget", "--model", str(path), "--gpu", "H100-SXM", "--max-model-len", "8192", "--json"
    )
    assert proc.returncode == 0, proc.stderr
    return int(json.loads(proc.stdout)["num_gpu_blocks"])


def test_absent_or_null_kv_heads_mean_multi_head(tmp_path):
    """No num_key_value_heads (or null): 32 KV heads, a quarter of the GQA-8 blocks
    (within the weights' small difference)."""
    gqa = _blocks(tmp_path, "gqa", "num_key_value_heads", 8)
    absent = _blocks(tmp_path, "absent", "num_key_value_heads", DROP)
    null = _blocks(tmp_path, "null", "num_key_value_heads", None)
    assert absent == null
    assert 3.5 < gqa / absent < 4.5, (gqa, absent)


def test_head_dim_zero_means_hidden_over_heads(tmp_path):
    """head_dim 0 reads as absent (vLLM: ``head_dim or hidden_size // num_heads``)."""
    assert _blocks(tmp_path, "hd0", "head_dim", 0) == _blocks(tmp_path, "hd128", "head_dim", 128)


SMALL_WORKLOAD = {
    "arrival": {"type": "poisson", "rate": 1},
    "prompt_len": 10,
    "output_len": 5,
    "num_requests": 3,
}


def test_run_refuses_zero_kv_heads(tmp_path):
    """``kvsim run --model config.json``: exit 2, file and key named, no run directory."""
    path = _write(tmp_path / "config.json", LLAMA, "num_key_value_heads", 0)
    write_yaml(tmp_path / "wl.yaml", SMALL_WORKLOAD)
    proc = kvsim_cli(
        "run", "wl.yaml", "--model", str(path), "--out", "run", cwd=tmp_path, timeout=60
    )
    line = _one_line(proc)
    assert str(path) in line and "num_key_value_heads" in line, line
    assert not (tmp_path / "run").exists()


def test_plan_refuses_zero_heads(tmp_path):
    """``kvsim plan --model config.json``: exit 2 before any probe, file and key named."""
    path = _write(tmp_path / "config.json", LLAMA, "num_attention_heads", 0)
    proc = kvsim_cli(
        "plan",
        "--question",
        "max_rate",
        "--workload",
        "chat",
        "--model",
        str(path),
        "--ttft-p90-s",
        "1",
        "--num-requests",
        "20",
        "--out",
        "p",
        cwd=tmp_path,
        timeout=60,
    )
    line = _one_line(proc)
    assert str(path) in line and "num_attention_heads" in line, line
    assert not (tmp_path / "p").exists()


@pytest.mark.parametrize("where", ["base", "axis"])
def test_sweep_validation_refuses_zero_kv_heads(tmp_path, where):
    """A sweep naming the bad config.json (in base or as an axis value) fails validation."""
    path = _write(tmp_path / "config.json", LLAMA, "num_key_value_heads", 0)
    write_yaml(tmp_path / "wl.yaml", SMALL_WORKLOAD)
    base: dict[str, Any] = {"workload": "wl.yaml", "gpu": "H100-SXM"}
    if where == "base":
        base["model"] = str(path)
        axis = {"path": "workload.arrival.rate", "values": [1, 2]}
    else:
        axis = {"path": "model", "values": ["Llama-3.1-8B", str(path)]}
    write_yaml(tmp_path / "sweep.yaml", {"name": "t", "base": base, "axes": [axis]})
    proc = kvsim_cli("sweep", "sweep.yaml", "--out", "s", cwd=tmp_path, timeout=60)
    line = _one_line(proc)
    assert str(path) in line and "num_key_value_heads" in line, line


def test_calibrate_model_refuses_zero_kv_heads(tmp_path):
    """The calibrate harness loads --model through the same reader (a ValueError, which
    ``calibrate_command`` turns into exit 2)."""
    from calibrate.catalog import CatalogError
    from calibrate.harness.measure import resolve_model

    path = _write(tmp_path / "config.json", LLAMA, "num_key_value_heads", 0)
    with pytest.raises(CatalogError, match="num_key_value_heads: must be a positive integer"):
        resolve_model(str(path), "cpu")

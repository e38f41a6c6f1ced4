"""``kvsim list``: the bundled workload presets, models and GPUs, one line each.

Presets: arrival process, length and the preset's own description. Models: parameter
counts, layers, attention kind (heads, sliding windows, MLA, experts) and KV cache
bytes per token at the model's dtype. GPUs: memory, peak compute, bandwidths and the
interconnect.
"""

from __future__ import annotations

from rich.console import Console
from rich.table import Table

from calibrate.catalog import list_gpus, list_models, load_gpu, load_model
from calibrate.model_spec import ModelSpec
from workloads import WorkloadSpec, list_presets, load_spec
from workloads.loader import PRESET_DIR


def describe_arrival(spec: WorkloadSpec) -> str:
    """The arrival process in a few words (``Poisson 8 req/s``, ``all at t = 0``, ...)."""
    a = spec.arrival
    if a.type == "poisson":
        text = f"Poisson {a.rate:g} req/s"
    elif a.type == "gamma":
        text = f"gamma {a.rate:g} req/s, burstiness {a.burstiness:g}"
    elif a.type == "constant":
        text = f"every {1 / a.rate:.3g} s ({a.rate:g} req/s)"
    elif a.type == "piecewise":
        text = "piecewise " + ", ".join(f"{s.rate:g}" for s in a.segments) + " req/s"
    elif a.type == "burst":
        text = "all at t = 0"
    else:
        text = f"closed loop, {a.concurrency} clients"
    if spec.sessions is not None:
        text += ", sessions"
    return text


def describe_length(spec: WorkloadSpec) -> str:
    """``1,000 requests`` or ``600 s``."""
    if spec.num_requests is not None:
        return f"{spec.num_requests:,} requests"
    return f"{spec.duration_s:g} s"


def describe_attention(m: ModelSpec) -> str:
    """Attention kind: heads (MHA / GQA / MQA), full and sliding-window layers, MLA; MoE."""
    kinds = list(dict.fromkeys(m.layer_kinds))  # in layer order, once each
    if kinds == ["mla"]:
        text = f"MLA, latent {m.kv_lora_rank} + rope {m.qk_rope_head_dim}"
    else:
        q, kv = m.num_attention_heads, m.num_kv_heads
        heads = f"MHA {q} heads" if q == kv else f"MQA {q} heads" if kv == 1 else f"GQA {q}/{kv}"
        layers = []
        for kind in sorted(kinds):
            n = m.num_layers_of(kind)
            if kind == "sliding_window":
                layers.append(f"{n} sliding ({m.sliding_window:,} tokens)")
            else:
                layers.append(f"{n} {kind}")
        text = f"{heads}: " + ", ".join(layers)
    if m.is_moe:
        text += f"; MoE {m.num_experts} experts, {m.num_experts_per_tok} active"
    return text


def kv_per_token(m: ModelSpec) -> str:
    """KV cache bytes per token over all layers at the model's dtype (and, with sliding
    windows, what a token past the window still takes: its full layers only)."""
    kib = m.kv_bytes_per_token() / 1024
    text = f"{kib:.1f} KiB ({m.dtype})"
    if m.num_layers_of("sliding_window"):
        past = m.kv_bytes_per_token_of("full") * m.num_layers_of("full") / 1024
        text += f", {past:.1f} KiB past the window"
    return text


def presets_table() -> Table:
    """One row per bundled preset."""
    t = Table(title="Workload presets (kvsim run PRESET)")
    for col in ("preset", "arrivals", "length", "description"):
        t.add_column(col)
    for name in list_presets():
        spec = load_spec(PRESET_DIR / f"{name}.yaml", f"{name}.yaml")
        t.add_row(name, describe_arrival(spec), describe_length(spec), spec.description)
    return t


def models_table() -> Table:
    """One row per catalog model."""
    t = Table(title="Models (--model NAME, or a Hugging Face config.json)")
    for col in ("model", "params total / active", "layers", "attention", "KV/token", "max len"):
        t.add_column(col)
    for name in list_models():
        m = load_model(name)
        counts = m.param_counts()
        t.add_row(
            name,
            f"{counts.total / 1e9:.1f}B / {counts.active_per_token / 1e9:.1f}B",
            str(m.num_layers),
            describe_attention(m),
            kv_per_token(m),
            f"{m.max_position_embeddings:,}",
        )
    return t


def gpus_table() -> Table:
    """One row per catalog GPU."""
    t = Table(title="GPUs (--gpu NAME, or a GPU YAML)")
    for col in ("GPU", "memory", "BF16 / FP8 TFLOP/s", "HBM GB/s", "interconnect"):
        t.add_column(col)
    for name in list_gpus():
        g = load_gpu(name)
        fp8 = f"{g.fp8_tflops:g}" if g.fp8_tflops else "-"
        t.add_row(
            name,
            f"{g.memory_gib:.1f} GiB",
            f"{g.bf16_tflops:g} / {fp8}",
            f"{g.hbm_bandwidth_gbps:g}",
            g.interconnect or f"{g.interconnect_bandwidth_gbps:g} GB/s per direction",
        )
    return t


def list_command() -> int:
    """Print the presets, models and GPUs; return the exit status."""
    console = Console()
    for table in (presets_table(), models_table(), gpus_table()):
        console.print(table)
    return 0

"""The commands that hold kvcore against vLLM's schedule: ``kvsim replay`` (a trace
through kvcore's scheduler; :mod:`sim.app.replay_command`) and ``kvsim conformance`` (kvcore
against an installed vLLM; :mod:`sim.conformance.cli`). Each is imported when its
command runs.

:func:`replay` is long because typer declares each option as a parameter with its help
and default; its body is three lines.
"""

from __future__ import annotations

import typer

from sim.conformance import DEFAULT_SEED

CONFORMANCE_HELP = (
    "Compare kvcore with an installed vLLM on random traces, op sequences and sizing "
    "cases; a table of traces, steps and mismatches (exit 1 on any mismatch)."
)
"""``kvsim conformance``'s help (the command's function has no docstring)."""


def replay(
    ctx: typer.Context,
    trace: str = typer.Argument(
        ...,
        help="replay trace: JSON list of {request_id, arrival_step, prompt_token_ids, "
        "max_tokens} objects (optional: priority, cache_salt, lora_id); docs/traces.md",
    ),
    out: str = typer.Option("-", "--out", help="output JSONL file; - is stdout"),
    async_scheduling: bool = typer.Option(
        False,
        "--async-scheduling/--no-async-scheduling",
        help="vLLM's async engine loop: AsyncScheduler behind a batch queue of 2; "
        "a step's output is applied after the next step is scheduled",
    ),
    block_size: int = typer.Option(16, "--block-size", help="tokens per KV block"),
    num_gpu_blocks: int = typer.Option(
        1024, "--num-gpu-blocks", help="KV blocks in the pool, including the null block"
    ),
    max_num_seqs: int = typer.Option(128, "--max-num-seqs", help="most requests running at once"),
    max_num_batched_tokens: int = typer.Option(
        2048, "--max-num-batched-tokens", help="token budget of one step"
    ),
    enable_chunked_prefill: bool = typer.Option(
        True,
        "--enable-chunked-prefill/--no-enable-chunked-prefill",
        help="split prompts longer than the step's remaining budget",
    ),
    enable_prefix_caching: bool = typer.Option(
        True,
        "--enable-prefix-caching/--no-enable-prefix-caching",
        help="reuse cached blocks of identical prefixes",
    ),
    long_prefill_token_threshold: int = typer.Option(
        0,
        "--long-prefill-token-threshold",
        help="most prompt tokens per request per step (0: no limit)",
    ),
    policy: str = typer.Option("fcfs", "--scheduling-policy", help="fcfs or priority"),
    watermark: float = typer.Option(
        0.0, "--watermark", help="fraction of blocks kept free when admitting requests"
    ),
    scheduler_reserve_full_isl: bool = typer.Option(
        True,
        "--reserve-full-isl/--no-reserve-full-isl",
        help="admit a request only if its whole sequence fits in free blocks",
    ),
    kv_groups: str = typer.Option(
        "full",
        "--kv-groups",
        help="KV cache groups, comma-separated: full, sliding_window, chunked_local",
    ),
    sliding_window: int = typer.Option(
        None,
        "--sliding-window",
        help="tokens of a sliding_window group's window",
        show_default="none (needed with a sliding_window group)",
    ),
    attention_chunk_size: int = typer.Option(
        None,
        "--attention-chunk-size",
        help="tokens per chunk of a chunked_local group",
        show_default="none (needed with a chunked_local group)",
    ),
    prefix_caching_hash_algo: str = typer.Option(
        "sha256",
        "--prefix-caching-hash-algo",
        help="sha256, sha256_cbor, xxhash or xxhash_cbor",
    ),
    max_model_len: int = typer.Option(
        None,
        "--max-model-len",
        help="longest sequence, tokens",
        show_default="the trace's largest prompt + max_tokens",
    ),
    sample_token_id: int = typer.Option(
        7, "--sample-token-id", help="the token the fake model samples"
    ),
    none_hash_seed: str = typer.Option(
        "vllm-none-hash",
        "--none-hash-seed",
        help="seed of the first block's parent hash (vLLM: PYTHONHASHSEED if set)",
    ),
    num_lookahead_tokens: int = typer.Option(
        0, "--num-lookahead-tokens", help="speculative slots reserved per request per step"
    ),
    num_speculative_tokens: int = typer.Option(
        0,
        "--num-speculative-tokens",
        help="speculative decoding: drafts per request per step (0: off); the fake model "
        "drafts and accepts by kvcore/replay_spec.py's rules",
    ),
    speculative_method: str = typer.Option(
        "ngram",
        "--speculative-method",
        help="speculative method: ngram, ngram_gpu, draft_model, eagle or eagle3",
    ),
    enable_kv_cache_events: bool = typer.Option(
        False, "--kv-events/--no-kv-events", help="add KV cache events to each step"
    ),
    dump_block_tables: bool = typer.Option(
        False,
        "--dump-block-tables/--no-dump-block-tables",
        help="add each scheduled request's block table",
    ),
) -> None:
    """Replay a step-indexed trace through kvcore's V1 scheduler with a fake model; one
    JSON line per engine step (what vLLM 0.33.0 schedules)."""
    # Each option's parameter is named as its kvcore.replay.ReplayConfig field.
    from sim.app.replay_command import replay_command

    knobs = {k: v for k, v in ctx.params.items() if k not in ("trace", "out")}
    raise typer.Exit(replay_command(trace, out, knobs))


def conformance(
    vllm_python: str = typer.Option(
        None,
        "--vllm-python",
        metavar="PATH",
        help="interpreter of an environment with vLLM installed",
        show_default=".venv-vllm/bin/python",
    ),
    traces: int = typer.Option(200, "--traces", help="random step traces to compare"),
    seed: int = typer.Option(DEFAULT_SEED, "--seed", help="seed of the random cases"),
    out_dir: str = typer.Option(
        "conformance-failures", "--out-dir", help="where mismatching cases are written"
    ),
    async_scheduling: bool = typer.Option(
        False,
        "--async-scheduling/--no-async-scheduling",
        help="replay the step traces through vLLM's AsyncScheduler and engine-core batch "
        "queue (and kvcore's); op sequences and sizing cases are the same either way",
    ),
    spec_decode: bool = typer.Option(
        False,
        "--spec-decode/--no-spec-decode",
        help="add speculative decoding (ngram, ngram_gpu, draft_model, eagle, eagle3; 1-4 "
        "drafts) to "
        "every step trace",
    ),
    pd: bool = typer.Option(
        False,
        "--pd/--no-pd",
        help="instead, P/D disaggregation: --traces cases on a prefill and on a decode "
        "instance with vLLM's NIXL connector (pull and push; --async-scheduling applies)",
    ),
) -> None:
    from sim.conformance.cli import run_conformance

    raise typer.Exit(
        run_conformance(
            vllm_python,
            traces,
            seed,
            out_dir,
            async_scheduling=async_scheduling,
            spec_decode=spec_decode,
            pd=pd,
        )
    )

"""Runs a random-weight ``Decoder`` for the profile (``ProfileRunner``) and the sweep.

A step is given as per-request ``new_tokens`` (prefill chunk or 1 for a decode) and
``context_tokens`` (already cached). ``make_step`` lays the requests' blocks at random
(scattered) places of a preallocated KV pool, so attention reads through real block
tables; ``run_step`` runs the forward, the LM head on each request's last token and a
greedy sample, as an engine step does.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from calibrate.harness.torch_model import AttentionBatch, Decoder, build_model
from calibrate.model_spec import ModelSpec

DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}
GRAPH_SIZES = [1, 2, 4, *range(8, 256, 8), *range(256, 513, 16)]  # vLLM's capture sizes


@dataclass
class StepInputs:
    """Device tensors of one step."""

    input_ids: torch.Tensor
    positions: torch.Tensor
    batch: AttentionBatch
    logits_rows: torch.Tensor


class TorchRunner:
    """One rank's model on ``device`` (``cpu`` or ``cuda``) in ``dtype``."""

    def __init__(
        self,
        spec: ModelSpec,
        device: str = "cpu",
        dtype: str = "float32",
        num_layers: int | None = None,
        tp: int = 1,
        attention_backend: str = "torch",
        block_size: int = 16,
        seed: int = 0,
    ) -> None:
        self.spec, self.device, self.dtype = spec, torch.device(device), DTYPES[dtype]
        self.num_layers = min(num_layers or spec.num_layers, spec.num_layers)
        self.tp, self.backend, self.block_size, self.seed = tp, attention_backend, block_size, seed
        self.model: Decoder | None = None
        self.kv_caches: list[tuple[torch.Tensor, torch.Tensor]] = []
        self.num_blocks = 0
        self._hidden: torch.Tensor | None = None

    # ---- ProfileRunner --------------------------------------------------------------

    def init_device(self) -> None:
        """Create the GEMM library handles before the baseline snapshot (as vLLM)."""
        if self.device.type == "cuda":
            torch.cuda.set_device(self.device)
        a = torch.ones(16, 16, device=self.device, dtype=self.dtype)
        torch.nn.functional.linear(a @ a, a)

    def load_weights(self) -> int:
        """Build the model; return its parameter bytes."""
        self.model = build_model(
            self.spec, self.dtype, self.device, self.num_layers, self.tp, self.seed
        )
        return sum(p.numel() * p.element_size() for p in self.model.parameters())

    def _even_split(self, num_tokens: int, num_reqs: int) -> list[int]:
        base, extra = divmod(num_tokens, num_reqs)
        return [base + (i < extra) for i in range(num_reqs)]

    @torch.inference_mode()
    def dummy_forward(self, num_tokens: int, num_reqs: int) -> None:
        """Forward ``num_tokens`` tokens split evenly over ``num_reqs`` requests, attention
        skipped; keeps each request's last hidden state for the sampler."""
        assert self.model is not None
        lens = self._even_split(num_tokens, num_reqs)
        positions = torch.cat([torch.arange(n, device=self.device) for n in lens])
        ids = torch.randint(0, self.spec.vocab_size, (num_tokens,), device=self.device)
        hidden = self.model(ids, positions)
        rows = torch.tensor(np.cumsum(lens) - 1, device=self.device)
        self._hidden = hidden[rows].clone()
        del hidden

    @torch.inference_mode()
    def dummy_sampler(self, num_reqs: int) -> None:
        """Logits for ``num_reqs`` requests, then temperature, top-k/top-p and sampling,
        twice (the second time with a per-request generator, as vLLM)."""
        assert self.model is not None and self._hidden is not None
        logits = self.model.compute_logits(self._hidden[:num_reqs])
        for _ in range(2):
            scaled = logits / 0.7
            top = scaled.topk(min(50, scaled.shape[-1]), dim=-1).values[:, -1:]
            scaled = scaled.masked_fill(scaled < top, float("-inf"))
            probs_sorted, order = scaled.softmax(-1).sort(dim=-1, descending=True)
            cut = probs_sorted.cumsum(-1) - probs_sorted > 0.9
            probs_sorted = probs_sorted.masked_fill(cut, 0.0)
            choice = torch.multinomial(probs_sorted, 1)
            order.gather(-1, choice)
        self._hidden = None

    def cudagraph_estimate(self, max_num_seqs: int) -> int | None:
        """CUDA only: capture the decode forward (attention skipped) at batch 1 and 2,
        extrapolate the memory drop to vLLM's capture sizes up to ``max_num_seqs``."""
        if self.device.type != "cuda" or self.model is None:
            return None
        sizes = [s for s in GRAPH_SIZES if s <= min(max_num_seqs, 512)]
        drops = []
        pool = torch.cuda.graph_pool_handle()
        graphs = []
        try:
            for size in (1, 2):
                ids = torch.zeros(size, dtype=torch.long, device=self.device)
                with torch.inference_mode():
                    self.model(ids, ids)  # warm-up
                torch.cuda.synchronize()
                free0 = torch.cuda.mem_get_info()[0]
                graph = torch.cuda.CUDAGraph()
                with torch.inference_mode(), torch.cuda.graph(graph, pool=pool):
                    self.model(ids, ids)
                torch.cuda.synchronize()
                drops.append(free0 - torch.cuda.mem_get_info()[0])
                graphs.append(graph)
        except Exception:  # noqa: BLE001 - an estimate only: fall back to none
            return None
        finally:
            del graphs
            torch.cuda.empty_cache()
        return int(max(drops[0], 0) + max(drops[1], 0) * (len(sizes) - 1))

    # ---- steps for the sweep -----------------------------------------------------------

    def allocate_kv(self, num_blocks: int) -> None:
        """The KV pool: ``num_blocks`` blocks per layer (random contents)."""
        assert self.model is not None
        self.kv_caches = self.model.allocate_kv_caches(num_blocks, self.block_size)
        self.num_blocks = num_blocks

    def make_step(
        self, new_tokens: list[int], context_tokens: list[int], rng: np.random.Generator
    ) -> StepInputs:
        """Inputs of one step; each request's blocks are scattered over the pool."""
        bs = self.block_size
        need = [-(-(c + n) // bs) for n, c in zip(new_tokens, context_tokens, strict=True)]
        if sum(need) > self.num_blocks:
            raise ValueError(f"step needs {sum(need)} KV blocks, the pool has {self.num_blocks}")
        ids = rng.permutation(self.num_blocks)[: sum(need)]
        table = np.zeros((len(need), max(need)), dtype=np.int32)
        slots, positions, start = [], [], 0
        for r, (n, c) in enumerate(zip(new_tokens, context_tokens, strict=True)):
            table[r, : need[r]] = ids[start : start + need[r]]
            start += need[r]
            pos = np.arange(c, c + n)
            positions.append(pos)
            slots.append(table[r, pos // bs].astype(np.int64) * bs + pos % bs)
        qsl = np.concatenate(([0], np.cumsum(new_tokens))).astype(np.int32)
        dev = self.device
        batch = AttentionBatch(
            block_table=torch.tensor(table, device=dev),
            seq_lens=torch.tensor(
                np.add(new_tokens, context_tokens), dtype=torch.int32, device=dev
            ),
            query_start_loc=torch.tensor(qsl, device=dev),
            slot_mapping=torch.tensor(np.concatenate(slots), device=dev),
            max_query_len=int(max(new_tokens)),
            backend=self.backend,
        )
        total = int(qsl[-1])
        return StepInputs(
            input_ids=torch.tensor(rng.integers(0, self.spec.vocab_size, total), device=dev),
            positions=torch.tensor(np.concatenate(positions), device=dev),
            batch=batch,
            logits_rows=torch.tensor(qsl[1:] - 1, dtype=torch.long, device=dev),
        )

    @torch.inference_mode()
    def run_step(self, inputs: StepInputs) -> torch.Tensor:
        """Forward, LM head on the last token of each request, greedy sample."""
        assert self.model is not None
        hidden = self.model(inputs.input_ids, inputs.positions, inputs.batch, self.kv_caches)
        return self.model.compute_logits(hidden[inputs.logits_rows]).argmax(-1)

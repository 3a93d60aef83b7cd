"""One engine step's time from the schedulers' `StepTimeModel`, fast enough for long runs.

A vLLM step may hold several prefill chunks next to its decodes. Its time is the model's line
over the step's summed features (one overhead per step):

    t = overhead + a_lin * linear_flops + a_att * attention_flops + a_kv * kv_bytes_read

with the features exactly as `schedulers.step_time.step_features` counts them (causal chunks with
one logit token each, one token per decode over its context plus the LM head). The sums are
written out in closed form here because calling `step_features` per decode per step costs
seconds over a long run; `tests/unit/test_bench_sim_step_cost.py` checks both agree.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable

from schedulers.flops import attention_flops_per_pair_per_layer, linear_flops_per_token_per_layer
from schedulers.step_time import StepTimeModel


@dataclass(frozen=True)
class StepCost:
    """Precomputed per-unit seconds of one `StepTimeModel`."""

    model: StepTimeModel
    s_per_token: float  # linear layers of one token through all layers
    s_per_logit: float  # LM head of one sampled position
    s_per_pair: float  # one (query, key) attention pair through all layers
    s_per_block: float  # reading one KV block

    @classmethod
    def of(cls, model: StepTimeModel) -> StepCost:
        spec = model.spec
        token_flops = spec.num_layers * linear_flops_per_token_per_layer(spec)
        logit_flops = 2 * spec.hidden_size * spec.vocab_size
        pair_flops = spec.num_layers * attention_flops_per_pair_per_layer(spec)
        return cls(model, token_flops * model.s_per_linear_flop, logit_flops * model.s_per_linear_flop,
                   pair_flops * model.s_per_attention_flop, model.kv.bytes_per_block * model.s_per_kv_byte)

    def chunk_s(self, num_new_tokens: int, num_context_tokens: int) -> float:
        """A prefill chunk's share of a step, without the step overhead."""
        pairs = num_new_tokens * num_context_tokens + num_new_tokens * (num_new_tokens + 1) // 2
        blocks = -(-num_context_tokens // self.model.kv.block_size)
        return (num_new_tokens * self.s_per_token + self.s_per_logit + pairs * self.s_per_pair
                + blocks * self.s_per_block)

    def decodes_s(self, num_decodes: int, sum_context_tokens: int, sum_context_blocks: int) -> float:
        """The decodes' share of a step: one token each over its context, plus its KV blocks."""
        return (num_decodes * (self.s_per_token + self.s_per_logit)
                + (sum_context_tokens + num_decodes) * self.s_per_pair
                + sum_context_blocks * self.s_per_block)

    def step_s(self, chunks: Iterable[tuple[int, int]], decode_contexts: Iterable[int]) -> float:
        """Seconds of a step with prefill `chunks` (new tokens, cached context) and decodes."""
        contexts = list(decode_contexts)
        block_size = self.model.kv.block_size
        work_s = sum(self.chunk_s(n, c) for n, c in chunks)
        if contexts:
            work_s += self.decodes_s(len(contexts), sum(contexts), sum(-(-c // block_size) for c in contexts))
        return self.model.overhead_s + work_s if work_s else 0.0

"""Floating-point operations of prefill chunks and decode steps (one multiply-add = 2 FLOPs).

Two conventions for the attention score and value products:

- full (`causal=False`), the seed articles' convention: every query meets every key of the
  sequence, `4 n^2 d` per layer for a prompt of n tokens. The seed FLOPs tables
  (`L (24 n d^2 + 4 n^2 d)`) use it.
- causal (`causal=True`): a query meets only the keys at or before it (the lower triangle with
  its diagonal), `4 d * n (n + 1) / 2` per layer. This is what causal FlashAttention computes, and
  the only convention that fits the seed's measured TTFT table with one efficiency below 1.

Linear FLOPs per token and layer: Q and O projections `2 * 2 d q_width`, K and V
`2 * 2 d kv_width` (grouped-query attention shrinks these), MLP `2 d I` per matrix (3 matrices
gated, 2 not). The LM head (`2 d V` per token whose logits are computed) is counted only when
asked for.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from schedulers.model_spec import ModelSpec


@dataclass(frozen=True)
class FlopCount:
    """FLOPs split into the linear layers (weights x activations) and attention (QK^T, AV)."""

    linear_flops: float
    attention_flops: float

    @property
    def total_flops(self) -> float:
        return self.linear_flops + self.attention_flops

    @property
    def attention_share(self) -> float:
        """Fraction 0..1 of the total that attention takes (0 for an empty count)."""
        total = self.total_flops
        return self.attention_flops / total if total else 0.0

    def __add__(self, other: FlopCount) -> FlopCount:
        return FlopCount(self.linear_flops + other.linear_flops,
                         self.attention_flops + other.attention_flops)


def linear_flops_per_token_per_layer(spec: ModelSpec) -> int:
    """Projection and MLP FLOPs of one token in one layer."""
    d = spec.hidden_size
    projections = 2 * d * (2 * spec.q_width + 2 * spec.kv_width)
    mlp = 2 * d * spec.intermediate_size * (3 if spec.gated_mlp else 2)
    return projections + mlp


def attention_flops_per_pair_per_layer(spec: ModelSpec) -> int:
    """FLOPs of one (query, key) pair in one layer over all heads: QK^T and AV, 2 * 2 * q_width."""
    return 4 * spec.q_width


def num_attention_pairs(num_new_tokens: int, num_context_tokens: int = 0,
                        causal: bool = False) -> int:
    """(query, key) pairs of `num_new_tokens` queries over `num_context_tokens` cached keys.

    Full: every query meets all `context + new` keys. Causal: query i (0-based) meets
    `context + i + 1` keys, so `new * context + new (new + 1) / 2`.
    """
    _check_counts(num_new_tokens, num_context_tokens)
    if causal:
        return num_new_tokens * num_context_tokens + num_new_tokens * (num_new_tokens + 1) // 2
    return num_new_tokens * (num_context_tokens + num_new_tokens)


def linear_flops(spec: ModelSpec, num_tokens: int, num_logit_tokens: int = 0) -> float:
    """Linear FLOPs of `num_tokens` through all layers, plus the LM head for `num_logit_tokens`."""
    _check_counts(num_tokens, num_logit_tokens)
    lm_head = 2 * spec.hidden_size * spec.vocab_size * num_logit_tokens
    return float(spec.num_layers * linear_flops_per_token_per_layer(spec) * num_tokens + lm_head)


def attention_flops(spec: ModelSpec, num_new_tokens: int, num_context_tokens: int = 0,
                    causal: bool = False) -> float:
    """Attention FLOPs (QK^T and AV, all layers) of a chunk over its cached context."""
    pairs = num_attention_pairs(num_new_tokens, num_context_tokens, causal)
    return float(spec.num_layers * attention_flops_per_pair_per_layer(spec) * pairs)


def prefill_flops(spec: ModelSpec, num_new_tokens: int, num_context_tokens: int = 0,
                  causal: bool = False, num_logit_tokens: int = 0) -> FlopCount:
    """FLOPs of prefilling `num_new_tokens` on top of `num_context_tokens` already cached.

    Defaults follow the seed: full attention square, no LM head. For a fresh prompt of n tokens
    on `mha_seed_spec(d, L)` this is exactly `L (24 n d^2 + 4 n^2 d)`.
    """
    return FlopCount(linear_flops(spec, num_new_tokens, num_logit_tokens),
                     attention_flops(spec, num_new_tokens, num_context_tokens, causal))


def decode_step_flops(spec: ModelSpec, context_tokens: Sequence[int],
                      with_lm_head: bool = True) -> FlopCount:
    """FLOPs of one decode step for a batch: one new token per sequence over its context.

    `context_tokens[i]`: tokens already cached for sequence i. The new token meets its context
    and itself (the same count in both conventions). The LM head runs once per sequence.
    """
    num_seqs = len(context_tokens)
    pairs = sum(num_attention_pairs(1, c) for c in context_tokens)
    attention = spec.num_layers * attention_flops_per_pair_per_layer(spec) * pairs
    return FlopCount(linear_flops(spec, num_seqs, num_seqs if with_lm_head else 0), float(attention))


def _check_counts(*counts: int) -> None:
    if any(c < 0 for c in counts):
        raise ValueError(f"token counts must be >= 0, got {counts}")

"""The seed articles' derived quantities, computed from a `ModelSpec` instead of quoted.

- crossover: the prompt length where attention FLOPs equal linear FLOPs. Full convention:
  `L lin n = L 4 q n^2`, so `n = lin / (4 q)` with `lin` the linear FLOPs per token and layer and
  `q` the query width; for the seed's MHA model `lin = 24 d^2`, `q = d`, so `n = 6d`.
- TTFT doubling ratio: `FLOPs(2n) / FLOPs(n)`, from 2 (linear dominated) through 3 (at the
  crossover) to 4 (attention dominated).
- largest chunk meeting a TTFT SLO: the seed's `chunk <= T_max * peak / FLOPs_per_token`.

The seed's simplified GQA rows use `(24 - 4 (1 - 1/G)) n d^2` for the linear term: they shrink K
and V by the group size G but keep the MHA model's `16 n d^2` FFN. Real Llama-3 MLPs are gated
and wider (Llama-3-8B: `21 n d^2` for the MLP alone), so the exact counts differ; both are here.
"""
from __future__ import annotations

from schedulers.flops import (attention_flops_per_pair_per_layer, linear_flops_per_token_per_layer,
                              prefill_flops)
from schedulers.hardware import HardwareSpec
from schedulers.model_spec import ModelSpec
from schedulers.roofline import prefill_time_s

# Seed table: Llama-3-8B, A100 SXM4, FlashAttention-2, batch 1. (prompt tokens, TTFT ms);
# "1K" read as 1024 tokens, like the seed's FLOPs table.
SEED_TTFT_LLAMA3_8B_A100_MS: tuple[tuple[int, float], ...] = (
    (1 * 1024, 81.0), (10 * 1024, 832.0), (50 * 1024, 7717.0),
    (100 * 1024, 21731.0), (128 * 1024, 32863.0),
)

# Seed table: d=4096, L=32 MHA, full convention. (tokens, linear TFLOPs, attention TFLOPs,
# total TFLOPs, attention share %), as printed (one decimal below 100, integers above).
SEED_MHA_FLOPS_TABLE: tuple[tuple[int, float, float, float, float], ...] = (
    (512, 6.6, 0.1, 6.7, 2), (1024, 13.2, 0.5, 13.7, 4), (2048, 26.4, 2.2, 28.6, 8),
    (4096, 52.8, 8.8, 61.6, 14), (8192, 105.5, 35.2, 140.7, 25),
    (32768, 422, 563, 985, 57), (131072, 1688, 9007, 10695, 84),
)


def crossover_tokens(spec: ModelSpec, causal: bool = False) -> float:
    """Prompt tokens at which attention FLOPs equal linear FLOPs (fresh prompt, no cache).

    Full: `lin / (4 q)`. Causal (pairs `n (n + 1) / 2`): `2 lin / (4 q) - 1`.
    """
    ratio = linear_flops_per_token_per_layer(spec) / attention_flops_per_pair_per_layer(spec)
    return 2 * ratio - 1 if causal else ratio


def ttft_doubling_ratio(spec: ModelSpec, num_tokens: int, causal: bool = False) -> float:
    """How much prefill FLOPs (hence compute-bound TTFT) grow when the prompt doubles from n to 2n."""
    if num_tokens <= 0:
        raise ValueError(f"num_tokens must be positive, got {num_tokens}")
    doubled = prefill_flops(spec, 2 * num_tokens, causal=causal).total_flops
    return doubled / prefill_flops(spec, num_tokens, causal=causal).total_flops


def max_chunk_tokens_for_slo(spec: ModelSpec, hw: HardwareSpec, ttft_slo_s: float,
                             num_context_tokens: int = 0, causal: bool = True) -> int:
    """The largest chunk whose prefill step fits in `ttft_slo_s` seconds (0 if none does).

    The seed's bound `T_max * peak / FLOPs_per_token`, made honest: the chunk's FLOPs include its
    attention over `num_context_tokens` cached tokens, and the peak is scaled by the hardware's
    prefill efficiency. Found by bisection on the monotone `prefill_time_s`.
    """
    if ttft_slo_s <= 0:
        raise ValueError(f"ttft_slo_s must be positive, got {ttft_slo_s}")

    def fits(num_tokens: int) -> bool:
        return prefill_time_s(spec, hw, num_tokens, num_context_tokens, causal) <= ttft_slo_s

    per_token = linear_flops_per_token_per_layer(spec) * spec.num_layers
    upper = int(ttft_slo_s * hw.achieved_prefill_flops / per_token) + 1  # linear-only bound
    if not fits(1):
        return 0
    lower = 1
    while lower < upper:  # invariant: fits(lower); nothing above `upper` fits
        middle = (lower + upper + 1) // 2
        if fits(middle):
            lower = middle
        else:
            upper = middle - 1
    return lower


def seed_max_chunk_tokens(spec: ModelSpec, hw: HardwareSpec, ttft_slo_s: float) -> int:
    """The seed's closed form: `T_max * peak / linear FLOPs per token` (no efficiency, no attention)."""
    per_token = linear_flops_per_token_per_layer(spec) * spec.num_layers
    return int(ttft_slo_s * hw.peak_flops / per_token)


def seed_gqa_linear_coefficient(group_size: int) -> float:
    """The seed's GQA linear term in units of `n d^2` per layer: `24 - 4 (1 - 1/G)` (21 for G=4)."""
    if group_size < 1:
        raise ValueError(f"group_size must be >= 1, got {group_size}")
    return 24 - 4 * (1 - 1 / group_size)


def seed_gqa_linear_flops(num_tokens: int, hidden_size: int, num_layers: int, group_size: int) -> float:
    """The seed's simplified GQA linear FLOPs: `L (24 - 4 (1 - 1/G)) n d^2`."""
    return num_layers * seed_gqa_linear_coefficient(group_size) * num_tokens * hidden_size ** 2


def seed_gqa_crossover_tokens(hidden_size: int, group_size: int) -> float:
    """Where the seed's GQA linear term meets `4 n^2 d`: `n = (24 - 4 (1 - 1/G)) d / 4`."""
    return seed_gqa_linear_coefficient(group_size) * hidden_size / 4

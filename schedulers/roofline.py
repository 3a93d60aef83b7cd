"""Roofline times: prefill is compute bound, a decode step is memory bound.

A kernel of F FLOPs moving B bytes takes `max(F / achieved_flops, B / achieved_bytes_per_s)`.
It is compute bound when its arithmetic intensity F / B exceeds the ridge point
`peak_flops / mem_bw` (A100: 312e12 / 2.04e12 = 153 FLOP/byte; H100 at the seed's 495e12 /
3.35e12 = 148). A prefill of n tokens has intensity ~ n, so any prompt above ~150 tokens is
compute bound; a decode step of a small batch is far below the ridge and streams weights and KV.
"""
from __future__ import annotations

import math
from typing import Sequence

from schedulers.flops import decode_step_flops, prefill_flops
from schedulers.hardware import HardwareSpec
from schedulers.model_spec import ModelSpec


def roofline_threshold_flop_per_byte(hw: HardwareSpec) -> float:
    """The ridge point in FLOP/byte: peak FLOP/s over memory bytes/s."""
    return hw.peak_flops / hw.mem_bw_bytes_per_s


def prefill_time_s(spec: ModelSpec, hw: HardwareSpec, num_new_tokens: int,
                   num_context_tokens: int = 0, causal: bool = True) -> float:
    """Seconds to prefill a chunk: its FLOPs at peak x prefill efficiency, floored by one weight read.

    `causal=True` (default) counts what causal FlashAttention computes; the seed's efficiency fit
    is made with it.
    """
    flops = prefill_flops(spec, num_new_tokens, num_context_tokens, causal).total_flops
    compute_s = flops / hw.achieved_prefill_flops
    memory_s = spec.weight_bytes_read_per_step / hw.achieved_decode_bytes_per_s
    return max(compute_s, memory_s)


def decode_step_bytes(spec: ModelSpec, context_tokens: Sequence[int], block_size: int = 16) -> int:
    """Bytes one decode step reads: all weights once, plus each sequence's KV blocks."""
    kv = spec.kv_geometry(block_size)
    return spec.weight_bytes_read_per_step + sum(kv.bytes_for_tokens(c) for c in context_tokens)


def decode_step_time_s(spec: ModelSpec, hw: HardwareSpec, context_tokens: Sequence[int],
                       block_size: int = 16) -> float:
    """Seconds of one decode step for a batch: the slower of the memory and the compute roof.

    Memory: weights + KV blocks of every context at bandwidth x decode efficiency (dominant for
    batches far below the ridge point). Compute: the step's FLOPs at peak x prefill efficiency.
    """
    memory_s = decode_step_bytes(spec, context_tokens, block_size) / hw.achieved_decode_bytes_per_s
    compute_s = decode_step_flops(spec, context_tokens).total_flops / hw.achieved_prefill_flops
    return max(memory_s, compute_s)


def fit_prefill_efficiency(spec: ModelSpec, hw: HardwareSpec,
                           samples: Sequence[tuple[int, float]], causal: bool = True) -> float:
    """One efficiency factor from measured (prompt tokens, TTFT seconds) pairs.

    Minimises the squared log error, so the factor is the geometric mean of the per-sample
    efficiencies `ideal_s / measured_s`, with `ideal_s` the FLOPs at peak.
    """
    if not samples:
        raise ValueError("fit_prefill_efficiency needs at least one sample")
    logs = []
    for num_tokens, measured_s in samples:
        if measured_s <= 0:
            raise ValueError(f"measured TTFT must be positive, got {measured_s} for {num_tokens} tokens")
        ideal_s = prefill_flops(spec, num_tokens, 0, causal).total_flops / hw.peak_flops
        logs.append(math.log(ideal_s / measured_s))
    return math.exp(sum(logs) / len(logs))

"""Time of one engine iteration, linear in what the iteration does.

    t = overhead_s + s_per_linear_flop * linear_flops + s_per_attention_flop * attention_flops
        + s_per_kv_byte * kv_bytes_read

An iteration runs at most one prefill chunk (`prefill_tokens` new tokens over `prefill_context`
cached ones, causal attention) and one decode token for each of `decode_contexts`. The features
come from `flops` and the model's KV geometry; the four coefficients come either from the
roofline (`from_roofline`, GPU defaults) or from timed iterations of the real engine (`fit`, least
squares with non-negative coefficients). Adding the terms instead of taking the roofline's max
overestimates overlapping work a little; a fit absorbs that.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from schedulers.flops import FlopCount, decode_step_flops, prefill_flops
from schedulers.hardware import HardwareSpec
from schedulers.least_squares import nonnegative_least_squares
from schedulers.model_spec import ModelSpec
from transfer.kv_geometry import KVGeometry


@dataclass(frozen=True)
class StepFeatures:
    """What one iteration does: FLOPs by kind and bytes of KV cache it reads."""

    linear_flops: float
    attention_flops: float
    kv_bytes_read: float

    def as_row(self) -> tuple[float, float, float, float]:
        """The regression row: a 1 for the overhead, then the three features."""
        return (1.0, self.linear_flops, self.attention_flops, self.kv_bytes_read)


@dataclass(frozen=True)
class StepSample:
    """One timed iteration of the real engine (`duration_s` in seconds)."""

    prefill_tokens: int
    prefill_context: int
    decode_contexts: tuple[int, ...]
    duration_s: float


def step_features(spec: ModelSpec, kv: KVGeometry, prefill_tokens: int = 0, prefill_context: int = 0,
                  decode_contexts: Sequence[int] = ()) -> StepFeatures:
    """Features of an iteration: one causal prefill chunk plus one decode token per context."""
    flops = FlopCount(0.0, 0.0)
    kv_bytes = 0
    if prefill_tokens:
        flops = flops + prefill_flops(spec, prefill_tokens, prefill_context, causal=True,
                                      num_logit_tokens=1)
        kv_bytes += kv.bytes_for_tokens(prefill_context) if prefill_context else 0
    if decode_contexts:
        flops = flops + decode_step_flops(spec, decode_contexts)
        kv_bytes += sum(kv.bytes_for_tokens(c) for c in decode_contexts)
    return StepFeatures(flops.linear_flops, flops.attention_flops, float(kv_bytes))


# StepTimeModel's fitted coefficients (its fields after spec and kv), in order.
COEFFICIENTS = ("overhead_s", "s_per_linear_flop", "s_per_attention_flop", "s_per_kv_byte")


@dataclass(frozen=True)
class StepTimeModel:
    """Coefficients of the step-time line for one model on one engine (seconds per unit)."""

    spec: ModelSpec
    kv: KVGeometry
    overhead_s: float
    s_per_linear_flop: float
    s_per_attention_flop: float
    s_per_kv_byte: float

    def predict(self, prefill_tokens: int = 0, prefill_context: int = 0,
                decode_contexts: Sequence[int] = ()) -> float:
        """Seconds of one iteration; 0 for an empty one."""
        if not prefill_tokens and not decode_contexts:
            return 0.0
        features = step_features(self.spec, self.kv, prefill_tokens, prefill_context, decode_contexts)
        return self.predict_features(features)

    def predict_features(self, features: StepFeatures) -> float:
        coefficients = (self.overhead_s, self.s_per_linear_flop, self.s_per_attention_flop,
                        self.s_per_kv_byte)
        return sum(c * x for c, x in zip(coefficients, features.as_row()))

    def chunked_prefill_steps_s(self, num_tokens: int, num_cached_tokens: int, chunk_tokens: int,
                                decode_contexts: Sequence[int] = ()) -> list[float]:
        """Seconds of each iteration that prefills `num_tokens` new tokens in chunks of `chunk_tokens`
        after `num_cached_tokens` cached ones, while `decode_contexts` decode alongside."""
        if chunk_tokens <= 0:
            raise ValueError(f"chunk_tokens must be positive, got {chunk_tokens}")
        steps_s = []
        for start in range(0, num_tokens, chunk_tokens):
            size = min(chunk_tokens, num_tokens - start)
            steps_s.append(self.predict(size, num_cached_tokens + start, decode_contexts))
        return steps_s

    @classmethod
    def from_roofline(cls, spec: ModelSpec, hw: HardwareSpec, block_size: int = 16) -> StepTimeModel:
        """GPU defaults: FLOPs at peak x prefill efficiency; weights (as the overhead) and KV at
        bandwidth x decode efficiency."""
        s_per_flop = 1.0 / hw.achieved_prefill_flops
        s_per_byte = 1.0 / hw.achieved_decode_bytes_per_s
        return cls(spec, spec.kv_geometry(block_size), spec.weight_bytes_read_per_step * s_per_byte,
                   s_per_flop, s_per_flop, s_per_byte)

    @classmethod
    def fit(cls, spec: ModelSpec, kv: KVGeometry, samples: Sequence[StepSample]) -> StepTimeModel:
        """Coefficients (all >= 0) minimising the squared *relative* error over timed iterations.

        Steps span two orders of magnitude (a 6 ms decode, a 900 ms 4k-token prefill); plain
        least squares lets the few large prefills set the per-step overhead, and decode steps,
        which TPOT is made of, came out 20-40% long. Each row is divided by its duration.
        A feature the samples never vary (e.g. no sample reads KV) gets coefficient 0; collect
        samples that vary each of prefill size, context and decode batch and context.
        """
        if not samples:
            raise ValueError("StepTimeModel.fit needs at least one sample")
        if any(s.duration_s <= 0 for s in samples):
            raise ValueError("StepTimeModel.fit needs positive durations")
        rows = [[x / s.duration_s for x in step_features(spec, kv, s.prefill_tokens, s.prefill_context,
                                                         s.decode_contexts).as_row()]
                for s in samples]
        coefficients = nonnegative_least_squares(rows, [1.0] * len(samples))
        return cls(spec, kv, *coefficients)

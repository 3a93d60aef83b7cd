"""Latency targets by prompt length bucket.

The seed's buckets: prompts up to 4K tokens get a 200 ms TTFT, 4K-16K 1 s, above 16K 5 s (4K =
4096 tokens). TPOT has one target for all lengths. A request's own SLOs override the table.
"""
from __future__ import annotations

from dataclasses import dataclass

from schedulers.types import RequestInfo

DEFAULT_TTFT_BUCKETS: tuple[tuple[int | None, float], ...] = ((4096, 0.2), (16384, 1.0), (None, 5.0))
DEFAULT_TPOT_SLO_S = 0.1  # an assumption (the seeds give none): 10 tokens/s per stream


@dataclass(frozen=True)
class SloTable:
    """`ttft_buckets`: (largest prompt tokens in the bucket, or None for "any", TTFT seconds),
    ascending; a prompt falls in the first bucket whose bound is >= its length."""

    ttft_buckets: tuple[tuple[int | None, float], ...] = DEFAULT_TTFT_BUCKETS
    tpot_slo_s: float = DEFAULT_TPOT_SLO_S

    def __post_init__(self) -> None:
        bounds = [b for b, _ in self.ttft_buckets]
        if not bounds or bounds[-1] is not None or None in bounds[:-1]:
            raise ValueError("ttft_buckets must be non-empty and end with exactly one (None, seconds) bucket")
        if bounds[:-1] != sorted(bounds[:-1]):
            raise ValueError(f"ttft_buckets bounds must ascend, got {bounds}")
        if any(s <= 0 for _, s in self.ttft_buckets) or self.tpot_slo_s <= 0:
            raise ValueError("SLO seconds must be positive")

    def ttft_slo_s(self, num_prompt_tokens: int) -> float:
        """TTFT target in seconds for a prompt of this many tokens."""
        for bound, seconds in self.ttft_buckets:
            if bound is None or num_prompt_tokens <= bound:
                return seconds
        raise AssertionError("unreachable: the last bucket is unbounded")

    def for_request(self, request: RequestInfo) -> tuple[float, float]:
        """(TTFT, TPOT) targets in seconds: the request's own, else the table's."""
        ttft_s = request.ttft_slo_s if request.ttft_slo_s is not None else self.ttft_slo_s(request.num_prompt_tokens)
        tpot_s = request.tpot_slo_s if request.tpot_slo_s is not None else self.tpot_slo_s
        return ttft_s, tpot_s

"""Dynamo-style conditional disaggregation on fixed thresholds."""
from __future__ import annotations

from dataclasses import dataclass

from schedulers.candidates import disaggregated_pair
from schedulers.policies.colocated import colocated_decision
from schedulers.policies.disaggregated import disaggregated_decision
from schedulers.types import ClusterView, Decision, NoCandidateError, RequestInfo


@dataclass(frozen=True)
class LengthThresholdPolicy:
    """Disaggregate long uncached prompts while the prefill worker's queue is short.

    With u = num_prompt_tokens - num_cached_tokens and P the chosen prefill worker:

        disaggregated  iff  u > threshold_tokens
                            and P.num_inflight < max_prefill_queue
                            and (max_prefill_queue_tokens is None
                                 or P.num_queued_prefill_tokens < max_prefill_queue_tokens)
                            and a (prefill, decode) pair exists
        colocated      otherwise

    `threshold_tokens`: tokens (default 1024; exactly 1024 stays colocated).
    `max_prefill_queue`: requests in flight on P (default 4; exactly 4 stays colocated).
    `max_prefill_queue_tokens`: optional bound on P's queued prompt tokens.
    """

    threshold_tokens: int = 1024
    max_prefill_queue: int = 4
    max_prefill_queue_tokens: int | None = None
    name: str = "length_threshold"

    def __post_init__(self) -> None:
        if self.threshold_tokens < 0 or self.max_prefill_queue < 0:
            raise ValueError("threshold_tokens and max_prefill_queue must be >= 0")

    def decide(self, request: RequestInfo, view: ClusterView) -> Decision:
        uncached = request.num_uncached_tokens
        if uncached <= self.threshold_tokens:
            return colocated_decision(request, view, f"{uncached} uncached tokens <= threshold "
                                                     f"{self.threshold_tokens}")
        try:
            prefill, decode = disaggregated_pair(view, request)
        except NoCandidateError:
            return colocated_decision(request, view, f"{uncached} uncached tokens > threshold "
                                                     f"{self.threshold_tokens} but no prefill/decode pair")
        if prefill.num_inflight >= self.max_prefill_queue:
            return colocated_decision(request, view, f"prefill worker {prefill.worker_id} has "
                                      f"{prefill.num_inflight} in flight >= max {self.max_prefill_queue}")
        limit = self.max_prefill_queue_tokens
        if limit is not None and prefill.num_queued_prefill_tokens >= limit:
            return colocated_decision(request, view, f"prefill worker {prefill.worker_id} has "
                                      f"{prefill.num_queued_prefill_tokens} queued tokens >= max {limit}")
        return disaggregated_decision(request, prefill, decode, f"{uncached} uncached tokens > threshold "
                                      f"{self.threshold_tokens}, prefill queue {prefill.num_inflight} "
                                      f"< {self.max_prefill_queue}")

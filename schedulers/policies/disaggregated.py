"""Always disaggregated: a prefill worker runs the prompt, a different worker decodes."""
from __future__ import annotations

from dataclasses import dataclass

from schedulers.candidates import disaggregated_pair
from schedulers.types import ROUTE_DISAGGREGATED, ClusterView, Decision, RequestInfo, WorkerView


def disaggregated_decision(request: RequestInfo, prefill: WorkerView, decode: WorkerView,
                           why: str = "") -> Decision:
    """The Decision for a chosen pair; `why` prefixes the reason."""
    reason = (f"{why}; " if why else "") + (
        f"disaggregated: {prefill.worker_id} ({prefill.role}, {prefill.num_inflight} in flight) "
        f"prefills {request.num_uncached_tokens} uncached prompt tokens, {decode.worker_id} "
        f"({decode.role}, {decode.num_inflight} in flight) decodes")
    return Decision(ROUTE_DISAGGREGATED, decode.worker_id, prefill.worker_id, reason)


@dataclass(frozen=True)
class DisaggregatedPolicy:
    """prefill = argmin_load {"prefill"} else {"both"}; decode = argmin_load {"decode"} else {"both"};
    prefill != decode. NoCandidateError when no such pair exists."""

    name: str = "disaggregated"

    def decide(self, request: RequestInfo, view: ClusterView) -> Decision:
        prefill, decode = disaggregated_pair(view, request)
        return disaggregated_decision(request, prefill, decode)

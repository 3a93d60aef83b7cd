"""Always colocated: one worker prefills (chunked) and decodes."""
from __future__ import annotations

from dataclasses import dataclass

from schedulers.candidates import colocated_worker
from schedulers.types import ROLE_DECODE, ROUTE_COLOCATED, ClusterView, Decision, RequestInfo


def colocated_decision(request: RequestInfo, view: ClusterView, why: str = "") -> Decision:
    """Route to the least-loaded "both" worker, else the least-loaded "decode" worker.

    Raises NoCandidateError when neither exists. `why` prefixes the reason.
    """
    worker = colocated_worker(view, request)
    where = ("decode worker %s prefills locally (no healthy 'both' worker)" if worker.role == ROLE_DECODE
             else "worker %s prefills and decodes") % worker.worker_id
    reason = (f"{why}; " if why else "") + (
        f"colocated: {where}; {request.num_uncached_tokens} uncached prompt tokens, "
        f"{worker.num_inflight} in flight there")
    return Decision(ROUTE_COLOCATED, worker.worker_id, None, reason)


@dataclass(frozen=True)
class ColocatedPolicy:
    """route = colocated, on argmin_load {healthy "both"} else argmin_load {healthy "decode"}."""

    name: str = "colocated"

    def decide(self, request: RequestInfo, view: ClusterView) -> Decision:
        return colocated_decision(request, view)

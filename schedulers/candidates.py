"""Which healthy workers can serve a route, and which of them is least loaded.

Load order (`WorkerView.load_key`): the router's in-flight count, then the engine's running +
waiting, then KV cache usage, then the worker id.
"""
from __future__ import annotations

from typing import Sequence

from schedulers.types import (ROLE_BOTH, ROLE_DECODE, ROLE_PREFILL, ClusterView, NoCandidateError,
                              WorkerView)

PREFILL_ROLES = (ROLE_PREFILL, ROLE_BOTH)  # preferred first
DECODE_ROLES = (ROLE_DECODE, ROLE_BOTH)  # preferred first


def by_preference(workers: Sequence[WorkerView], roles: Sequence[str]) -> list[WorkerView]:
    """Workers ordered by role preference (position in `roles`), then least loaded first."""
    return sorted((w for w in workers if w.role in roles),
                  key=lambda w: (roles.index(w.role), w.load_key))


def colocated_worker(view: ClusterView) -> WorkerView:
    """Least-loaded healthy "both" worker, else least-loaded healthy "decode" worker."""
    ordered = by_preference(view.healthy((ROLE_BOTH, ROLE_DECODE)), (ROLE_BOTH, ROLE_DECODE))
    if not ordered:
        raise NoCandidateError("no healthy worker of role 'both' or 'decode' to serve colocated")
    return ordered[0]


def disaggregated_pair(view: ClusterView) -> tuple[WorkerView, WorkerView]:
    """(prefill, decode) workers: each by role preference then load, never the same worker."""
    prefills = by_preference(view.healthy(PREFILL_ROLES), PREFILL_ROLES)
    decodes = by_preference(view.healthy(DECODE_ROLES), DECODE_ROLES)
    for prefill in prefills:
        for decode in decodes:
            if decode.worker_id != prefill.worker_id:
                return prefill, decode
    raise NoCandidateError(f"no pair of distinct healthy workers for disaggregated serving "
                           f"({len(prefills)} prefill-capable, {len(decodes)} decode-capable)")


def all_pairs(view: ClusterView) -> list[tuple[WorkerView, WorkerView]]:
    """Every (prefill-capable, decode-capable) pair of distinct healthy workers."""
    return [(p, d) for p in view.healthy(PREFILL_ROLES) for d in view.healthy(DECODE_ROLES)
            if p.worker_id != d.worker_id]

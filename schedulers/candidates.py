"""Which workers can serve a route for a request, and which of them is least loaded.

A worker can serve when it is healthy and the request fits its max_model_len: prompt +
max_tokens where it decodes, prompt + 1 where it only prefills (vLLM's prefill leg samples one
token). Among those, workers (or prefill/decode pairs) with a full KV cache are left out while
any other can serve; when all are full the request still goes to the least loaded, where it
waits in the engine's queue as vLLM would make it wait anyway. Every policy picks from these
lists only, so no policy sends a request to a dead worker, past a worker's length limit, or to
a full worker while a worker with room exists.

Load order (`WorkerView.load_key`): the router's in-flight count, then the engine's running +
waiting, then KV cache usage, then the worker id.
"""
from __future__ import annotations

from typing import Mapping, Sequence

from schedulers.types import (ROLE_BOTH, ROLE_DECODE, ROLE_PREFILL, ClusterView, NoCandidateError,
                              RequestInfo, WorkerView)

PREFILL_ROLES = (ROLE_PREFILL, ROLE_BOTH)  # preferred first
DECODE_ROLES = (ROLE_DECODE, ROLE_BOTH)  # preferred first
COLOCATED_ROLES = (ROLE_BOTH, ROLE_DECODE)  # preferred first


def prefill_engines(role_counts: Mapping[str, int]) -> int:
    """How many engines of a deployment (workers by role) prefill: prefill-only and `both`."""
    return sum(role_counts.get(role, 0) for role in PREFILL_ROLES)


def decode_engines(role_counts: Mapping[str, int]) -> int:
    """How many engines of a deployment (workers by role) decode: decode-only and `both`."""
    return sum(role_counts.get(role, 0) for role in DECODE_ROLES)


def by_preference(workers: Sequence[WorkerView], roles: Sequence[str]) -> list[WorkerView]:
    """Workers ordered by role preference (position in `roles`), then least loaded first."""
    return sorted((w for w in workers if w.role in roles),
                  key=lambda w: (roles.index(w.role), w.load_key))


def _tokens_needed(request: RequestInfo | None, decodes: bool) -> int:
    if request is None:
        return 0
    return request.num_prompt_tokens + (request.max_tokens if decodes else 1)


def serving(view: ClusterView, roles: Sequence[str], request: RequestInfo | None = None,
            decodes: bool = True) -> list[WorkerView]:
    """Workers of `roles` that can take `request` (decoding it, or only prefilling it), by
    role preference then load; full ones only when no other can."""
    able = _able(view, roles, request, decodes)
    return by_preference([w for w in able if not w.is_full] or able, roles)


def _able(view: ClusterView, roles: Sequence[str], request: RequestInfo | None,
          decodes: bool) -> list[WorkerView]:
    needed = _tokens_needed(request, decodes)
    return [w for w in view.healthy(roles) if w.fits(needed)]


def _why_none(view: ClusterView, roles: Sequence[str], request: RequestInfo | None, decodes: bool) -> str:
    workers = [w for w in view.workers if w.role in roles]
    needed = _tokens_needed(request, decodes)
    return (f"{len(workers)} of role {'/'.join(roles)}: "
            f"{sum(not w.is_healthy for w in workers)} down, "
            f"{sum(w.is_healthy and not w.fits(needed) for w in workers)} too short for {needed} tokens")


def colocated_worker(view: ClusterView, request: RequestInfo | None = None) -> WorkerView:
    """Least-loaded "both" worker that can take the request, else least-loaded "decode" one."""
    ordered = serving(view, COLOCATED_ROLES, request)
    if not ordered:
        raise NoCandidateError("no worker can serve colocated: "
                               + _why_none(view, COLOCATED_ROLES, request, True))
    return ordered[0]


def disaggregated_pair(view: ClusterView, request: RequestInfo | None = None) -> tuple[WorkerView, WorkerView]:
    """(prefill, decode) workers: each by role preference then load, never the same worker."""
    pairs = all_pairs(view, request)
    if not pairs:
        raise NoCandidateError(f"no pair of distinct workers for disaggregated serving "
                               f"({_why_none(view, PREFILL_ROLES, request, False)}; "
                               f"{_why_none(view, DECODE_ROLES, request, True)})")
    return pairs[0]


def all_pairs(view: ClusterView, request: RequestInfo | None = None) -> list[tuple[WorkerView, WorkerView]]:
    """Every (prefill-capable, decode-capable) pair of distinct workers that can take `request`,
    by preference; pairs with a full KV cache on either side only when no other pair exists."""
    prefills = by_preference(_able(view, PREFILL_ROLES, request, decodes=False), PREFILL_ROLES)
    decodes = by_preference(_able(view, DECODE_ROLES, request, decodes=True), DECODE_ROLES)
    pairs = [(p, d) for p in prefills for d in decodes if p.worker_id != d.worker_id]
    return [(p, d) for p, d in pairs if not (p.is_full or d.is_full)] or pairs

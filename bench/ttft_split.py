"""Where a request's TTFT went: inside its engine(s), or on the way; live beside simulated.

A TTFT is the request path (client, router, the worker's front-end, there and back) plus the
engine's part: from the prompt reaching the engine to the end of the step that sampled its first
token (the step the engine was in when it came, the queue and the prefill). Live, vLLM's own
timestamps give the engine's part of every request (`pd_serve.worker._engine_ttft_s`), which the
router logs beside its prediction (DIR/<system>/predictions.json, joined to the records on
`served_id`); the simulator knows when each prompt reached its engine. Set per length bucket,
the two say which side of a TTFT error to look at: on run 60 (colocated at 0.7 load) the
simulated path was 33 ms against 27 live, and a 1,024-2,048-token prompt's engine part 432 ms
against 328.

A disaggregated request is split at its prefill engine: that engine's part (the prompt reaching
it to the end of its prefill, vLLM's timestamp live) and the rest (the path, the hand-over, the
KV transfer and the decode engine's first step), which the live log and the simulator time
alike only as a whole. On run 61 at 4.48 req/s a short prompt's part at the prefill engine was
227 ms live against 97 simulated, the rest 121 against 92.
"""
from __future__ import annotations

import statistics
from typing import Any, Iterable, Mapping, Sequence

from bench.metrics import RequestRecord
from bench.router_log import first_parts
from schedulers.types import ROUTE_COLOCATED, ROUTE_DISAGGREGATED

# Per route, the names of a TTFT's two parts.
PARTS = {ROUTE_COLOCATED: ("engine", "path"), ROUTE_DISAGGREGATED: ("prefill engine", "rest")}


def live_engine_ttft(records: Sequence[RequestRecord], prediction_log: Iterable[Mapping[str, Any]],
                     route: str = ROUTE_COLOCATED) -> dict[str, float]:
    """request_id -> the first part of its TTFT (the engine's, or the prefill engine's for
    route disaggregated), for the records on `route` whose router log entry has it."""
    if route not in PARTS:
        raise ValueError(f"route must be one of {sorted(PARTS)}, got {route!r}")
    part = first_parts(prediction_log, route)
    return {r.request_id: part[r.served_id] for r in records if r.ok and r.route == route and r.served_id in part}


def sim_engine_ttft(records: Sequence[RequestRecord], prompt_reached_s: Mapping[str, float],
                    prompt_prefilled_s: Mapping[str, float] | None = None,
                    route: str = ROUTE_COLOCATED) -> dict[str, float]:
    """request_id -> the first part of its simulated TTFT (`SimResult.prompt_reached_s` to the
    first token, or to `prompt_prefilled_s` for route disaggregated), for the records on `route`."""
    if route not in PARTS:
        raise ValueError(f"route must be one of {sorted(PARTS)}, got {route!r}")
    ends = {r.request_id: r.first_token_s for r in records} if route == ROUTE_COLOCATED else (prompt_prefilled_s or {})
    return {r.request_id: ends[r.request_id] - prompt_reached_s[r.request_id] for r in records
            if r.ok and r.route == route and r.request_id in prompt_reached_s and ends.get(r.request_id) is not None}


def split_summary(records: Sequence[RequestRecord], engine_s: Mapping[str, float],
                  route: str = ROUTE_COLOCATED) -> dict[str, dict[str, Any]]:
    """"<bucket> <part>" (PARTS[route]) -> median seconds and count, over the records with a
    first part (the bucket is the workload's label, "all" where it has none)."""
    first, rest = PARTS[route]
    parts: dict[str, list[float]] = {}
    for r in records:
        if r.request_id not in engine_s or r.ttft_s is None:
            continue
        bucket = r.bucket or "all"
        inside = engine_s[r.request_id]
        parts.setdefault(f"{bucket} {first}", []).append(inside)
        parts.setdefault(f"{bucket} {rest}", []).append(r.ttft_s - inside)
    return {k: {"median_s": float(statistics.median(v)), "count": len(v)} for k, v in parts.items()}


def split_keys(buckets: Sequence[str], route: str = ROUTE_COLOCATED) -> list[str]:
    """The summary keys of `buckets` on `route`, in table order."""
    return [f"{b} {part}" for b in buckets for part in PARTS[route]]

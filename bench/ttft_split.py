"""Where a request's TTFT went: inside its engine, or on the request path; live beside simulated.

A TTFT is the request path (client, router, the worker's front-end, there and back) plus the
engine's part: from the prompt reaching the engine to the end of the step that sampled its first
token (the step the engine was in when it came, the queue and the prefill). Live, vLLM's own
timestamps give the engine's part of every request (`pd_serve.worker._engine_ttft_s`), which the
router logs beside its prediction (DIR/<system>/predictions.json, joined to the records on
`served_id`); the simulator knows when each prompt reached its engine. Set per length bucket,
the two say which side of a TTFT error to look at: on run 60 (colocated at 0.7 load) the
simulated path was 33 ms against 27 live, and a 1,024-2,048-token prompt's engine part 432 ms
against 328.

Only colocated requests are split: a disaggregated request's engine part is two engines' and a
transfer, which the live log and the simulator do not time alike.
"""
from __future__ import annotations

import statistics
from typing import Any, Iterable, Mapping, Sequence

from bench.metrics import RequestRecord
from schedulers.types import ROUTE_COLOCATED

PARTS = ("engine", "path")


def live_engine_ttft(records: Sequence[RequestRecord], prediction_log: Iterable[Mapping[str, Any]]) -> dict[str, float]:
    """request_id -> the engine's part of its TTFT, for the colocated records whose router log
    entry has one (vLLM keeps no request stats for some)."""
    engine_s = {e["request_id"]: e.get("engines_s") for e in prediction_log if e.get("route") == ROUTE_COLOCATED}
    return {r.request_id: float(engine_s[r.served_id]) for r in records
            if r.ok and r.route == ROUTE_COLOCATED and engine_s.get(r.served_id) is not None}


def sim_engine_ttft(records: Sequence[RequestRecord], prompt_reached_s: Mapping[str, float]) -> dict[str, float]:
    """request_id -> the engine's part of its simulated TTFT (`SimResult.prompt_reached_s`), for the
    colocated records."""
    return {r.request_id: r.first_token_s - prompt_reached_s[r.request_id] for r in records
            if r.ok and r.route == ROUTE_COLOCATED and r.first_token_s is not None and r.request_id in prompt_reached_s}


def split_summary(records: Sequence[RequestRecord], engine_s: Mapping[str, float]) -> dict[str, dict[str, Any]]:
    """"<bucket> engine" / "<bucket> path" -> median seconds and count, over the records with an
    engine part (the bucket is the workload's label, "all" where it has none)."""
    parts: dict[str, list[float]] = {}
    for r in records:
        if r.request_id not in engine_s or r.ttft_s is None:
            continue
        bucket = r.bucket or "all"
        inside = engine_s[r.request_id]
        parts.setdefault(f"{bucket} engine", []).append(inside)
        parts.setdefault(f"{bucket} path", []).append(r.ttft_s - inside)
    return {k: {"median_s": float(statistics.median(v)), "count": len(v)} for k, v in parts.items()}


def split_keys(buckets: Sequence[str]) -> list[str]:
    """The summary keys of `buckets`, in table order."""
    return [f"{b} {part}" for b in buckets for part in PARTS]

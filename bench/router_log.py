"""The router's log of the requests it served, read the one way every probe and report reads it.

`Router.prediction_errors()` (saved by `bench.compare` as each run's `predictions.json`) holds one
entry per request it predicted: the server's `request_id`, its `route`, each engine's part of its
TTFT as vLLM timed it (`engine_s`: {"prefill": s, "decode": s} on route disaggregated, {"decode":
s} on colocated, a part None where vLLM kept no request stats) and their sum over the route's
engines (`engines_s`, None where one is missing). The rest of a TTFT is the request path's.
The probes (`bench.host_load`, `bench.prefill_beside`) take the log as a callable that fetches it
from a live router; the reports read it from the saved file.
"""
from __future__ import annotations

from typing import Any, Iterable, Mapping

from schedulers.types import ROUTE_COLOCATED, ROUTE_DISAGGREGATED

Log = Iterable[Mapping[str, Any]]


def engine_parts_by_id(log: Log) -> dict[str, dict[str, float | None]]:
    """Server request id -> each engine's part of its TTFT, by role."""
    return {entry["request_id"]: dict(entry.get("engine_s") or {}) for entry in log}


def disaggregated_parts(log: Log) -> dict[str, tuple[float, float]]:
    """Server request id -> (prefill engine's part, decode engine's part) of each disaggregated
    request whose engines timed both."""
    out = {}
    for entry in log:
        parts = entry.get("engine_s") or {}
        if entry.get("route") == ROUTE_DISAGGREGATED and parts.get("prefill") is not None \
                and parts.get("decode") is not None:
            out[entry["request_id"]] = (float(parts["prefill"]), float(parts["decode"]))
    return out


def colocated_parts(log: Log) -> dict[str, float]:
    """Server request id -> the engine's part of each colocated request whose engine timed it."""
    return {entry["request_id"]: float(entry["engines_s"]) for entry in log
            if entry.get("route") == ROUTE_COLOCATED and entry.get("engines_s") is not None}


def first_parts(log: Log, route: str) -> dict[str, float]:
    """Server request id -> the first part of its TTFT (`first_part`), for the entries on `route`
    that have it."""
    parts = {entry["request_id"]: first_part(entry, route) for entry in log if entry.get("route") == route}
    return {rid: float(part) for rid, part in parts.items() if part is not None}


def first_part(entry: Mapping[str, Any], route: str) -> float | None:
    """The first part of an entry's TTFT on `route` (`bench.ttft_split`): the engine's on route
    colocated, the prefill engine's on route disaggregated; None where vLLM kept no request stats."""
    if route == ROUTE_COLOCATED:
        return entry.get("engines_s")
    return (entry.get("engine_s") or {}).get("prefill")

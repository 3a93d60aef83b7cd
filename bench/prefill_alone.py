"""How long a prompt's prefill took inside its engine when no other prompt competed for that
engine, over its calibrated prefill step: the host's stretch as the run itself saw it, live beside
simulated, by length bucket.

The simulator stretches a prefill by the factor the load probe measured before the run
(`bench.host_load`: one 1,024-token prompt, beside background streams). What a run's own
prompts took is in its records: a prompt that found its engine free of other prompts, start to
first token, spent its engine part (`bench.ttft_split`) in its prefill and the decode steps beside
it, not in a queue. Its ratio to the calibrated step is the stretch it met. On runs 74-79 (stop
42), a short prompt alone at disaggregated's prefill engine ran x1.70 its calibrated step at the
median live (x1.38-2.26 by round and rate) while the probes said x1.47-1.93: run 78's probes said
1.90 and 1.93, its prompts x1.61-1.78 at 5.18-6.29 req/s, and the simulator, at x1.94, queued
its short prompts at the prefill engine 179 ms at the median against 105-109 ms live.

A prompt is alone when no other prompt's window on the same engine (the prefill engine, or the
one engine of a colocated request) overlaps its own. A window runs from the request's arrival for
its engine part: the time it spent in its engine, queue and prefill, less the few milliseconds
of the way there, which no log times apart live. The same windows live and simulated, so the two
sides pick their requests alike. A window of the whole TTFT, the hand-over included, left on run
79 one alone short prompt a rate at 7.67-9.02 req/s on disaggregated.
"""
from __future__ import annotations

import statistics
from typing import Any, Callable, Mapping, Sequence

from bench.metrics import RequestRecord


def prefill_engine(record: RequestRecord) -> str | None:
    """The engine that prefilled `record`'s prompt: its prefill engine, else its one engine."""
    return record.prefill_worker or record.decode_worker


def alone_ids(records: Sequence[RequestRecord], engine_s: Mapping[str, float]) -> set[str]:
    """The ids of the served records whose window no other served record's on the same prefill
    engine overlaps. A window: arrival to arrival + its engine part (`engine_s`, either route's),
    or to its first token where it has none."""
    by_engine: dict[str | None, list[tuple[float, float, str]]] = {}
    for r in records:
        if r.ttft_s is not None:
            end = r.arrival_s + engine_s[r.request_id] if r.request_id in engine_s else r.first_token_s
            by_engine.setdefault(prefill_engine(r), []).append((r.arrival_s, end, r.request_id))
    alone = set()
    for windows in by_engine.values():
        windows.sort()
        latest_end = float("-inf")  # of the windows that started before this one
        for i, (start, end, request_id) in enumerate(windows):
            next_start = windows[i + 1][0] if i + 1 < len(windows) else float("inf")
            if latest_end <= start and end <= next_start:
                alone.add(request_id)
            latest_end = max(latest_end, end)
    return alone


def alone_summary(records: Sequence[RequestRecord], engine_s: Mapping[str, float],
                  predict_prefill_s: Callable[[int], float],
                  windows_s: Mapping[str, float] | None = None) -> dict[str, dict[str, Any]]:
    """bucket -> the median of engine part / calibrated prefill step, and the count, over the
    records alone at their engine (`alone_ids`, by `windows_s`: every route's engine parts,
    `engine_s` if not given) that have an engine part (`engine_s`, as `bench.ttft_split` gives
    it for one route). The bucket is the workload's label, "all" where it has none."""
    alone = alone_ids(records, engine_s if windows_s is None else windows_s)
    ratios: dict[str, list[float]] = {}
    for r in records:
        if r.request_id in engine_s and r.request_id in alone:
            ratios.setdefault(r.bucket or "all", []).append(engine_s[r.request_id] / predict_prefill_s(r.input_tokens))
    return {b: {"median": float(statistics.median(v)), "count": len(v)} for b, v in ratios.items()}

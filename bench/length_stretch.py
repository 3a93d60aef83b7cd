"""How much longer a prefill takes beside streams, by the prompt's length: measured on an idle live
deployment before a run, and recorded for the simulator's host model: the length forms read it
(`bench.simulator.host`, `--host length` and `length-alone`).

The load probe (`bench.host_load`) measures the stretch on one 1,024-token prompt, and the
simulator stretches every prefill by that factor. The prompts of the runs themselves say the
stretch is not one factor (`bench.prefill_alone`, stop 42): over runs 77-79, a prompt alone at
one of colocated's engines took 19 ms longer than its calibrated step at the median when short
(64-512 tokens), 32 ms when medium (1,024-2,048) and 128 ms when long (3,000-4,000), where one
factor of about x1.8 gave 21, 74 and 198 ms. The short prompts met x1.79 and the medium x1.25.

The probe: prompts of each of `PROBE_LENGTHS` (one per length bucket of the rates mix), each
with one output token, `REPEATS` times with nothing else running and `REPEATS` times beside
`STREAMS_PER_ENGINE` background streams per decode-capable engine (the load probe's first count,
where its factor is already about as high as at the others). The lengths take turns, in reverse
order every other round, so that a drift of the host lands on each of them alike. Each probe is
timed inside the engine that prefilled it, by vLLM's own timestamps in the router's log
(`bench.router_log`): the request path, stretched beside streams too, is measured on its own
(`bench.host_load.path_points`). A length's factor is its median engine part beside the streams
over its median alone.
"""
from __future__ import annotations

import statistics
import time
from collections import Counter
from dataclasses import dataclass
from typing import Any, Callable, Mapping, Sequence

from bench.host_load import PAUSE_S, SETTLE_S, BackgroundStreams, probe_window
from bench.router_log import first_parts

PROBE_LENGTHS = (256, 1536, 3584)  # one per bucket of bench.compare's rates mix
REPEATS = 5
STREAMS_PER_ENGINE = 1
LENGTH_SALT = 6_000_000  # the probes' prompts: apart from every other probe's
LENGTH_SALT_STEP = 10_000  # between the lengths' prompts: a shorter prompt is no prefix of a longer


@dataclass(frozen=True)
class LengthStretch:
    """`streams`: the background streams beside the probes; `route`: where they were sent;
    `engine_s`: each probe's part inside the engine that prefilled it (seconds), by prompt
    length, then by streams (0 and `streams`); `ttft_s`: the same probes' TTFTs; `points`:
    (prompt length, median engine part beside the streams / median alone)."""

    streams: int
    route: str
    engine_s: dict[int, dict[int, list[float]]]
    ttft_s: dict[int, dict[int, list[float]]]
    points: tuple[tuple[int, float], ...]

    def to_dict(self) -> dict[str, Any]:
        def nested(d: Mapping[int, Mapping[int, list[float]]]) -> dict[str, dict[str, list[float]]]:
            return {str(n): {str(k): v for k, v in by.items()} for n, by in d.items()}

        return {"streams": self.streams, "route": self.route, "engine_s": nested(self.engine_s),
                "ttft_s": nested(self.ttft_s), "points": [list(p) for p in self.points]}


def length_points(engine_s: Mapping[int, Mapping[int, Sequence[float]]], streams: int) -> tuple[tuple[int, float], ...]:
    """(length, factor) for each length: the median at `streams` over the median at 0, both of
    which must be there and positive. Kept as measured, below 1 too: unlike the load probe's
    counts, nothing says a longer prompt must stretch more or less."""
    points = []
    for length in sorted(engine_s):
        by = engine_s[length]
        if not by.get(0) or not by.get(streams) or min(by[0]) <= 0 or min(by[streams]) <= 0:
            raise ValueError(f"a {length}-token probe needs positive times alone and beside {streams} streams, "
                             f"got {dict(by)}")
        points.append((length, statistics.median(by[streams]) / statistics.median(by[0])))
    return tuple(points)


def measure_length_stretch(dep: Any, route: str, router_log: Callable[[], Sequence[Mapping[str, Any]]],
                           lengths: Sequence[int] = PROBE_LENGTHS, repeats: int = REPEATS,
                           streams_per_engine: int = STREAMS_PER_ENGINE, salt_base: int = 0) -> LengthStretch:
    """The probe on `dep`, which must be otherwise idle, sent on `route` ("colocated" or
    "disaggregated": the route must be one the router times in its log). A second probe of the
    same deployment needs another `salt_base` (a multiple of 1,000 under LENGTH_SALT_STEP): a
    prompt it sent before would come from the engine's prefix cache."""
    from schedulers.candidates import decode_engines

    if not lengths or repeats < 1:
        raise ValueError(f"the length probe needs lengths and repeats >= 1, got {lengths}, {repeats}")
    streams = streams_per_engine * decode_engines(Counter(info.role for info in dep.infos.values()))
    salts = {n: LENGTH_SALT + LENGTH_SALT_STEP * i + salt_base for i, n in enumerate(lengths)}
    # One probe of each length first, not counted: no one-off cost of a prompt's shape lands in the baseline.
    for n in lengths:
        probe_window(dep.stream, dep.vocab_size, salt=salts[n] + 999, num_tokens=n, route=route)
    sent: dict[int, dict[int, list[tuple[float, float, str | None]]]] = {n: {} for n in lengths}
    for count in (0, streams):
        background = BackgroundStreams(dep.stream, count, dep.vocab_size, f"length-bg-{salt_base}-{count}")
        try:
            if count:
                time.sleep(SETTLE_S)
            for rep in range(repeats):
                for n in (lengths if rep % 2 == 0 else lengths[::-1]):
                    probe = probe_window(dep.stream, dep.vocab_size, salt=salts[n] + 100 * bool(count) + rep,
                                         num_tokens=n, route=route)
                    sent[n].setdefault(count, []).append(probe)
                    time.sleep(PAUSE_S)
        finally:
            background.stop()
    parts = first_parts(router_log(), route)  # the part inside the engine that prefilled it
    missing = [sid for by in sent.values() for probes in by.values() for _, _, sid in probes if sid not in parts]
    if missing:
        raise RuntimeError(f"the router's log has no {route} engine part for {len(missing)} length probe(s): "
                           f"{missing[:3]} (vLLM kept no request stats?)")
    engine_s = {n: {k: [parts[sid] for _, _, sid in probes] for k, probes in by.items()} for n, by in sent.items()}
    ttft_s = {n: {k: [first - at for at, first, _ in probes] for k, probes in by.items()} for n, by in sent.items()}
    return LengthStretch(streams, route, engine_s, ttft_s, length_points(engine_s, streams))

"""How much longer a decode step takes with each further stream on a CPU host, with the
workload's own prompt lengths: measured on an idle live deployment before a run, for the
simulator's host model (form `mix-growth`).

`bench.host_cpu` measures a decode step's excess over its calibration with bursts of 128-token
prompts, all sent at once. Beyond two streams their points do not follow the live runs: live,
in the gaps in which nothing else ran on the host (`bench.token_gaps.quiet_excess_by_batch`),
the single decode engine of disaggregated and hybrid took 0.4-0.8 ms more per further stream
on each of runs 59-69 (run 69's disaggregated: +1.5, +2.8, +3.2, +4.7 and +6.1 ms at 1, 2, 3, 4
and 7 streams), where the bursts before those runs said +0.7 to +7.4 ms at 4 streams and +1.2 to
+4.7 at 8, not rising. On one idle deployment (stop 38), steady batches of 8 streams of
128-token prompts took +2.2 and +3.8 ms, closed loops of eight of the rates mix +5.7 ms: a
longer context costs a decode step more on this host than the calibration says (the engine's
own execution, vLLM's timestamps, ran 1.6-1.9x the calibrated one while streaming), and the
bursts' short prompts miss it. With each round's growth taken from the other round's live
quiet gaps, runs 67-69 came to 60 of 72 figures within 20% pooled against 53.

The probe: closed loops of the workload's prompt mix (`buckets`, as `bench.workloads.bucket_mix`
takes them) with `LOOP_STREAMS` requests in flight, `REQUESTS_PER_STREAM` requests per stream,
`OUTPUT_TOKENS` each, all loops `REPEATS` times (the second pass in the reverse order, so a drift
of the host lands on every loop). Every gap between two tokens in which no request anywhere was
on its way to its first token counts, as its excess over the calibrated decode step for the
batch and contexts at that moment; each loop's point is the median at its own batch, over its
repeats. The simulator takes the slope of the line through the points per further stream
(`HostSpec.step_excess_mix`).
It needs a single engine that decodes: with two, the quiet gaps (no other engine decoding) are
too few in a loop that keeps both busy.
"""
from __future__ import annotations

import statistics
import time
from dataclasses import dataclass
from typing import Any, Callable, Mapping, Sequence

LOOP_STREAMS = (1, 2, 4, 6)
REQUESTS_PER_STREAM = 6
OUTPUT_TOKENS = 64  # twice the rates experiment's: more quiet gaps per second of probe
REPEATS = 2
PAUSE_S = 1.0  # between loops
MIN_GAPS = 20  # a loop's point needs this many quiet gaps at its batch
GROWTH_SALT = 9_000_000  # the loops' prompts: apart from every other probe's
SEED = 9_100  # the loops' lengths: apart from the rates experiment's seeds


@dataclass(frozen=True)
class DecodeGrowth:
    """`points`: (streams, median excess seconds) of each loop that had `MIN_GAPS` quiet gaps at
    its batch; `counts`: (streams, quiet gaps) of every loop; `context_tokens`: the loops'
    requests' mean context while decoding (prompt + half the output), for re-expressing the
    points against another step model; `seconds`: the probe's wall time."""

    points: tuple[tuple[int, float], ...]
    counts: tuple[tuple[int, int], ...]
    context_tokens: float
    seconds: float

    def to_dict(self) -> dict[str, Any]:
        return {"points": [list(p) for p in self.points], "counts": [list(c) for c in self.counts],
                "context_tokens": self.context_tokens, "seconds": self.seconds}

    @property
    def usable(self) -> bool:
        """Whether the points give a growth: the one-stream point and at least one more."""
        return len(self.points) >= 2 and self.points[0][0] == 1


def loop_points(records_by_streams: Mapping[int, Sequence[Any]], predict_step_s: Callable[[list[int]], float],
                min_gaps: int = MIN_GAPS) -> tuple[tuple[tuple[int, float], ...], tuple[tuple[int, int], ...]]:
    """(points, counts) of `DecodeGrowth` from each loop's `bench.metrics.RequestRecord`s."""
    from bench.token_gaps import quiet_excess_by_batch

    points, counts = [], []
    for streams in sorted(records_by_streams):
        by_batch = quiet_excess_by_batch(records_by_streams[streams], predict_step_s, max_batch=streams + 1)
        at = by_batch.get(streams, {"count": 0})
        counts.append((streams, at["count"]))
        if at["count"] >= min_gaps:
            points.append((streams, at["median_s"]))
    return tuple(points), tuple(counts)


def measure_decode_growth(dep: Any, buckets: Mapping[str, tuple[float, int, int]],
                          loop_streams: Sequence[int] = LOOP_STREAMS, repeats: int = REPEATS) -> DecodeGrowth:
    """The probe (module docstring) on `dep`, otherwise idle, with its calibration's step model."""
    from bench.run import run_workload
    from bench.workloads import make_workload

    if dep.calibration is None:
        raise ValueError("the decode-growth probe needs the deployment's calibration (scheduler.calibrate)")
    model = dep.calibration.model

    def predict(contexts: list[int]) -> float:
        return model.predict(0, 0, contexts)

    records: dict[int, list[Any]] = {n: [] for n in loop_streams}
    t0 = time.perf_counter()
    for rep in range(repeats):
        order = list(loop_streams) if rep % 2 == 0 else list(reversed(loop_streams))
        for streams in order:
            workload = make_workload("bucket_mix", num_requests=REQUESTS_PER_STREAM * streams, concurrency=streams,
                                     seed=SEED + 100 * rep + streams, output_tokens=OUTPUT_TOKENS, buckets=buckets)
            served = run_workload(dep.stream, workload, dep.vocab_size, progress=False,
                                  salt=GROWTH_SALT + 1000 * rep + streams)
            failed = [r.error for r in served if not r.ok]
            if failed:
                raise RuntimeError(f"a decode-growth loop of {streams} streams failed: {failed}")
            records[streams] += served
            time.sleep(PAUSE_S)
    points, counts = loop_points(records, predict)
    context = statistics.fmean(r.input_tokens + len(r.token_times) / 2 for rs in records.values() for r in rs)
    return DecodeGrowth(points, counts, context, time.perf_counter() - t0)

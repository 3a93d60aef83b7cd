"""How much longer a prefill takes on a CPU host while other requests stream: measured on an idle
live deployment before a run, for the simulator's host model (`bench.simulator.host`, form
`load`).

On a 2-core host every engine's model has a core of its own, and everything else (the engine
loops, the workers' front-ends, the router, the client, Ray) runs on the same two cores. Each
streaming request keeps that other work busy, so a prefill, which needs its core the whole time,
loses part of it. Measured here on colocated (2026-12-01, a 3,000-token prompt, median of six):
273 ms with nothing else running, 386 ms beside one stream, 441 ms beside two, 518 ms beside
four; a 200-token prompt's TTFT went 22, 34, 35, 48 ms. The decode steps' excess
(`bench.host_cpu`) is measured on decode steps of a few milliseconds, where a lost slice is a
fixed few milliseconds too; a prefill step of 100-300 ms loses a share of its time instead. At 8
req/s, with 4-10 requests streaming, the simulator without this priced the 3,000-token prompts
20-58% faster than they ran (p99 TTFT, runs 19-21).

The probe: one `PROBE_PROMPT_TOKENS` prompt with one output token, `REPEATS` times with nothing
else running and `REPEATS` times beside each count of background streams in
`STREAMS_PER_ENGINE` times the decode-capable engines (the router places them). A background
stream is a short prompt with a long output, started again when it ends. The stretch at a count
is the median probe TTFT there over the median with none. The probe's TTFT holds the request
path as well as the prefill; the simulator stretches both by it.

The same probe measures the other direction too: the background streams' tokens are timed, and
the gaps between two tokens of a stream that fall inside a probe's prefill, against those that
fall outside every probe, give what a decode step loses to a prefill running on another engine
(`decode_beside`: per count, median inside minus median outside). Runs 28-29 show why it is
needed: where a prefill-only engine prefills beside the engine that streams (disaggregated,
hybrid), a token gap took 3-5 ms longer than with it idle (live, e.g. 10.4 against 5.9 ms on
disaggregated at 4 req/s), and the decode bursts of `bench.host_cpu`, which never run a prefill,
cannot see it: the simulator added 0-1.5 ms.

Given each probe's parts inside its engines (the router's log: the prefill engine's part and the
decode engine's, `bench.router_log`), the probe's window is split in two where its prefill ended: the
prefill, and the hand-over (the way to the decode engine, the KV load and the decode engine's
first step). A decode step loses something in each (`decode_beside`, `decode_handover`). Run 61
shows why the second is needed: on disaggregated at 4.48 req/s a stream's token gap took 24-31
ms while a request was on its way into the decode engine and 14-20 ms with none, where the
simulator, which charged the hand-over only to the link and the request path, added 1 ms. Run
63's probes measured +1-6 ms in the hand-over and -1 to +5 ms beside the prefill, where the
undivided window had given 2-3 ms; its live gaps took 5-7 ms longer in a hand-over (12.3-18.1
against 7.5-11.6 ms, `bench.handover_gaps`).
"""
from __future__ import annotations

import statistics
import threading
import time
from collections import Counter
from dataclasses import dataclass
from typing import Any, Callable, Mapping, Sequence

from bench.router_log import colocated_parts, disaggregated_parts

PROBE_PROMPT_TOKENS = 1024
# Five probes a count left the stretch to chance: resampling each of runs 74-78's probes (stop 42),
# the first count's factor had an 80% interval 0.15-1.65 wide (0.38 at the median) over the 30
# probes of colocated, disaggregated and adaptive, while a short prompt alone at disaggregated's
# prefill engine ran x1.70 its calibrated step at the median live. Ten halve the variance for
# about 12 s more per deployment (run 79: intervals 0.15-0.42 wide, 0.32 at the median).
REPEATS = 10
STREAMS_PER_ENGINE = (1, 2, 4)  # background streams per decode-capable engine, one level each
STREAM_PROMPT_TOKENS = 128
# Long enough that a stream restarts about once while a level's probes run, short enough that
# stopping (each stream runs to its end, so that no request is left behind) takes a second or two.
STREAM_OUTPUT_TOKENS = 128
SETTLE_S = 0.5  # after the background streams start, before the first probe
# A token gap is beside the probe's prefill when its midpoint is in [sent + head, first token];
# head: the probe's request path (time outside the engines), given by the caller. It is outside
# every probe when its midpoint is at least OUTSIDE_MARGIN_S from every probe's window.
OUTSIDE_MARGIN_S = 0.02
MIN_GAPS = 10  # fewer gaps on either side of a count: no figure for that count
PAUSE_S = 0.2  # between probes
# Of a probe's time outside its engines (TTFT less the two engines' parts), the share before the
# prefill engine: one of three like hops (to the prefill engine, on to the decode engine, back).
HEAD_SHARE = 1 / 3
MIN_PATH_PROBES = 3  # probes whose engine part the router logged, at a count, for a path there


@dataclass(frozen=True)
class LoadStretch:
    """`points`: (background streams, median probe TTFT there / median with none), by streams;
    `samples`: every probe's TTFT in seconds by streams (0 included); `decode_beside`:
    (background streams, seconds a token gap took longer beside the probe's prefill than away
    from it), for the counts with enough gaps (module docstring); `gap_counts`: (inside, outside)
    gaps by streams; `decode_handover` and `handover_gap_counts`: the same for the probe's
    hand-over, when the probe's engine parts were known (module docstring); `path_points`:
    (background streams, median seconds of a colocated probe's TTFT outside its engine), from
    none up, when its engine's part was known (`path_points`)."""

    points: tuple[tuple[int, float], ...]
    probe_prompt_tokens: int
    samples: dict[int, list[float]]
    decode_beside: tuple[tuple[int, float], ...] = ()
    gap_counts: dict[int, tuple[int, int]] | None = None
    decode_handover: tuple[tuple[int, float], ...] = ()
    handover_gap_counts: dict[int, tuple[int, int]] | None = None
    path_points: tuple[tuple[int, float], ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return {"points": [list(p) for p in self.points], "probe_prompt_tokens": self.probe_prompt_tokens,
                "samples": {str(k): v for k, v in self.samples.items()},
                "decode_beside": [list(p) for p in self.decode_beside],
                "gap_counts": {str(k): list(v) for k, v in (self.gap_counts or {}).items()},
                "decode_handover": [list(p) for p in self.decode_handover],
                "handover_gap_counts": {str(k): list(v) for k, v in (self.handover_gap_counts or {}).items()},
                "path_points": [list(p) for p in self.path_points]}


def stretch_points(samples: dict[int, Sequence[float]]) -> tuple[tuple[int, float], ...]:
    """(streams, factor) for every count but 0, which must be there: the median TTFT there over
    the median with none, made non-decreasing in the streams by pooling adjacent counts that are
    out of order (more streams do not make a prefill faster; a drop between counts is the
    probe's noise, which is large: five probes beside two streams on colocated took 75-230 ms)."""
    if not samples.get(0):
        raise ValueError("no probe ran with nothing else streaming: nothing to compare with")
    bad = {k: v for k, v in samples.items() if not v or min(v) <= 0}
    if bad:
        raise ValueError(f"probe TTFTs must be positive and present at every count, got {bad}")
    alone = statistics.median(samples[0])
    counts = [k for k in sorted(samples) if k]
    return tuple(zip(counts, non_decreasing([statistics.median(samples[k]) / alone for k in counts])))


def path_points(paths: Mapping[int, Sequence[float]],
                min_probes: int = MIN_PATH_PROBES) -> tuple[tuple[int, float], ...]:
    """(streams, seconds): the median request path (TTFT less the engine's part) of the probes
    at each count with at least `min_probes` of them, made non-decreasing in the streams as
    `stretch_points` makes its factors; none without the count 0, where the line starts."""
    counts = [k for k in sorted(paths) if len(paths[k]) >= min_probes]
    if 0 not in counts:
        return ()
    return tuple(zip(counts, non_decreasing([statistics.median(paths[k]) for k in counts])))


def non_decreasing(values: Sequence[float]) -> list[float]:
    """The least-squares non-decreasing fit of `values` (pool adjacent violators, equal weights)."""
    blocks: list[list[float]] = []  # [mean, size]
    for v in values:
        blocks.append([v, 1])
        while len(blocks) > 1 and blocks[-2][0] > blocks[-1][0]:
            (m2, n2), (m1, n1) = blocks.pop(), blocks.pop()
            blocks.append([(m1 * n1 + m2 * n2) / (n1 + n2), n1 + n2])
    return [m for m, n in blocks for _ in range(int(n))]


def split_gaps(token_times: Sequence[Sequence[float]], windows: Sequence[tuple[float, float]],
               margin_s: float = OUTSIDE_MARGIN_S) -> tuple[list[float], list[float]]:
    """(inside, outside): the gaps between consecutive tokens of each request in `token_times`
    whose midpoint lies in one of `windows` ((start, end) seconds), and those whose midpoint lies
    at least `margin_s` from every window; the rest (at a window's edge) are neither."""
    inside, outside = [], []
    for times in token_times:
        for a, b in zip(times, times[1:]):
            mid = (a + b) / 2
            if any(s <= mid <= e for s, e in windows):
                inside.append(b - a)
            elif all(mid < s - margin_s or mid > e + margin_s for s, e in windows):
                outside.append(b - a)
    return inside, outside


def split_window(sent: float, first: float, prefill_s: float, decode_s: float,
                 head_share: float = HEAD_SHARE) -> tuple[tuple[float, float], tuple[float, float]]:
    """(prefill, hand-over) windows of one disaggregated probe sent at `sent` whose first token
    came at `first`, from its parts inside the prefill and the decode engine: the prefill starts
    after `head_share` of the time outside both engines and lasts `prefill_s`; the hand-over runs
    from there to the first token."""
    if prefill_s < 0 or decode_s < 0 or first < sent:
        raise ValueError(f"a probe's window and parts must be >= 0, got {sent, first, prefill_s, decode_s}")
    start = sent + max(0.0, first - sent - prefill_s - decode_s) * head_share
    end = min(start + prefill_s, first)
    return (start, end), (end, first)


def beside_excess(inside: Sequence[float], outside: Sequence[float], min_gaps: int = MIN_GAPS) -> float | None:
    """Median gap inside minus median gap outside, or None with fewer than `min_gaps` on a side.
    Kept as measured, below zero too (noise); the host model floors it."""
    if len(inside) < min_gaps or len(outside) < min_gaps:
        return None
    return statistics.median(inside) - statistics.median(outside)


class BackgroundStreams:
    """`count` requests streaming at all times through `stream` (a `Deployment.stream`), each
    restarted when it ends, until `stop()`; a failed stream is raised by `stop()`. `token_times`:
    each request's token arrival times (`time.time()`), one list per request."""

    def __init__(self, stream: Callable[..., Any], count: int, vocab_size: int, salt: str) -> None:
        from pd_serve.prompts import random_prompt

        self._stream, self._vocab, self._salt, self._prompt = stream, vocab_size, salt, random_prompt
        self._stop = threading.Event()
        self._errors: list[BaseException] = []
        self.token_times: list[list[float]] = []
        self._threads = [threading.Thread(target=self._run, args=(k,), daemon=True, name=f"bg-stream-{k}")
                         for k in range(count)]
        for t in self._threads:
            t.start()

    def _run(self, k: int) -> None:
        n = 0
        try:
            while not self._stop.is_set():
                ids = self._prompt(STREAM_PROMPT_TOKENS, f"{self._salt}-{k}-{n}", self._vocab)
                times: list[float] = []
                self.token_times.append(times)
                # runs to its end: a stream cut short would leave its request behind
                for item in self._stream(prompt_token_ids=ids, max_tokens=STREAM_OUTPUT_TOKENS, ignore_eos=True):
                    if item.get("type") == "token":
                        times.append(time.time())
                n += 1
        except BaseException as error:  # surfaced by stop()
            self._errors.append(error)

    def stop(self) -> None:
        self._stop.set()
        for t in self._threads:
            t.join()
        if self._errors:
            raise RuntimeError(f"a background stream failed: {self._errors[0]!r}") from self._errors[0]


def probe_window(stream: Callable[..., Any], vocab_size: int, salt: int,
                 num_tokens: int = PROBE_PROMPT_TOKENS, route: str = "auto") -> tuple[float, float, str | None]:
    """(sent, first token, the server's request id), `time.time()` seconds, of one `num_tokens`
    prompt with one output token, sent by the benchmarks' own client (`bench.run.run_workload`)
    on `route`; `salt` makes its prompt its own."""
    from bench.run import run_workload
    from bench.workloads import fixed

    (record,) = run_workload(stream, fixed(1, num_tokens, 1), vocab_size, route=route, progress=False, salt=salt)
    if record.ttft_s is None or record.first_token_s is None:
        raise RuntimeError(f"the load probe failed: {record.error or 'no token came back'}")
    return record.arrival_s, record.first_token_s, record.served_id


def measure_load_stretch(dep: Any, repeats: int = REPEATS,
                         streams_per_engine: Sequence[int] = STREAMS_PER_ENGINE, route: str = "auto",
                         salt_base: int = 0, head_s: float = 0.0,
                         router_log: Callable[[], Sequence[Mapping[str, Any]]] | None = None) -> LoadStretch:
    """The probe on `dep`, which must be otherwise idle (see the module docstring), sent on
    `route`. A second probe of the same deployment needs another `salt_base` (under 1000 -
    `repeats`): a prompt it sent before would come from the engine's prefix cache. `head_s`:
    the probe's request path, the part of its TTFT not beside its prefill. `router_log`, when
    given, returns the router's log of the requests served so far (`bench.router_log`), read once
    after the last count. A probe served disaggregated whose engines' parts it holds is split into
    prefill and hand-over (`split_window`), and `head_s` is not used for it. A probe served
    colocated whose engine's part it holds gives its request path at its count (`path_points`):
    measured beside the streams, where the idle deployment's path (`pd_serve.request_path`, sent
    after a second of quiet that the runs rarely have) stretched by the prefill's factor put
    colocated's path at 26.8 ms against 16-23 ms live (run 73)."""
    from schedulers.candidates import decode_engines

    num_engines = decode_engines(Counter(info.role for info in dep.infos.values()))
    sent_probes: dict[int, list[tuple[float, float, str | None]]] = {}
    stream_gaps: dict[int, list[list[float]]] = {}  # per count, each stream's token times but its first
    # One probe first, not counted: no one-off cost of the first such prompt lands in the baseline.
    probe_window(dep.stream, dep.vocab_size, salt=-1 - salt_base, route=route)
    for count in (0, *(k * num_engines for k in streams_per_engine)):
        background = BackgroundStreams(dep.stream, count, dep.vocab_size, f"load-bg-{count}")
        probes = []  # (sent, first token, server's id)
        try:
            if count:
                time.sleep(SETTLE_S)
            for rep in range(repeats):
                probe = probe_window(dep.stream, dep.vocab_size, salt=1000 * count + salt_base + rep, route=route)
                probes.append(probe)
                time.sleep(PAUSE_S)
        finally:
            background.stop()
        sent_probes[count] = probes
        # A request's first gap holds its KV transfer on a disaggregated route: left out.
        stream_gaps[count] = [t[1:] for t in background.token_times]
    log = router_log() if router_log is not None else ()
    parts, engine_ttft = disaggregated_parts(log), colocated_parts(log)
    decode_beside: list[tuple[int, float]] = []
    gap_counts: dict[int, tuple[int, int]] = {}
    decode_handover: list[tuple[int, float]] = []
    handover_gap_counts: dict[int, tuple[int, int]] = {}
    for count, probes in sent_probes.items():
        if not count:
            continue
        windows, handovers = [], []
        for sent, first, served_id in probes:
            if served_id in parts:
                prefill, handover = split_window(sent, first, *parts[served_id])
                windows.append(prefill)
                handovers.append(handover)
            else:
                windows.append((min(sent + head_s, first), first))
        gaps = stream_gaps[count]
        # "outside" is away from every probe's whole window, its hand-over included
        _, outside = split_gaps(gaps, [(sent, first) for sent, first, _ in probes])
        for measured, counts, spans in ((decode_beside, gap_counts, windows),
                                        (decode_handover, handover_gap_counts, handovers)):
            if not spans:
                continue
            inside, _ = split_gaps(gaps, spans)
            counts[count] = (len(inside), len(outside))
            excess = beside_excess(inside, outside)
            if excess is not None:
                measured.append((count, excess))
    samples = {count: [first - sent for sent, first, _ in probes] for count, probes in sent_probes.items()}
    paths = {count: [first - sent - engine_ttft[sid] for sent, first, sid in probes if sid in engine_ttft]
             for count, probes in sent_probes.items()}
    return LoadStretch(stretch_points(samples), PROBE_PROMPT_TOKENS, samples, tuple(decode_beside), gap_counts,
                       tuple(decode_handover), handover_gap_counts, path_points(paths))

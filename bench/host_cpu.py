"""The request path's CPU on a CPU host, measured on an idle live deployment before a run: what
the simulator's host model (`bench.simulator.host`) needs.

The path is every process of the deployment but the engines: this process (the client), the
router, the workers' actors (vLLM's front-ends) and Ray's own processes, which a local cluster
starts under this process. Three windows, read from the processes' CPU times:
1. idle for `IDLE_S`: the background (Ray's and the router's polling), in cores;
2. a burst of short requests with few output tokens, and 3. the same requests with many: with
   the background taken out, the two bursts give the CPU per request and per streamed token.
The bursts go through `bench.run.run_workload`, the benchmarks' own client.

The bursts keep two requests per decode-capable engine in flight. The many-token burst, and
the same requests once more with one per engine, also give what the simulator's other host
form (`--host steps`) uses: how much longer each decode step is than the start-up calibration
says (the calibration runs its probes with nothing streaming), with one and with two requests streaming
from the engine. Every gap between two tokens of a request is one step of its decode worker,
with as many requests decoding there as were streaming from it at that moment; its excess is
the gap less the calibrated step for that batch; the medians are `step_excess_1_s` and
`step_excess_2_s`. They catch whatever streaming costs the engines on this host that day (the
path's CPU on the engines' cores, the engine loop waiting for a core, other tenants) and the
calibration's own error on small decode batches (`bench.simulator.host` compares the
forms).

With two decode-capable engines, one stream per engine means the other engine streams too, and
its steps double a decode step on this 2-core host (run 12: a one-stream gap of 2.4-3.6 ms with
the other engine idle, 5.2-6.9 ms while it decoded). So the same requests run once more one at
a time on the whole deployment: `step_excess_alone_s`, the excess with every other engine idle,
for the form that tells the two apart (`--host neighbour-steps`).

Each repeat also runs `bench.neighbour_spin`'s lone streams, beside other engines left
idle and beside other engines stepped within vLLM's spin window: `step_excess_quiet_s` and
`step_excess_spin_s`, for the form that tells them apart (`--host spin`).

A decode engine's batch at 8 req/s reaches 6-10 streams, and no burst above holds more than
two per engine; the path-CPU slope per further stream (`--host load-path`) put run 26's
single-decode-engine TPOT there 79-111% high. So two more bursts keep `BATCH_STREAMS_PER_ENGINE`
requests per engine in flight at once: `step_excess_batch`, the median excess of their steps
at that batch, for the form that follows the measured excess by batch (`--host load-batch`).
"""
from __future__ import annotations

import bisect
import os
import statistics
import time
from collections import Counter
from dataclasses import asdict, dataclass
from typing import Any

IDLE_S = 2.0
BURST_REQUESTS = 8
STREAMS_PER_ENGINE = 2  # the bursts keep this many requests per decode-capable engine in flight
BURST_PROMPT_TOKENS = 128
BURST_OUTPUT_TOKENS = (4, 64)
ALONE_REQUESTS = 3  # per decode-capable engine, one stream each, for the one-stream step excess
EXCESS_REPEATS = 4  # the one-stream and lone-stream bursts, repeated ...
EXCESS_PAUSE_S = 3.0  # ... this far apart: the excess is their median over all the gaps
BATCH_STREAMS_PER_ENGINE = (4, 8)  # the large-batch bursts: this many per engine at once, each


@dataclass(frozen=True)
class PathCpu:
    """What `bench.simulator.host.HostSpec` takes, as measured; `samples` keeps the windows."""

    num_cores: int
    background_cores: float
    cpu_s_per_request: float
    cpu_s_per_token: float
    samples: tuple[dict[str, Any], ...] = ()
    # Decode steps' median excess over the calibration with one and two streams per engine
    # (None: no calibration to compare with, or no such step seen).
    step_excess_1_s: float | None = None
    step_excess_2_s: float | None = None
    # ... and with one stream on the whole deployment (every other engine idle).
    step_excess_alone_s: float | None = None
    # ... and (batch, excess) with BATCH_STREAMS_PER_ENGINE streams per engine at once.
    step_excess_batch: tuple[tuple[int, float], ...] = ()
    # ... and with one stream, every other engine idle past vLLM's spin window / inside it
    # (bench.neighbour_spin).
    step_excess_quiet_s: float | None = None
    step_excess_spin_s: float | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def cpu_seconds(pids: dict[str, int]) -> dict[str, float]:
    """User + system CPU seconds of each process (0 for one that ended)."""
    import psutil

    out = {}
    for name, pid in pids.items():
        try:
            t = psutil.Process(pid).cpu_times()
            out[name] = t.user + t.system
        except psutil.Error:
            out[name] = 0.0
    return out


def path_processes(dep: Any) -> dict[str, int]:
    """This process and its descendants, but not the workers' engine processes."""
    import psutil
    import ray

    engines = {pid for pids in ray.get([h.child_pids.remote() for h in dep.workers.values()]) for pid in pids}
    me = psutil.Process()
    procs = {f"{p.name()}:{p.pid}": p.pid for p in me.children(recursive=True) if p.pid not in engines}
    return {"client": me.pid, **procs}


def solve_per_request_and_token(bursts: list[tuple[int, int, float]]) -> tuple[float, float]:
    """From two bursts of (requests, tokens, path CPU seconds beyond the background): the CPU
    per request and per token of `cpu = r * requests + c * tokens`, neither below 0."""
    (n1, k1, c1), (n2, k2, c2) = bursts
    det = n1 * k2 - n2 * k1
    if det == 0:
        raise ValueError(f"the bursts {bursts} do not separate requests from tokens")
    per_request = (c1 * k2 - c2 * k1) / det
    per_token = (n1 * c2 - n2 * c1) / det
    if per_request < 0:  # noise: everything per token
        return 0.0, max(0.0, (c1 + c2) / (k1 + k2))
    if per_token < 0:
        return max(0.0, (c1 + c2) / (n1 + n2)), 0.0
    return per_request, per_token


def step_excess_by_batch(records: list[Any], predict_step_s: Any) -> dict[int, float]:
    """Median of (gap - predict_step_s(contexts)) over the inter-token gaps, by batch: the
    requests streaming from the same decode worker at the gap's end, with contexts their prompt
    + tokens so far. `records`: `bench.metrics.RequestRecord`s with token times and decode
    workers."""
    streams = [(r.decode_worker, r.token_times, r.input_tokens) for r in records
               if r.ok and len(r.token_times) > 1]
    by_batch: dict[int, list[float]] = {}
    for worker, times, prompt in streams:
        for i in range(1, len(times)):
            t = times[i]
            contexts = [p + bisect.bisect_left(ts, t) for w, ts, p in streams
                        if w == worker and ts[0] < t <= ts[-1]]
            by_batch.setdefault(len(contexts), []).append(t - times[i - 1] - predict_step_s(contexts))
    return {b: statistics.median(v) for b, v in sorted(by_batch.items())}


def _check_served(records: list[Any], what: str) -> None:
    if not all(r.ok for r in records):
        raise RuntimeError(f"{what} failed: {[r.error for r in records if not r.ok]}")


def measure_path_cpu(dep: Any) -> PathCpu:
    """The three windows on `dep`, which must be otherwise idle, and (with a calibration) the
    one-stream burst for the step excess."""
    from bench.neighbour_spin import lone_excess_by_neighbour, measure_lone_by_neighbour
    from bench.run import run_workload
    from bench.workloads import fixed
    from schedulers.candidates import decode_engines

    num_engines = decode_engines(Counter(info.role for info in dep.infos.values()))
    concurrency = STREAMS_PER_ENGINE * num_engines
    pids = path_processes(dep)
    before, t0 = cpu_seconds(pids), time.perf_counter()
    time.sleep(IDLE_S)
    idle_s = time.perf_counter() - t0
    background = sum(cpu_seconds(pids).values()) - sum(before.values())
    background_cores = max(0.0, background / idle_s)
    samples = [{"window": "idle", "wall_s": idle_s, "cpu_s": background}]
    bursts = []
    burst_records = {}
    for num_tokens in BURST_OUTPUT_TOKENS:
        workload = fixed(BURST_REQUESTS * num_engines, BURST_PROMPT_TOKENS, num_tokens, concurrency=concurrency)
        before, t0 = cpu_seconds(pids), time.perf_counter()
        records = run_workload(dep.stream, workload, dep.vocab_size, progress=False, salt=num_tokens)
        wall_s = time.perf_counter() - t0
        cpu_s = sum(cpu_seconds(pids).values()) - sum(before.values())
        _check_served(records, "path CPU burst")
        tokens = sum(len(r.token_times) for r in records)
        bursts.append((len(records), tokens, cpu_s - background_cores * wall_s))
        samples.append({"window": f"{num_tokens} tokens", "wall_s": wall_s, "cpu_s": cpu_s,
                        "requests": len(records), "tokens": tokens})
        burst_records[num_tokens] = records
    excess: dict[int, float] = {}
    excess_alone = None
    by_neighbour: dict[str, dict[str, float]] = {}
    batch_excess: list[tuple[int, float]] = []
    if dep.calibration is not None:
        model = dep.calibration.model

        def decode_step_s(contexts: list[int]) -> float:
            return model.predict(0, 0, contexts)
        num_tokens = max(BURST_OUTPUT_TOKENS)
        excess = step_excess_by_batch(burst_records[num_tokens], decode_step_s)
        # One-stream and lone-stream bursts, repeated EXCESS_REPEATS times EXCESS_PAUSE_S apart:
        # each is under a second, and the same burst's median gap moved by 1.2 ms (2.4-3.7 ms)
        # within one minute on one idle deployment.
        one_stream: list[Any] = []  # one request per decode-capable engine at a time
        lone_stream: list[Any] = []  # one request on the whole deployment at a time
        neighbour_records: list[Any] = []  # bench.neighbour_spin's lone streams ...
        neighbour_steps: list[Any] = []  # ... and the one-token steps beside them
        for rep in range(EXCESS_REPEATS):
            if rep:
                time.sleep(EXCESS_PAUSE_S)
            per_engine = run_workload(
                dep.stream, fixed(ALONE_REQUESTS * num_engines, BURST_PROMPT_TOKENS, num_tokens,
                                  concurrency=num_engines),
                dep.vocab_size, progress=False, salt=-num_tokens - 1000 * rep)
            _check_served(per_engine, "one-stream burst")
            lone = run_workload(dep.stream, fixed(ALONE_REQUESTS, BURST_PROMPT_TOKENS, num_tokens, concurrency=1),
                                dep.vocab_size, progress=False, salt=-2 * num_tokens - 1000 * rep)
            _check_served(lone, "lone-stream burst")
            one_stream += per_engine
            lone_stream += lone
            records, steps = measure_lone_by_neighbour(dep, ALONE_REQUESTS, BURST_PROMPT_TOKENS, num_tokens,
                                                       salt=-4 * num_tokens - 1000 * rep, stepped_first=rep % 2 == 1)
            neighbour_records += records
            neighbour_steps += steps
            samples.append({"window": f"excess repeat {rep}",
                            "step_excess_1_s": step_excess_by_batch(per_engine, decode_step_s).get(1),
                            "step_excess_alone_s": step_excess_by_batch(lone, decode_step_s).get(1),
                            "lone_by_neighbour": lone_excess_by_neighbour(records, steps, decode_step_s,
                                                                          others=per_engine + lone)})
        excess[1] = step_excess_by_batch(one_stream, decode_step_s).get(1)
        excess_alone = step_excess_by_batch(lone_stream, decode_step_s).get(1)
        by_neighbour = lone_excess_by_neighbour(lone_stream + neighbour_records, neighbour_steps, decode_step_s,
                                                others=one_stream + [r for rs in burst_records.values() for r in rs])
        for per_engine in BATCH_STREAMS_PER_ENGINE:
            count = per_engine * num_engines
            records = run_workload(dep.stream, fixed(count, BURST_PROMPT_TOKENS, num_tokens, concurrency=count),
                                   dep.vocab_size, progress=False, salt=-3 * num_tokens - per_engine)
            _check_served(records, f"{per_engine}-stream burst")
            by_batch = step_excess_by_batch(records, decode_step_s)
            samples.append({"window": f"{per_engine} streams per engine", "step_excess_by_batch_s": by_batch})
            if per_engine in by_batch:
                batch_excess.append((per_engine, by_batch[per_engine]))
    per_request, per_token = solve_per_request_and_token(bursts)
    return PathCpu(len(os.sched_getaffinity(0)), background_cores, per_request, per_token, tuple(samples),
                   excess.get(1), excess.get(2), excess_alone, tuple(batch_excess),
                   by_neighbour.get("quiet", {}).get("median_s"), by_neighbour.get("spin", {}).get("median_s"))

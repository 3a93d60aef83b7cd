"""The request path's CPU on a CPU host, measured on an idle live deployment before a run: what
the simulator's host model (`bench.simulator.host`) needs.

The path is every process of the deployment but the engines: this process (the client), the
router, the workers' actors (vLLM's front-ends) and Ray's own processes, which a local cluster
starts under this process. Three windows, read from the processes' CPU times:
1. idle for `IDLE_S`: the background (Ray's and the router's polling), in cores;
2. a burst of short requests with few output tokens, and 3. the same requests with many: with
   the background taken out, the two bursts give the CPU per request and per streamed token.
The bursts go through `bench.run.run_workload`, the benchmarks' own client. The simulator uses
the host's cores and the CPU per token; the rest is kept for the record.
"""
from __future__ import annotations

import os
import time
from dataclasses import asdict, dataclass
from typing import Any

IDLE_S = 2.0
BURST_REQUESTS = 8
BURST_CONCURRENCY = 2
BURST_PROMPT_TOKENS = 128
BURST_OUTPUT_TOKENS = (4, 64)


@dataclass(frozen=True)
class PathCpu:
    """What `bench.simulator.host.HostSpec` takes, as measured; `samples` keeps the windows."""

    num_cores: int
    background_cores: float
    cpu_s_per_request: float
    cpu_s_per_token: float
    samples: tuple[dict[str, Any], ...] = ()

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


def measure_path_cpu(dep: Any) -> PathCpu:
    """The three windows on `dep`, which must be otherwise idle."""
    from bench.run import run_workload
    from bench.workloads import fixed

    pids = path_processes(dep)
    before, t0 = cpu_seconds(pids), time.perf_counter()
    time.sleep(IDLE_S)
    idle_s = time.perf_counter() - t0
    background = sum(cpu_seconds(pids).values()) - sum(before.values())
    background_cores = max(0.0, background / idle_s)
    samples = [{"window": "idle", "wall_s": idle_s, "cpu_s": background}]
    bursts = []
    for num_tokens in BURST_OUTPUT_TOKENS:
        workload = fixed(BURST_REQUESTS, BURST_PROMPT_TOKENS, num_tokens, concurrency=BURST_CONCURRENCY)
        before, t0 = cpu_seconds(pids), time.perf_counter()
        records = run_workload(dep.stream, workload, dep.vocab_size, progress=False, salt=num_tokens)
        wall_s = time.perf_counter() - t0
        cpu_s = sum(cpu_seconds(pids).values()) - sum(before.values())
        if not all(r.ok for r in records):
            raise RuntimeError(f"path CPU burst failed: {[r.error for r in records if not r.ok]}")
        tokens = sum(len(r.token_times) for r in records)
        bursts.append((len(records), tokens, cpu_s - background_cores * wall_s))
        samples.append({"window": f"{num_tokens} tokens", "wall_s": wall_s, "cpu_s": cpu_s,
                        "requests": len(records), "tokens": tokens})
    per_request, per_token = solve_per_request_and_token(bursts)
    return PathCpu(len(os.sched_getaffinity(0)), background_cores, per_request, per_token, tuple(samples))

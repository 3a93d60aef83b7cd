"""What a request spends outside the engines: the path from the client through Ray and the router
to a worker's engine and the first token's way back, measured on a live, idle deployment.

The engines' own step records say how long each step executed; the calibration's step gap adds
the engine loop's time per step; the transfer records say how long the KV READ took. Whatever a
short request's time to first token has beyond those is the path:

    colocated:      path = TTFT - (prefill step + gap)
    disaggregated:  path = TTFT - (prefill step on P + gap) - KV transfer - (first step on D + gap)

A disaggregated request calls two workers in turn, so its path is about two colocated ones.
Each probe waits `idle_gap_s` before it is sent, as requests arriving at 0.5-2 req/s do: a
request after idle time takes longer than one right after another. Measured on the
disaggregated deployment (2026-12-01), the path was 11-12 ms back to back, 16 ms after 0.5 s
idle and 20-21 ms after 1.5 s, and that deployment's live run's short requests took 9-10 ms
longer than a simulator given the back-to-back path. (Likely vLLM's engine loops, which spin
for a second after work and then sleep; not proven.) The simulator has no Ray or router; it
adds these measured paths to the requests it serves (`bench.simulator`'s `request_path`), which
is how `bench.sim_fidelity` uses them.
"""
from __future__ import annotations

import statistics
import time
from dataclasses import dataclass, field
from typing import Any

from pd_serve.prompts import random_prompt
from schedulers.candidates import COLOCATED_ROLES, DECODE_ROLES, PREFILL_ROLES

PROMPT_TOKENS = 128  # one short prefill step on any engine
NUM_REQUESTS = 8
IDLE_GAP_S = 1.0


@dataclass
class RequestPath:
    """Median path seconds per route (None: the deployment cannot serve that route), and every
    request's decomposition (seconds)."""

    colocated_s: float | None
    disaggregated_s: float | None
    step_gap_s: float
    samples: dict[str, list[dict[str, float]]] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {"colocated_s": self.colocated_s, "disaggregated_s": self.disaggregated_s,
                "step_gap_s": self.step_gap_s, "samples": self.samples}


def routes_served(roles: list[str]) -> list[str]:
    """The routes a deployment with these worker roles can serve."""
    routes = ["colocated"] if any(r in COLOCATED_ROLES for r in roles) else []
    prefill = [i for i, r in enumerate(roles) if r in PREFILL_ROLES]
    decode = [i for i, r in enumerate(roles) if r in DECODE_ROLES]
    if any(p != d for p in prefill for d in decode):
        routes.append("disaggregated")
    return routes


def _first_prefill_step(steps: list[dict], t0: float) -> dict:
    """The first step after `t0` that computed prompt tokens (the request's, on an idle engine)."""
    for s in steps:
        if s["t"] >= t0 and s["num_prefill_tokens"] > 0:
            return s
    raise RuntimeError("the engine recorded no prefill step for the path probe; is "
                       "enable_logging_iteration_details on (pd-serve's workers set it)?")


def decompose(route: str, ttft_s: float, steps: dict[str, list[dict]], t0: float, step_gap_s: float,
              prefill_worker: str | None, decode_worker: str, kv_transfer_s: float | None) -> dict[str, float]:
    """One request's TTFT split into engine, transfer and path seconds."""
    if route == "colocated":
        engine_s = _first_prefill_step(steps[decode_worker], t0)["elapsed_s"] + step_gap_s
        transfer_s = 0.0
    else:
        if prefill_worker is None or not kv_transfer_s:
            raise RuntimeError("a disaggregated path probe made no measured KV transfer")
        engine_s = (_first_prefill_step(steps[prefill_worker], t0)["elapsed_s"]
                    + _first_prefill_step(steps[decode_worker], t0)["elapsed_s"] + 2 * step_gap_s)
        transfer_s = kv_transfer_s
    return {"ttft_s": ttft_s, "engine_s": engine_s, "transfer_s": transfer_s,
            "path_s": ttft_s - engine_s - transfer_s}


def measure_request_path(dep: Any, num_requests: int = NUM_REQUESTS,
                         prompt_tokens: int = PROMPT_TOKENS, idle_gap_s: float = IDLE_GAP_S) -> RequestPath:
    """Send `num_requests` short requests one at a time per route the deployment serves, each
    after `idle_gap_s` idle, from this process through `dep.stream` (as the benchmarks do), and
    return the median paths.
    The deployment must be otherwise idle: the decomposition reads the engines' step records."""
    import ray

    gap = dep.calibration.step_gap_s if dep.calibration is not None else 0.0
    routes = routes_served([i.role for i in dep.infos.values()])
    samples: dict[str, list[dict[str, float]]] = {r: [] for r in routes}
    for route in routes:
        for k in range(num_requests):
            ids = random_prompt(prompt_tokens, f"request-path/{route}/{k}/{time.time()}", dep.vocab_size)
            time.sleep(idle_gap_s)
            t0 = time.time()
            first = None
            result = None
            for item in dep.stream(prompt_token_ids=ids, max_tokens=2, ignore_eos=True, route=route):
                if item["type"] == "token" and first is None:
                    first = time.time()
                elif item["type"] == "result":
                    result = item["result"]
            if first is None or result is None or result.route != route:
                raise RuntimeError(f"path probe on route {route} got no first token or another route: {result}")
            names = {n for n in (result.prefill_worker, result.decode_worker) if n}
            steps = dict(zip(names, ray.get([dep.workers[n].steps.remote(t0) for n in names])))
            samples[route].append(decompose(route, first - t0, steps, t0, gap, result.prefill_worker,
                                            result.decode_worker, result.kv_transfer_s))

    def median_path(route: str) -> float | None:
        return statistics.median(s["path_s"] for s in samples[route]) if samples.get(route) else None

    return RequestPath(median_path("colocated"), median_path("disaggregated"), gap, samples)

"""Policies x request rates on one simulation config, each run summarized by `bench.metrics`.

Every (policy, rate) pair serves the same requests (the workload's lengths do not depend on the
rate), each policy on the workers its config entry gives it. Workloads without a rate (the
seeds' batches, traces) run once per policy, labelled with rate None.
"""
from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Sequence

from bench.metrics import RequestRecord, summarize
from bench.simulator.config import SimConfig, build_cluster, build_policy
from bench.simulator.simulator import SimResult, simulate
from bench.workloads import Workload, make_workload, takes_rate


@dataclass
class SweepRun:
    """One simulated run: which config entry (`label`, running registry `policy`) at which rate,
    its records and summary."""

    label: str
    policy: str
    rate_per_s: float | None
    workers: dict[str, int]
    result: SimResult
    summary: dict[str, Any]
    wall_s: float

    @property
    def records(self) -> list[RequestRecord]:
        return self.result.records

    def to_dict(self) -> dict[str, Any]:
        """The run without its records (summary.json)."""
        return {"label": self.label, "policy": self.policy, "rate_per_s": self.rate_per_s,
                "workers": self.workers,
                "summary": self.summary,
                "sim": {"end_s": self.result.end_s, "wall_s": self.wall_s,
                        "num_preemptions": self.result.num_preemptions,
                        "num_fallbacks": self.result.num_fallbacks,
                        "num_leaked_blocks": self.result.num_leaked_blocks,
                        "workers": {wid: vars(w) for wid, w in self.result.workers.items()}}}


def sweep_workload(config: SimConfig, rate_per_s: float | None, workload_name: str | None = None,
                   **params: Any) -> Workload:
    """The config's workload (or `workload_name`) at `rate_per_s`, with `params` on top."""
    name = workload_name or config.workload.name
    merged = dict(config.workload.params) if name == config.workload.name else {}
    merged.update(params)
    if rate_per_s is not None:
        merged["rate_per_s"] = rate_per_s
    return make_workload(name, **merged)


def run_one(config: SimConfig, label: str, workload: Workload, rate_per_s: float | None) -> SweepRun:
    """Simulate the config's entry `label` serving `workload`."""
    cluster = build_cluster(config, label)
    policy = build_policy(config, label, cluster)
    started = time.perf_counter()
    result = simulate(workload, cluster, policy, speed_by_role=config.policies[label].speed_by_role)
    wall_s = time.perf_counter() - started
    summary = summarize(result.records, config.slo_spec)
    workers = dict(config.policies[label].workers)
    return SweepRun(label, policy.name, rate_per_s, workers, result, summary, wall_s)


def run_sweep(config: SimConfig, labels: Sequence[str] | None = None,
              rates_per_s: Sequence[float] | None = None, workload_name: str | None = None,
              **workload_params: Any) -> list[SweepRun]:
    """Every policy entry (`labels`, default: all of the config's) at every rate (default: the
    config's); `workload_name` and `workload_params` replace or extend the config's workload."""
    labels = list(labels or config.policies)
    unknown = [label for label in labels if label not in config.policies]
    if unknown:
        raise ValueError(f"policies {unknown} are not in the config; it has {sorted(config.policies)}")
    name = workload_name or config.workload.name
    rates: list[float | None] = list(rates_per_s or config.rates_per_s) if takes_rate(name) else [None]
    runs = []
    for rate in rates:
        workload = sweep_workload(config, rate, workload_name, **workload_params)
        for label in labels:
            runs.append(run_one(config, label, workload, rate))
    return runs

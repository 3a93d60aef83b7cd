"""The simulated router gives each kind of engine its own speed, as the live one does
(schedulers/feedback.py): a prefill-only engine that runs slower than its host's both-engine is
priced as it runs."""
from __future__ import annotations

import statistics

import pytest

from bench.simulator.host import HostSpec
from bench.simulator.simulator import Simulator
from bench.workloads import RequestSpec, Workload
from schedulers.policies import LengthThresholdPolicy

from .sim_clusters import cluster


def test_the_simulated_router_learns_a_prefill_only_engine_slower_than_its_host():
    # Hybrid, r0 streaming throughout: the prefill-only engine's prefills run 1.6x beside the
    # streams, the both-engine's as calibrated (load_stretch_beside, as measured live). Long
    # prompts go to the prefill engine, short ones stay. Each role learns its own speed, and
    # both routes' TTFTs come out as predicted at the median; one factor for both misprices each
    # by 10-20%.
    prompts = tuple(RequestSpec(f"p{i}", 0.1 + 0.2 * i, 512 if i % 2 else 3000, 1) for i in range(60))
    work = Workload("w", (RequestSpec("r0", 0.0, 256, 4000),) + prompts)
    hybrid = cluster({"prefill": 1, "both": 1}, HostSpec(num_cores=2, load_stretch=((1, 1.0), (2, 1.0)),
                                                         load_stretch_beside=((1, 1.6), (2, 1.6))))

    def last_errors(sim: Simulator) -> dict[str, list[float]]:
        last = {f"p{i}" for i in range(50, 60)}
        records = [r for r in sim.run(work).records if r.request_id in last]
        errors: dict[str, list[float]] = {}
        for r in records:
            errors.setdefault(r.route, []).append(r.ttft_s / r.predicted_ttft_s)
        return errors

    by_role = Simulator(hybrid, LengthThresholdPolicy())
    for route, ratios in last_errors(by_role).items():
        assert statistics.median(ratios) == pytest.approx(1.0, abs=0.06), (route, ratios)
    factors = by_role.router.feedback.role_factors()
    assert factors["prefill"] / factors["both"] > 1.25
    shared = Simulator(hybrid, LengthThresholdPolicy(), speed_by_role=False)
    errors = last_errors(shared)
    assert statistics.median(errors["disaggregated"]) > 1.1 and statistics.median(errors["colocated"]) < 0.92

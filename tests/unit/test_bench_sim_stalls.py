"""Engine stalls as rare events in the simulator: a step that prefills stalls with the measured
chance and runs longer by one of the measured excesses (bench.simulator.host, bench.engine_stalls)."""
from __future__ import annotations

import random

import pytest

from bench.simulator import simulate
from bench.simulator.config import SimConfigError, build_cluster, sim_config_from_dict
from bench.simulator.host import HostSpec
from bench.simulator.simulator import STALL_SEED_SALT
from bench.workloads import RequestSpec, Workload
from schedulers.policies import ColocatedPolicy

from .sim_clusters import cluster

# Ten lone prompts far apart, each one step of prefill and then its decodes.
APART = Workload("apart", tuple(RequestSpec(f"r{i}", 10.0 * i, 512, 4) for i in range(10)))


def _ttfts(host: HostSpec) -> list[float]:
    return [r.ttft_s for r in simulate(APART, cluster({"both": 1}, host), ColocatedPolicy()).records]


@pytest.mark.parametrize("cores", [0, 2])  # with the host modelled and without
def test_a_stalled_prefill_runs_longer_by_the_drawn_excess_and_nothing_else_moves(cores):
    plain = _ttfts(HostSpec(num_cores=cores))
    seed = 0
    host = HostSpec(num_cores=cores, stall_per_prefill_step=0.3, stall_excess_s=(0.5, 2.0), stall_seed=seed)
    result = simulate(APART, cluster({"both": 1}, host), ColocatedPolicy())
    # The draws the simulator makes, one per step that prefills (one per request here), in order.
    draws = random.Random(STALL_SEED_SALT + seed)
    expected = []
    for _ in APART.requests:
        expected.append(draws.choice(host.stall_excess_s) if draws.random() < 0.3 else 0.0)
    assert 0 < sum(x > 0 for x in expected) < len(expected)  # this seed stalls some and not others
    assert [r.ttft_s - p for r, p in zip(result.records, plain)] == pytest.approx(expected)
    assert result.num_stalls == sum(x > 0 for x in expected)
    # Decode steps never stall: the stalled requests' TPOT is the plain one.
    again = simulate(APART, cluster({"both": 1}, HostSpec(num_cores=cores)), ColocatedPolicy())
    assert [r.tpot_s for r in result.records] == pytest.approx([r.tpot_s for r in again.records])


def test_the_seed_gives_the_same_stalls_and_other_seeds_others():
    def stalls(seed: int) -> list[float]:
        return _ttfts(HostSpec(stall_per_prefill_step=0.5, stall_excess_s=(0.4, 0.8, 1.6), stall_seed=seed))
    assert stalls(1) == stalls(1)
    assert len({tuple(stalls(s)) for s in range(4)}) == 4
    assert _ttfts(HostSpec()) == _ttfts(HostSpec(stall_excess_s=(1.0,)))  # no chance: no stall


def test_bad_stalls_are_refused():
    for bad, match in (({"stall_per_prefill_step": 1.0, "stall_excess_s": (1.0,)}, "probability"),
                       ({"stall_per_prefill_step": 0.1}, "needs stall_excess_s"),
                       ({"stall_excess_s": (2.0, 1.0)}, "increasing"),
                       ({"stall_excess_s": (0.0,)}, "positive")):
        with pytest.raises(ValueError, match=match):
            HostSpec(**bad)
    config = {"model": "llama-3-8b", "hardware": "a100", "policies": {"colocated": {"workers": {"both": 1}}}}
    built = build_cluster(sim_config_from_dict({**config, "host": {"stall_per_prefill_step": 0.01,
                                                                   "stall_excess_s": [0.3, 3.0]}}), "colocated")
    assert built.host.stalls and built.host.stall_excess_s == (0.3, 3.0)
    with pytest.raises(SimConfigError, match="stall_excess_s"):
        sim_config_from_dict({**config, "host": {"stall_per_prefill_step": 0.01, "stall_excess_s": [3.0, 0.3]}})

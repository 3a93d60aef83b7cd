"""The stretch-draws host form: each prefill step's stretch drawn, at a quantile drawn as the
step starts, among the load probe's own factors, not their median (bench.simulator.host)."""
from __future__ import annotations

import random
from dataclasses import replace

import pytest

from bench.simulator import simulate
from bench.simulator.config import SimConfigError, build_cluster, sim_config_from_dict
from bench.simulator.host import HostSpec
from bench.workloads import RequestSpec, Workload
from schedulers.policies import ColocatedPolicy, DisaggregatedPolicy

from .sim_clusters import cluster

RULE = "decode-neighbour"


def test_a_drawn_stretch_is_the_draw_at_the_steps_quantile():
    host = HostSpec(num_cores=2, load_stretch=((1, 1.5),), load_stretch_draws=(0.9, 1.2, 2.0),
                    load_stretch_beside_draws=(3.0,))
    assert host.load_factor(1) == pytest.approx(1.5)  # no quantile: the points
    assert host.load_factor(1, quantile=0.5) == pytest.approx(1.2)
    assert host.load_factor(1, quantile=0.75) == pytest.approx(1.6)  # between neighbours
    assert host.load_factor(4, quantile=1.0) == pytest.approx(2.0)  # whatever the count
    assert host.load_factor(1, quantile=0.0) == 1.0  # a draw below 1 is floored
    assert host.load_factor(0, quantile=1.0) == 1.0  # no streams: no stretch
    assert host.load_factor(1, beside=True, quantile=0.2) == pytest.approx(3.0)
    plain = replace(host, load_stretch_beside_draws=())
    assert plain.load_factor(1, beside=True, quantile=1.0) == pytest.approx(2.0)  # not measured: the common draws
    assert not HostSpec(load_stretch_draws=(2.0,)).draws_stretch  # no host: no draws
    with pytest.raises(ValueError, match="quantile"):
        host.load_factor(1, quantile=1.5)


def test_bad_draws_are_refused():
    with pytest.raises(ValueError, match="load_stretch_draws"):
        HostSpec(num_cores=2, load_stretch_draws=(1.5, 1.2))  # not sorted
    with pytest.raises(ValueError, match="load_stretch_beside_draws"):
        HostSpec(num_cores=2, load_stretch_beside_draws=(0.0, 1.2))
    config = {"model": "llama-3-8b", "hardware": "a100", "policies": {"colocated": {"workers": {"both": 1}}}}
    built = build_cluster(sim_config_from_dict({**config, "host": {"num_cores": 2, "load_stretch_draws": [1.1, 1.4],
                                                                   "draw_seed": 7}}), "colocated")
    assert built.host.load_stretch_draws == (1.1, 1.4) and built.host.draw_seed == 7
    with pytest.raises(SimConfigError, match="load_stretch_draws"):
        sim_config_from_dict({**config, "host": {"num_cores": 2, "load_stretch_draws": [-1.0]}})


# r0 streams on one engine (decode-only steps) and ends inside r1's long prefill, one step on the other.
BESIDE_DECODES = Workload("w", (RequestSpec("r0", 0.0, 128, 24), RequestSpec("r1", 0.02, 8000, 2)))


def _served(host: HostSpec, work: Workload = BESIDE_DECODES) -> dict:
    return {r.request_id: r for r in simulate(work, cluster({"both": 2}, host), ColocatedPolicy()).records}


def test_draws_all_at_one_factor_simulate_as_that_factor_measured_flat():
    drawn = _served(HostSpec(num_cores=2, load_stretch=((1, 1.1),), load_stretch_draws=(2.0, 2.0, 2.0),
                             stretch_rule=RULE))
    flat = _served(HostSpec(num_cores=2, load_stretch=((1, 2.0),), stretch_rule=RULE))
    assert drawn["r1"].first_token_s == pytest.approx(flat["r1"].first_token_s, rel=1e-9)
    assert drawn["r1"].ttft_s > _served(HostSpec(num_cores=2))["r1"].ttft_s


def test_a_step_keeps_its_drawn_quantile_while_the_load_under_it_changes():
    seed = 3
    host = HostSpec(num_cores=2, load_stretch=((1, 1.1),), load_stretch_draws=(1.0, 3.0), stretch_rule=RULE,
                    draw_seed=seed)
    idle, drawn = _served(HostSpec(num_cores=2)), _served(host)
    draws = random.Random(seed)
    draws.random()  # r0's own prefill step draws first
    factor = 1.0 + 2.0 * draws.random()  # r1's step: its quantile among (1.0, 3.0)
    start_s, work_s, r0_end_s = 0.02, idle["r1"].ttft_s, drawn["r0"].finish_s
    assert start_s < r0_end_s < start_s + work_s  # r0 ends inside the step: the case under test
    # At the drawn factor while r0 decodes beside it, then the work left at its engine time.
    expected_end_s = r0_end_s + work_s - (r0_end_s - start_s) / factor
    assert drawn["r1"].first_token_s == pytest.approx(expected_end_s, rel=1e-9)


def test_the_same_seed_draws_the_same_steps_and_other_seeds_other_ones():
    # Prompts prefilled one after another on the prefill-only engine while r0 streams on the other.
    work = Workload("w", (RequestSpec("r0", 0.0, 64, 2000),
                          *(RequestSpec(f"p{i}", 0.05 + 0.5 * i, 3000, 2) for i in range(6))))
    host = HostSpec(num_cores=2, load_stretch=((1, 1.5),), load_stretch_draws=(1.0, 1.5, 3.0), stretch_rule=RULE)

    def prefilled(seed: int) -> list[float]:
        result = simulate(work, cluster({"prefill": 1, "decode": 1}, replace(host, draw_seed=seed)),
                          DisaggregatedPolicy())
        return [result.prompt_prefilled_s[f"p{i}"] - result.prompt_reached_s[f"p{i}"] for i in range(6)]
    assert prefilled(0) == prefilled(0)
    runs = [prefilled(seed) for seed in range(4)]
    assert len({tuple(run) for run in runs}) == 4
    alone = simulate(work, cluster({"prefill": 1, "decode": 1}, HostSpec(num_cores=2)), DisaggregatedPolicy())
    prefill_s = alone.prompt_prefilled_s["p0"] - alone.prompt_reached_s["p0"]
    # every step within the draws' extremes: its engine time to three times it
    assert all(prefill_s * (1 - 1e-9) <= s <= 3 * prefill_s * (1 + 1e-9) for run in runs for s in run)

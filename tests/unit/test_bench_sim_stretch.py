"""A prefill step stretched by the host's load as it changes while the step runs, the stretch
of a prefill on a prefill-only engine beside the others' streams, and the host's stretch rules:
(prefill-only-busy) a prefill on an engine that streams takes the beside stretch while a
prefill-only engine computes beside it; (decode-neighbour) a prefill is stretched only beside
another engine's decode-only step, or that, or beside another engine's prefill at the factor
measured there."""
from __future__ import annotations

from dataclasses import replace

import pytest

from bench.simulator import simulate
from bench.simulator.config import SimConfigError, build_cluster, sim_config_from_dict
from bench.simulator.host import HostSpec
from bench.simulator.stretch import StretchedStep
from bench.workloads import RequestSpec, Workload
from schedulers.policies import ColocatedPolicy, DisaggregatedPolicy, LengthThresholdPolicy

from .sim_clusters import MODEL, cluster


# ---- the step ----------------------------------------------------------------------------------

def test_work_done_at_the_old_factor_counts_and_the_rest_runs_at_the_new_one():
    step = StretchedStep(work_s=0.3, factor=1.0, since_s=0.0, tail_s=0.01)
    assert step.end_s == pytest.approx(0.31)
    assert step.restretch(0.1, 2.0)  # 0.1 s of work done, 0.2 s left at half speed
    assert step.end_s == pytest.approx(0.1 + 0.4 + 0.01)
    assert not step.restretch(0.3, 2.0)  # the same factor: the end stays
    assert step.end_s == pytest.approx(0.51)
    assert step.restretch(0.3, 1.0)  # 0.1 s of work done at x2 by now, 0.1 s left at full speed
    assert step.end_s == pytest.approx(0.3 + 0.1 + 0.01)


def test_a_step_in_its_tail_no_longer_moves():
    step = StretchedStep(work_s=0.1, factor=1.0, since_s=0.0, tail_s=0.05)
    assert not step.restretch(0.12, 3.0)
    assert step.end_s == pytest.approx(0.15)


@pytest.mark.parametrize("work,factor", [(-0.1, 1.0), (0.1, 0.0)])
def test_bad_steps_are_refused(work, factor):
    with pytest.raises(ValueError, match="stretched step"):
        StretchedStep(work, factor, 0.0)


# ---- the beside points ---------------------------------------------------------------------------

def test_a_prefill_only_engine_takes_its_own_points_when_measured():
    host = HostSpec(num_cores=2, load_stretch=((1, 1.2), (2, 1.4)), load_stretch_beside=((1, 2.0),))
    assert host.load_factor(1) == pytest.approx(1.2)
    assert host.load_factor(1, beside=True) == pytest.approx(2.0)
    assert host.load_factor(2, beside=True) == pytest.approx(3.0)  # along its last segment
    plain = HostSpec(num_cores=2, load_stretch=((1, 1.2),))
    assert plain.load_factor(1, beside=True) == pytest.approx(1.2)  # not measured: the common points


def test_bad_beside_points_are_refused():
    with pytest.raises(ValueError, match="load_stretch_beside"):
        HostSpec(num_cores=2, load_stretch_beside=((2, 1.5), (1, 1.6)))
    config = {"model": "llama-3-8b", "hardware": "a100", "policies": {"colocated": {"workers": {"both": 1}}}}
    built = build_cluster(sim_config_from_dict({**config, "host": {"num_cores": 2, "load_stretch": [[1, 1.2]],
                                                                   "load_stretch_beside": [[1, 2.0]]}}),
                          "colocated")
    assert built.host.load_stretch_beside == ((1, 2.0),)
    with pytest.raises(SimConfigError, match="load_stretch_beside"):
        sim_config_from_dict({**config, "host": {"num_cores": 2, "load_stretch_beside": [[1, 0.0]]}})


# ---- in the simulator ------------------------------------------------------------------------------

def test_a_prefill_runs_at_the_load_of_each_moment_while_it_lasts():
    # r0 streams on one engine and ends while r1's long prompt prefills, in one step, on the other.
    work = Workload("w", (RequestSpec("r0", 0.0, 128, 24), RequestSpec("r1", 0.02, 8000, 2)))
    idle = {r.request_id: r for r in simulate(work, cluster({"both": 2}, HostSpec(num_cores=2)),
                                              ColocatedPolicy()).records}
    loaded = {r.request_id: r for r in simulate(work, cluster({"both": 2}, HostSpec(num_cores=2,
                                                                                    load_stretch=((1, 2.0),))),
                                                ColocatedPolicy()).records}
    assert loaded["r1"].decode_worker != loaded["r0"].decode_worker
    start_s, work_s, r0_end_s = 0.02, idle["r1"].ttft_s, loaded["r0"].finish_s
    assert r0_end_s == pytest.approx(idle["r0"].finish_s)  # decode steps do not stretch
    assert start_s < r0_end_s < start_s + 2 * work_s  # r0 ends inside the step: the case under test
    # At x2 until r0 ends, then the work left at full speed.
    expected_end_s = r0_end_s + work_s - (r0_end_s - start_s) / 2
    assert loaded["r1"].first_token_s == pytest.approx(expected_end_s, rel=1e-9)
    assert idle["r1"].ttft_s < loaded["r1"].ttft_s < 2 * idle["r1"].ttft_s


def test_a_prefill_on_a_prefill_only_engine_takes_the_beside_stretch():
    # r0 streams on the decode engine through r1's prefill on the prefill engine.
    work = Workload("w", (RequestSpec("r0", 0.0, 64, 400), RequestSpec("r1", 0.05, 4000, 2)))
    roles = {"prefill": 1, "decode": 1}
    common = HostSpec(num_cores=2, load_stretch=((1, 1.2),))
    beside = replace(common, load_stretch_beside=((1, 2.0),))
    idle = {r.request_id: r for r in simulate(work, cluster(roles, HostSpec(num_cores=2)),
                                              DisaggregatedPolicy()).records}
    slow = {r.request_id: r for r in simulate(work, cluster(roles, beside), DisaggregatedPolicy()).records}
    mild = {r.request_id: r for r in simulate(work, cluster(roles, common), DisaggregatedPolicy()).records}
    assert slow["r1"].prefill_worker == "prefill-0" and slow["r0"].finish_s > slow["r1"].first_token_s
    prefill_s = MODEL.predict(4000, 0, [])
    # The same request on the same load: the prefill's step alone differs, x2.0 against x1.2.
    assert slow["r1"].ttft_s - mild["r1"].ttft_s == pytest.approx((2.0 - 1.2) * prefill_s, rel=0.02)
    assert mild["r1"].ttft_s - idle["r1"].ttft_s == pytest.approx(0.2 * prefill_s, rel=0.02)


def test_a_prefill_beside_a_computing_prefill_only_engine_takes_the_beside_stretch_when_asked():
    # r0 streams on the engine that does both; r1's long prompt goes to the prefill-only engine
    # (one step of 8,000 tokens) and r2's short one to the streaming engine, inside r1's step.
    short = (RequestSpec("r0", 0.0, 64, 400), RequestSpec("r2", 0.02, 1000, 2))
    work = Workload("w", (*short, RequestSpec("r1", 0.01, 8000, 2)))
    roles = {"prefill": 1, "both": 1}
    points = HostSpec(num_cores=2, load_stretch=((1, 1.2),), load_stretch_beside=((1, 2.0),))

    def simulated(host, workload=work):
        return simulate(workload, cluster(roles, host), LengthThresholdPolicy(threshold_tokens=1024))

    def served(host, workload=work):
        return {r.request_id: r for r in simulated(host, workload).records}
    plain, busy = served(points), served(replace(points, stretch_rule="prefill-only-busy"))
    everywhere = served(HostSpec(num_cores=2, load_stretch=((1, 2.0),)))
    assert busy["r1"].prefill_worker == "prefill-0" and busy["r2"].decode_worker == "both-0"
    assert busy["r2"].first_token_s < busy["r1"].first_token_s  # r2's step lies inside r1's
    # Asked, r2's prefill runs at the beside stretch (x2.0), as if every prefill took it; not
    # asked, at the streaming engine's own (x1.2).
    assert busy["r2"].ttft_s == pytest.approx(everywhere["r2"].ttft_s, rel=1e-9)
    assert busy["r2"].ttft_s > plain["r2"].ttft_s
    # The prefill-only engine's own prefill takes the beside stretch either way.
    assert simulated(replace(points, stretch_rule="prefill-only-busy")).prompt_prefilled_s["r1"] == pytest.approx(
        simulated(points).prompt_prefilled_s["r1"], rel=1e-9)
    # With the prefill-only engine idle, asking changes nothing.
    alone = Workload("w", short)
    assert served(replace(points, stretch_rule="prefill-only-busy"), alone)["r2"].ttft_s == pytest.approx(
        served(points, alone)["r2"].ttft_s, rel=1e-9)


# ---- the decode-neighbour rule -----------------------------------------------------------------

def test_a_bad_stretch_rule_is_refused():
    with pytest.raises(ValueError, match="stretch_rule"):
        HostSpec(num_cores=2, stretch_rule="always")


def test_a_prefill_beside_its_own_engines_streams_alone_is_not_stretched_by_the_decode_neighbour_rule():
    # r0 streams and r1 prefills on the one engine: no other engine computes.
    work = Workload("w", (RequestSpec("r0", 0.0, 64, 400), RequestSpec("r1", 0.05, 4000, 2)))
    stretched = HostSpec(num_cores=2, load_stretch=((1, 2.0),))

    def ttft(host):
        return {r.request_id: r for r in simulate(work, cluster({"both": 1}, host), ColocatedPolicy()).records}["r1"].ttft_s
    assert ttft(replace(stretched, stretch_rule="decode-neighbour")) == pytest.approx(
        ttft(HostSpec(num_cores=2)), rel=1e-9)
    assert ttft(stretched) > ttft(HostSpec(num_cores=2))  # the streams rule stretches it


def test_beside_another_engines_decode_steps_the_decode_neighbour_rule_stretches_as_the_streams_rule():
    # r0 streams on one engine (decode-only steps) and ends inside r1's prefill on the other.
    work = Workload("w", (RequestSpec("r0", 0.0, 128, 24), RequestSpec("r1", 0.02, 8000, 2)))
    stretched = HostSpec(num_cores=2, load_stretch=((1, 2.0),))

    def first_token_s(host):
        records = simulate(work, cluster({"both": 2}, host), ColocatedPolicy()).records
        return {r.request_id: r for r in records}["r1"].first_token_s
    alone = first_token_s(HostSpec(num_cores=2))
    assert first_token_s(replace(stretched, stretch_rule="decode-neighbour")) == pytest.approx(
        first_token_s(stretched), rel=1e-9)
    assert first_token_s(stretched) > alone


def test_the_decode_neighbour_rule_frees_a_prefill_only_engine_while_its_neighbour_prefills_too():
    # As the prefill-only-busy case above: r2's step on the streaming engine, inside r1's prefill
    # on the prefill-only engine, takes the beside stretch; and r1's prefill runs at its engine
    # time while that step (a prompt's chunk, not decodes alone) runs beside it.
    work = Workload("w", (RequestSpec("r0", 0.0, 64, 400), RequestSpec("r2", 0.02, 1000, 2),
                          RequestSpec("r1", 0.01, 8000, 2)))
    points = HostSpec(num_cores=2, load_stretch=((1, 1.2),), load_stretch_beside=((1, 2.0),))

    def simulated(host):
        return simulate(work, cluster({"prefill": 1, "both": 1}, host), LengthThresholdPolicy(threshold_tokens=1024))
    busy, neighbour = simulated(replace(points, stretch_rule="prefill-only-busy")), simulated(
        replace(points, stretch_rule="decode-neighbour"))
    ttft = {name: {r.request_id: r.ttft_s for r in result.records}
            for name, result in (("busy", busy), ("neighbour", neighbour))}
    assert ttft["neighbour"]["r2"] == pytest.approx(ttft["busy"]["r2"], rel=1e-9)
    assert neighbour.prompt_prefilled_s["r1"] < busy.prompt_prefilled_s["r1"]


# ---- beside another engine's prefill (decode-neighbour with stretch_beside_prefill) --------------

def test_a_bad_stretch_beside_prefill_is_refused_and_a_measured_one_below_1_is_floored():
    with pytest.raises(ValueError, match="stretch_beside_prefill"):
        HostSpec(num_cores=2, stretch_beside_prefill=0.0)
    config = {"model": "llama-3-8b", "hardware": "a100", "policies": {"colocated": {"workers": {"both": 1}}}}
    with pytest.raises(SimConfigError, match="stretch_beside_prefill"):
        sim_config_from_dict({**config, "host": {"num_cores": 2, "stretch_beside_prefill": -1.0}})
    built = build_cluster(sim_config_from_dict({**config, "host": {"num_cores": 2, "stretch_beside_prefill": 1.3}}),
                          "colocated")
    assert built.host.prefill_neighbour_factor() == pytest.approx(1.3)
    assert HostSpec(num_cores=2, stretch_beside_prefill=0.9).prefill_neighbour_factor() == 1.0
    assert HostSpec(stretch_beside_prefill=1.3).prefill_neighbour_factor() == 1.0  # no host: no stretch


def test_a_prefill_beside_another_engines_prefill_takes_the_factor_measured_there():
    # r0's long prompt prefills in one step on one engine; r1's short one, on the other engine,
    # prefills wholly inside that step.
    work = Workload("w", (RequestSpec("r0", 0.0, 8000, 2), RequestSpec("r1", 0.01, 1000, 2)))
    rule = HostSpec(num_cores=2, load_stretch=((1, 2.0),), stretch_rule="decode-neighbour")

    def served(host):
        return {r.request_id: r for r in simulate(work, cluster({"both": 2}, host), ColocatedPolicy()).records}
    plain, beside = served(rule), served(replace(rule, stretch_beside_prefill=1.5))
    assert beside["r1"].decode_worker != beside["r0"].decode_worker
    assert beside["r1"].first_token_s < beside["r0"].first_token_s  # r1's step inside r0's: the case under test
    prefill_s = MODEL.predict(1000, 0, [])
    # r1's prefill at x1.5 beside r0's; at its engine time without the factor (no stream anywhere)
    assert beside["r1"].ttft_s - plain["r1"].ttft_s == pytest.approx(0.5 * prefill_s, rel=0.02)
    assert plain["r1"].ttft_s == pytest.approx(served(HostSpec(num_cores=2))["r1"].ttft_s, rel=1e-9)
    # r0's prefill at x1.5 too while r1's step (1.5 x prefill_s) ran beside it: a third of it lost
    assert beside["r0"].first_token_s - plain["r0"].first_token_s == pytest.approx(0.5 * prefill_s, rel=0.02)

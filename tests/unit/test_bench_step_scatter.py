"""A step's scatter around its modelled time: measured on the probe steps before a run
(bench.step_scatter), drawn per step by the simulator's host (step-scatter form)."""
from __future__ import annotations

import json
import statistics
from dataclasses import replace

import pytest

from bench.simulator import simulate
from bench.simulator.host import HostSpec
from bench.step_scatter import (KINDS, STRETCH_KEY, draws, host_scatter, probe_steps, probes_host, scatter_by_kind,
                                simulated_spread, spread, stretch_beside_decode, sweep_scatter, top_up, topped_up)
from bench.workloads import RequestSpec, Workload
from schedulers.policies import ColocatedPolicy

from .sim_clusters import MODEL, cluster

HOST = HostSpec(num_cores=2, load_stretch=((1, 1.2),), step_excess_1_s=0.001, step_excess_2_s=0.002)
WORK = Workload("w", tuple(RequestSpec(f"r{i}", 0.05 * i, 200 + 300 * i, 30) for i in range(6)))


def _serve(host: HostSpec, work: Workload = WORK):
    return simulate(work, cluster({"both": 1}, host), ColocatedPolicy(), keep_steps=True)


def test_a_scatter_of_ones_changes_nothing_and_a_scatter_of_twos_doubles_every_step():
    plain = _serve(HOST)
    ones = _serve(replace(HOST, step_scatter_prefill=(1.0, 1.0), step_scatter_decode=(1.0,)))
    assert [r.e2e_s for r in ones.records] == pytest.approx([r.e2e_s for r in plain.records], rel=1e-12)
    alone = Workload("one", WORK.requests[3:4])  # one request: the same steps, twice as long
    plain = _serve(HOST, alone)
    twos = _serve(replace(HOST, step_scatter_prefill=(2.0, 2.0), step_scatter_decode=(2.0,), scatter_seed=3), alone)
    plain_steps = [s.end_s - s.start_s for s in plain.steps]
    assert len(twos.steps) == len(plain_steps) > 10
    assert [s.end_s - s.start_s for s in twos.steps] == pytest.approx([2 * t for t in plain_steps], rel=1e-9)


def test_each_kind_of_step_draws_from_its_own_set_or_the_other_where_one_is_missing():
    host = replace(HOST, step_scatter_prefill=(3.0,), step_scatter_decode=(0.5, 0.5))
    assert host.scatters
    assert host.scatter_factor(True, 0.7) == 3.0 and host.scatter_factor(False, 0.7) == 0.5
    only_decode = replace(HOST, step_scatter_decode=(1.0, 2.0))
    assert only_decode.scatter_factor(True, 0.5) == pytest.approx(1.5)  # interpolated, the decode set
    assert not replace(only_decode, num_cores=0).scatters  # no host, no scatter
    assert HOST.scatter_factor(True, 0.9) == 1.0


def test_a_median_one_scatter_keeps_the_median_step_and_lengthens_the_mean():
    scatter = tuple(draws([0.9] * 40 + [1.0] * 20 + [1.1] * 20 + [2.0] * 20))
    assert statistics.median(scatter) == pytest.approx(1.0, abs=0.01)
    plain, drawn = _serve(HOST), _serve(replace(HOST, step_scatter_prefill=scatter, step_scatter_decode=scatter))
    ratios = [b.end_s - b.start_s for b in drawn.steps]
    assert sum(ratios) > 1.1 * sum(s.end_s - s.start_s for s in plain.steps)
    again = _serve(replace(HOST, step_scatter_prefill=scatter, step_scatter_decode=scatter))
    assert [r.e2e_s for r in again.records] == [r.e2e_s for r in drawn.records]  # seeded


def test_the_host_refuses_a_scatter_out_of_order():
    with pytest.raises(ValueError, match="step_scatter_decode"):
        HostSpec(num_cores=2, step_scatter_decode=(1.2, 1.0))
    with pytest.raises(ValueError, match="step_scatter_prefill"):
        HostSpec(num_cores=2, step_scatter_prefill=(0.0, 1.0))


def test_ratios_over_their_groups_median_by_kind_small_groups_left_out():
    groups = {("both", "decode", "idle", "1"): [1.0, 2.0, 4.0], ("both", "decode", "decode", "1"): [3.0, 6.0, 6.0],
              ("both", "prefill", "idle", "0"): [2.0, 2.0, 5.0], ("prefill", "prefill", "idle", "0"): [9.0, 1.0]}
    got = scatter_by_kind(groups, min_steps=3)
    assert sorted(got["decode"]) == pytest.approx([0.5, 0.5, 1.0, 1.0, 1.0, 2.0])
    assert sorted(got["prefill"]) == pytest.approx([1.0, 1.0, 2.5])
    assert set(got) == set(KINDS)
    assert spread([1.0] * 6 + [2.0] * 4) == pytest.approx(2.0)
    assert spread([]) is None


def test_draws_are_evenly_spaced_quantiles_and_the_host_takes_them():
    got = draws(list(range(101)), num=11)
    assert got == pytest.approx([0, 10, 20, 30, 40, 50, 60, 70, 80, 90, 100])
    assert draws([]) == []
    host = host_scatter({"prefill": [1.0, 2.0], "decode": []})
    assert set(host) == {"step_scatter_prefill"}
    HostSpec(num_cores=2, **{k: tuple(v) for k, v in host.items()})  # valid as measured


def _saved(t0: float) -> list[dict]:
    """A both-engine's decode steps, one per 10 ms from t0: every tenth twice as long."""
    step_s = MODEL.predict(0, 0, [256])
    return [{"worker": "both-0", "role": "both", "t": t0 + 0.01 * i + (2 if i % 10 == 9 else 1) * step_s,
             "elapsed_s": (2 if i % 10 == 9 else 1) * step_s, "num_prefill_tokens": 0, "num_decode_reqs": 1}
            for i in range(100)]


def test_only_the_steps_inside_the_measurement_window_count():
    saved = _saved(100.0) + _saved(200.0)
    inside = probe_steps(saved, [(99.0, 102.0)], MODEL)
    assert sum(len(v) for v in inside.groups.values()) == 100
    assert inside.prefill_steps == 0 and inside.stall_excess_s == []
    by_kind = scatter_by_kind(inside.groups)
    assert by_kind["prefill"] == []
    assert sorted(by_kind["decode"])[-10:] == pytest.approx([2.0] * 10, rel=0.2)
    assert statistics.median(by_kind["decode"]) == pytest.approx(1.0)


def test_a_probe_step_that_stalled_is_a_stall_in_seconds_not_a_factor_of_the_scatter():
    # Run 101's probes: a 72-token prefill took 0.55 s against 9 ms calibrated. As a factor (x60
    # here) it would stretch a 0.25 s prefill to 15 s; as a stall it adds its own seconds.
    prefill_s = MODEL.predict(72)
    steps = [{"worker": "both-0", "role": "both", "t": 100.0 + 0.1 * i, "elapsed_s": prefill_s,
              "num_prefill_tokens": 72, "num_decode_reqs": 0} for i in range(39)]
    stalled = 0.55 if prefill_s < 0.05 else 12 * prefill_s  # 3x and 0.3 s over: engine_stalls' rule
    steps.append({"worker": "both-0", "role": "both", "t": 104.5, "elapsed_s": stalled, "num_prefill_tokens": 72,
                  "num_decode_reqs": 0})
    probes = probe_steps(steps, [(99.0, 105.0)], MODEL)
    assert probes.prefill_steps == 40
    assert probes.stall_excess_s == pytest.approx([stalled - prefill_s])
    assert max(scatter_by_kind(probes.groups)["prefill"]) == pytest.approx(1.0)  # the stall is not in the draws
    host = probes_host(probes)
    assert host["stall_per_prefill_step"] == pytest.approx(1 / 40)
    assert host["stall_excess_s"] == pytest.approx([stalled - prefill_s])
    spec = HostSpec(num_cores=2, **{k: tuple(v) if isinstance(v, list) else v for k, v in host.items()})
    assert spec.stalls and max(spec.step_scatter_prefill) == pytest.approx(1.0)
    # a step twice its time is scatter, however long: not 0.3 s over
    steps[-1] = {**steps[-1], "elapsed_s": 2 * prefill_s}
    assert probe_steps(steps, [(99.0, 105.0)], MODEL).stall_excess_s == []
    assert "stall_per_prefill_step" not in probes_host(probe_steps(steps, [(99.0, 105.0)], MODEL))


def test_a_simulated_stall_adds_its_seconds_whatever_the_step():
    # The same stall on a short and on a long prefill: the same seconds more, where a factor would scale
    short = Workload("short", (RequestSpec("s", 0.0, 64, 2),))
    long = Workload("long", (RequestSpec("l", 0.0, 1800, 2),))
    always = replace(HOST, stall_per_prefill_step=0.999, stall_excess_s=(0.5,))
    for work in (short, long):
        plain, stalled = _serve(HOST, work), _serve(always, work)
        assert stalled.records[0].ttft_s - plain.records[0].ttft_s == pytest.approx(0.5, rel=1e-6)


def test_the_prefill_stretch_beside_decode_steps_is_read_off_the_probe_steps_of_an_engine_that_streams():
    both = {("both", "prefill", "idle", "0"): [1.1] * 25 + [1.3] * 5, ("both", "prefill", "idle", "1"): [9.0] * 30,
            ("both", "prefill", "decode", "0"): [1.5] * 20, ("both", "prefill", "decode", "2-3"): [1.6] * 21,
            ("prefill", "prefill", "decode", "0"): [5.0] * 50, ("both", "decode", "decode", "1"): [7.0] * 50}
    # beside decode steps (any own decodes) over beside an idle engine with none of its own: 1.6 / 1.1;
    # a prefill-only engine's steps, decode steps and steps with own decodes beside idle are not it
    assert stretch_beside_decode(both) == pytest.approx(1.6 / 1.1)
    hybrid = {k: v for k, v in both.items() if k[0] != "both" or k[2] != "decode"}
    assert stretch_beside_decode(hybrid) is None  # no engine that streams had a decoding neighbour
    assert stretch_beside_decode(both, min_steps=50) is None  # too few to take a median of
    assert probes_host(probe_steps([], [(0.0, 1.0)], MODEL)) == {}


def test_a_sweep_pools_the_scatter_as_the_measurements_are_pooled(tmp_path):
    from dataclasses import asdict

    cal = {"model_spec": asdict(MODEL.spec), "kv_geometry": asdict(MODEL.kv),
           **{k: getattr(MODEL, k) for k in ("overhead_s", "s_per_linear_flop", "s_per_attention_flop",
                                             "s_per_kv_byte")}}
    measured = []
    for k, name in enumerate(("round_0", "round_1")):
        (tmp_path / name / "colocated").mkdir(parents=True)
        steps = _saved(100.0 * (k + 1))
        if k == 1:
            steps = [{**s, "elapsed_s": s["elapsed_s"] * (1 + (i % 2))} for i, s in enumerate(steps)]
        (tmp_path / name / "colocated" / "engine_steps.json").write_text(json.dumps(
            {"both-0": {"role": "both", "steps": [{k2: v for k2, v in s.items() if k2 not in ("worker", "role")}
                                                  for s in steps]}}))
        measured.append({"colocated": {**cal, "window_s": [100.0 * (k + 1) - 1, 100.0 * (k + 1) + 3]}})
    path = tmp_path / "summary.json"
    own = sweep_scatter(path, ["round_0", "round_1"], measured, ["colocated"], "own")
    hardware = sweep_scatter(path, ["round_0", "round_1"], measured, ["colocated"], "hardware")
    assert own[0]["colocated"] != own[1]["colocated"]
    assert hardware[0] == hardware[1]
    assert spread(own[1]["colocated"]["step_scatter_decode"]) > spread(own[0]["colocated"]["step_scatter_decode"])
    with pytest.raises(ValueError, match="own, pooled or hardware"):
        sweep_scatter(path, ["round_0", "round_1"], measured, ["colocated"], "mine")


def test_a_sweep_saved_without_engine_steps_is_refused_by_name(tmp_path):
    (tmp_path / "round_0" / "colocated").mkdir(parents=True)
    measured = [{"colocated": {"window_s": [0.0, 1.0]}}]
    with pytest.raises(FileNotFoundError, match="holds no engine steps"):
        sweep_scatter(tmp_path / "summary.json", ["round_0"], measured, ["colocated"], "own")



def test_a_top_up_draws_only_what_the_probes_scatter_beyond_the_model():
    import math

    probes = draws([0.8 + 0.01 * i for i in range(100)] + [1.5 + 0.02 * i for i in range(30)])
    model = 1.2
    topped = topped_up(probes, model)
    assert statistics.median(topped) == pytest.approx(statistics.median(probes))
    # log-spreads add in squares: the model's and the top-up's make the probes'
    assert math.log(spread(topped)) ** 2 + math.log(model) ** 2 == pytest.approx(math.log(spread(probes)) ** 2,
                                                                                  rel=1e-6)
    assert topped == sorted(topped)
    median = statistics.median(probes)
    assert topped_up(probes, spread(probes) * 1.1) == pytest.approx([median] * len(probes))  # the model has it all
    assert topped_up(probes, None) == list(probes)
    host = top_up({"step_scatter_prefill": probes, "step_scatter_decode": probes, "stall_per_prefill_step": 0.01,
                   "stall_excess_s": [0.4]}, {"prefill": model, "decode": None})
    assert host == {"step_scatter_prefill": topped, "step_scatter_decode": list(probes),
                    "stall_per_prefill_step": 0.01, "stall_excess_s": [0.4]}  # the model has no stalls to top up


def test_a_simulations_own_scatter_is_measured_as_the_probes_is():
    many = Workload("many", tuple(RequestSpec(f"r{i}", 0.03 * i, 150 + 40 * (i % 7), 40) for i in range(40)))
    plain = _serve(HOST, many)
    roles = {"both-0": "both"}
    flat = simulated_spread(plain, roles, MODEL)
    assert set(flat) == set(KINDS) and flat["decode"] is not None and flat["decode"] >= 1.0
    scatter = tuple(draws([0.7 + 0.02 * i for i in range(61)]))  # p90 over p50 1.37
    drawn = _serve(replace(HOST, step_scatter_prefill=scatter, step_scatter_decode=scatter), many)
    assert simulated_spread(drawn, roles, MODEL)["decode"] > flat["decode"] + 0.2

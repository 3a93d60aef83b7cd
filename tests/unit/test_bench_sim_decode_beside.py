"""What a streaming step loses while a prefill-only engine prefills (bench.simulator.host,
`decode_beside_prefill`; measured by bench.host_load's probe), and how the simulator charges it."""
from __future__ import annotations

import pytest

from bench.simulator import simulate
from bench.simulator.config import SimConfigError, build_cluster, sim_config_from_dict
from bench.simulator.host import HostSpec
from bench.workloads import RequestSpec, Workload
from schedulers.policies import ColocatedPolicy, DisaggregatedPolicy

from .sim_clusters import MODEL, cluster

EXTRA_S = 0.004


def test_the_points_are_joined_held_below_the_first_and_never_below_zero():
    host = HostSpec(num_cores=2, decode_beside_prefill=((2, 0.004), (4, 0.008)))
    assert host.beside_prefill_s(1) == pytest.approx(0.004)  # below the first count: the first
    assert host.beside_prefill_s(3) == pytest.approx(0.006)
    assert host.beside_prefill_s(6) == pytest.approx(0.012)  # along the last segment
    assert host.beside_prefill_s(0) == 0.0
    assert HostSpec(num_cores=2, decode_beside_prefill=((1, -0.002),)).beside_prefill_s(1) == 0.0
    assert HostSpec(num_cores=0, decode_beside_prefill=((1, 0.004),)).beside_prefill_s(1) == 0.0  # no host model


def test_bad_points_are_refused_and_a_config_takes_them():
    with pytest.raises(ValueError, match="decode_beside_prefill"):
        HostSpec(num_cores=2, decode_beside_prefill=((2, 0.004), (1, 0.003)))
    config = {"model": "llama-3-8b", "hardware": "a100", "policies": {"disaggregated": {"workers": {"prefill": 1,
                                                                                                   "decode": 1}}}}
    built = build_cluster(sim_config_from_dict({**config, "host": {"num_cores": 2,
                                                                   "decode_beside_prefill": [[1, 0.004]]}}),
                          "disaggregated")
    assert built.host.decode_beside_prefill == ((1, 0.004),)
    with pytest.raises(SimConfigError, match="decode_beside_prefill"):
        sim_config_from_dict({**config, "host": {"num_cores": 2, "decode_beside_prefill": [[0, 0.004]]}})


def gaps(times: list[float]) -> list[float]:
    return [b - a for a, b in zip(times, times[1:])]


def test_a_decode_step_beside_the_prefill_only_engines_prefill_takes_the_measured_extra():
    # r0 streams on the decode engine through r1's prefill, one long step on the prefill engine.
    work = Workload("w", (RequestSpec("r0", 0.0, 64, 300), RequestSpec("r1", 0.05, 8000, 2)))
    roles = {"prefill": 1, "decode": 1}
    idle = {r.request_id: r for r in simulate(work, cluster(roles, HostSpec(num_cores=2)),
                                              DisaggregatedPolicy()).records}
    beside = {r.request_id: r for r in simulate(work, cluster(roles, HostSpec(
        num_cores=2, decode_beside_prefill=((1, EXTRA_S),))), DisaggregatedPolicy()).records}
    assert beside["r1"].prefill_worker == "prefill-0" and beside["r0"].decode_worker == "decode-0"
    prefill_s = MODEL.predict(8000, 0, [])
    # Up to r1's first token: afterwards r1 joins the decode engine's batch, a little later in
    # the run with the extra, which changes the later gaps for other reasons.
    before = min(sum(t < run["r1"].first_token_s for t in run["r0"].token_times[1:]) for run in (idle, beside))
    extra = [b - a for a, b in zip(gaps(idle["r0"].token_times)[:before], gaps(beside["r0"].token_times)[:before])]
    # Every gap is as without the extra, or longer by exactly the extra, ...
    assert all(e == pytest.approx(0.0, abs=1e-9) or e == pytest.approx(EXTRA_S, rel=1e-6) for e in extra)
    # ... and those longer are the steps that started while the prefill ran.
    step_s = gaps(idle["r0"].token_times)[0]
    longer = sum(1 for e in extra if e > EXTRA_S / 2)
    assert longer == pytest.approx(prefill_s / (step_s + EXTRA_S), abs=2)


def test_a_colocated_deployment_has_no_prefill_only_engine_and_pays_nothing():
    work = Workload("w", (RequestSpec("r0", 0.0, 64, 100), RequestSpec("r1", 0.05, 8000, 2)))
    plain = simulate(work, cluster({"both": 2}, HostSpec(num_cores=2)), ColocatedPolicy()).records
    beside = simulate(work, cluster({"both": 2}, HostSpec(num_cores=2, decode_beside_prefill=((1, EXTRA_S),))),
                      ColocatedPolicy()).records
    assert [r.token_times for r in plain] == [r.token_times for r in beside]

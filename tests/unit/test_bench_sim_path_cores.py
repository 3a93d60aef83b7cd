"""The cores a request keeps busy while it is on its request path (bench.simulator.host,
`path_cores`), and how the simulator takes them from the engines' steps."""
from __future__ import annotations

from dataclasses import replace

import pytest

from bench.sim_fidelity import path_cores
from bench.simulator import simulate
from bench.simulator.config import SimConfigError, build_cluster, sim_config_from_dict
from bench.simulator.host import HostSpec
from bench.simulator.specs import RequestPathSpec
from bench.workloads import RequestSpec, Workload
from schedulers.policies import DisaggregatedPolicy

from .sim_clusters import cluster

HEAD_S = 0.020  # the request path before the first engine


def test_the_paths_cores_are_spread_over_every_core_of_the_host():
    host = HostSpec(num_cores=2, path_cores=0.8)
    assert host.path_factor(0) == 1.0
    assert host.path_factor(1) == pytest.approx(1.4)
    assert host.path_factor(2) == pytest.approx(1.8)
    assert HostSpec(num_cores=2).path_factor(3) == 1.0  # no path_cores measured
    assert HostSpec(num_cores=0, path_cores=0.8).path_factor(1) == 1.0  # no host model
    with pytest.raises(ValueError, match="path_cores"):
        HostSpec(num_cores=2, path_cores=-0.1)


def test_a_config_takes_path_cores_and_refuses_a_negative_one():
    config = {"model": "llama-3-8b", "hardware": "a100", "policies": {"colocated": {"workers": {"both": 1}}}}
    built = build_cluster(sim_config_from_dict({**config, "host": {"num_cores": 2, "path_cores": 0.7}}), "colocated")
    assert built.host.path_cores == 0.7
    with pytest.raises(SimConfigError, match="path_cores"):
        sim_config_from_dict({**config, "host": {"num_cores": 2, "path_cores": -1}})


def test_the_measured_cpu_per_request_over_the_routes_path_time():
    path = {"colocated_s": 0.0125, "disaggregated_s": 0.025}
    assert path_cores(0.010, path, {"both": 2}, "x") == pytest.approx(0.8)  # colocated bursts
    assert path_cores(0.010, path, {"prefill": 1, "decode": 1}, "x") == pytest.approx(0.4)  # all disaggregated
    with pytest.raises(ValueError, match="CPU per request"):
        path_cores(None, path, {"both": 2}, "x")
    with pytest.raises(ValueError, match="disaggregated_s"):
        path_cores(0.010, {"colocated_s": 0.0125}, {"prefill": 1, "decode": 1}, "x")


def test_a_decode_step_loses_the_paths_share_of_its_core_while_a_request_is_on_its_path():
    # r0 streams alone on the decode engine; r1 arrives at 50 ms and spends HEAD_S on its path
    # before its (long) prefill on the prefill engine. While r1 is on its path the decode steps
    # do their work at 1 / 1.4 of the rate, so r0's tokens after the path fall behind by
    # HEAD_S * (1 - 1 / 1.4) and no more, up to r1's hand-over.
    work = Workload("w", (RequestSpec("r0", 0.0, 64, 400), RequestSpec("r1", 0.05, 8000, 2)))
    roles = {"prefill": 1, "decode": 1}
    path = RequestPathSpec(colocated_s=HEAD_S, disaggregated_s=HEAD_S)  # no hand-over path
    runs = {}
    for cores in (0.0, 0.8):
        spec = replace(cluster(roles, HostSpec(num_cores=2, path_cores=cores)), request_path=path)
        runs[cores] = {r.request_id: r for r in simulate(work, spec, DisaggregatedPolicy()).records}
    plain, loaded = runs[0.0]["r0"].token_times, runs[0.8]["r0"].token_times
    handover_s = runs[0.0]["r1"].first_token_s - 0.01
    assert handover_s > 0.05 + HEAD_S + 0.05  # r1's prefill is long: there are steps to compare
    before = [(p, q) for p, q in zip(plain, loaded) if q < 0.05]
    after = [(p, q) for p, q in zip(plain, loaded) if 0.05 + HEAD_S + 0.01 < p and q < handover_s]
    assert before and after
    assert all(q == pytest.approx(p, abs=1e-9) for p, q in before)
    lag_s = HEAD_S * (1 - 1 / 1.4)
    assert all(q - p == pytest.approx(lag_s, rel=1e-6) for p, q in after)

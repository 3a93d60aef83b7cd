"""The simulator's CPU host: the request path's CPU slows the engines' steps only when it does
not fit on the cores no engine is computing on."""
from __future__ import annotations

from dataclasses import replace

import pytest

from bench.host_cpu import solve_per_request_and_token
from bench.simulator import ClusterSpec, EngineSpec, get_link, simulate
from bench.simulator.config import SimConfigError, build_cluster, sim_config_from_dict
from bench.simulator.host import HostLoad, HostSpec
from bench.workloads import RequestSpec, Workload
from schedulers.hardware import HARDWARE_SPECS
from schedulers.model_spec import MODEL_SPECS
from schedulers.policies import ColocatedPolicy
from schedulers.step_time import StepTimeModel

MODEL = StepTimeModel.from_roofline(MODEL_SPECS["llama-3-8b"], HARDWARE_SPECS["a100"], 16)


# ---- the load model ----------------------------------------------------------------------------

def test_no_cores_means_no_host_model():
    load = HostLoad(HostSpec(background_cores=5.0, cpu_s_per_token=1.0))
    load.tokens(0.0, 100)
    assert load.stretch(0.0, 1) == 1.0


def test_the_path_on_a_free_core_costs_the_engines_nothing():
    load = HostLoad(HostSpec(num_cores=2, background_cores=0.9))
    assert load.stretch(0.0, 1) == 1.0  # one engine busy, a whole core free for 0.9 of demand


def test_demand_beyond_the_free_cores_is_shared_by_the_busy_engines():
    load = HostLoad(HostSpec(num_cores=2, background_cores=0.1, cpu_s_per_token=0.002, window_s=0.5))
    load.tokens(0.0, 50)  # 0.1 CPU-s in the window: 0.2 cores, 0.3 with the background
    assert load.demand_cores(0.1) == pytest.approx(0.3)
    assert load.stretch(0.1, 2) == pytest.approx(1 / (1 - 0.15))  # 0.3 cores over 2 engines
    assert load.stretch(0.1, 1) == 1.0  # the other core is free
    assert load.demand_cores(0.6) == pytest.approx(0.1)  # the tokens left the window
    assert load.stretch(0.6, 2) == pytest.approx(1 / (1 - 0.05))


def test_each_busy_engines_loop_needs_cpu_beside_its_model():
    load = HostLoad(HostSpec(num_cores=2, engine_loop_cores=0.3))
    assert load.stretch(0.0, 1) == 1.0  # one engine: its loop fits on the free core
    assert load.stretch(0.0, 2) == pytest.approx(1 / (1 - 0.3))  # two: 0.6 cores over 2 engine cores
    one_more = HostLoad(HostSpec(num_cores=2, engine_loop_cores=0.3, background_cores=0.9))
    assert one_more.stretch(0.0, 1) == pytest.approx(1 / (1 - 0.2))  # 1.2 cores of demand, 1 free


def test_an_engine_keeps_its_fair_share_of_its_core():
    load = HostLoad(HostSpec(num_cores=1, background_cores=3.0, max_share=0.5))
    assert load.stretch(0.0, 1) == pytest.approx(2.0)


@pytest.mark.parametrize("field,value", [("num_cores", -1), ("background_cores", -0.1), ("engine_loop_cores", -1.0),
                                         ("cpu_s_per_token", -1e-3), ("window_s", 0.0), ("max_share", 1.0)])
def test_bad_host_values_are_refused(field, value):
    with pytest.raises(ValueError, match=f"host.{field}"):
        HostSpec(**{field: value})


# ---- in the simulator -------------------------------------------------------------------------

def one_worker(host: HostSpec) -> ClusterSpec:
    spec = ClusterSpec.from_roles(MODEL, {"both": 1}, EngineSpec(num_kv_blocks=20000, max_model_len=8192),
                                  get_link("nvlink"))
    return replace(spec, host=host)


def stream(num_requests: int, output_tokens: int) -> Workload:
    return Workload("w", tuple(RequestSpec(f"r{i}", 0.0, 256, output_tokens) for i in range(num_requests)))


def test_steps_stretch_on_a_host_with_no_core_to_spare():
    work = stream(4, 64)
    private = simulate(work, one_worker(HostSpec()), ColocatedPolicy()).records
    spare_core = simulate(work, one_worker(HostSpec(num_cores=2, cpu_s_per_token=1e-3)), ColocatedPolicy()).records
    shared = simulate(work, one_worker(HostSpec(num_cores=1, cpu_s_per_token=1e-3)), ColocatedPolicy()).records
    assert [r.tpot_s for r in spare_core] == pytest.approx([r.tpot_s for r in private], rel=1e-12)
    assert all(s.tpot_s > p.tpot_s * 1.05 for s, p in zip(shared, private))
    assert all(s.ttft_s == pytest.approx(p.ttft_s) for s, p in zip(shared, private))  # nothing streamed yet


def test_a_host_with_nothing_but_background_slows_every_step_by_its_share():
    work = stream(1, 16)
    private = simulate(work, one_worker(HostSpec()), ColocatedPolicy()).records[0]
    busy = simulate(work, one_worker(HostSpec(num_cores=1, background_cores=0.2)), ColocatedPolicy()).records[0]
    assert busy.ttft_s == pytest.approx(private.ttft_s / 0.8, rel=1e-9)
    assert busy.tpot_s == pytest.approx(private.tpot_s / 0.8, rel=1e-9)


# ---- its measurement and its config ----------------------------------------------------------------

def test_per_request_and_per_token_cpu_come_back_from_two_bursts():
    r, c = 0.012, 0.0035
    bursts = [(8, 32, 8 * r + 32 * c), (8, 512, 8 * r + 512 * c)]
    assert solve_per_request_and_token(bursts) == pytest.approx((r, c))


def test_noise_never_gives_negative_costs():
    # More CPU for fewer tokens: per token would be negative, so it all goes per request.
    assert solve_per_request_and_token([(8, 32, 0.5), (8, 512, 0.4)]) == pytest.approx((0.9 / 16, 0.0))
    with pytest.raises(ValueError, match="do not separate"):
        solve_per_request_and_token([(8, 32, 0.1), (16, 64, 0.2)])


def test_a_sim_config_takes_a_measured_host():
    cfg = sim_config_from_dict({"model": "llama-3-8b", "hardware": "a100",
                                "host": {"num_cores": 2, "background_cores": 0.07, "cpu_s_per_token": 0.004,
                                         "engine_loop_cores": 0.2},
                                "policies": {"colocated": {"workers": {"both": 1}}}})
    host = build_cluster(cfg, "colocated").host
    assert (host.num_cores, host.background_cores, host.cpu_s_per_token, host.engine_loop_cores) == (
        2, 0.07, 0.004, 0.2)
    with pytest.raises(SimConfigError, match="host.cores"):
        sim_config_from_dict({"host": {"cores": 2}, "policies": {"colocated": {"workers": {"both": 1}}}})

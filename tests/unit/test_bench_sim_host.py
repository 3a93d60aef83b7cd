"""The simulator's CPU host: a step that streams tokens takes the request path's CPU for its
tokens over the free cores (the default form), or the decode steps' measured excess over the
calibration (a line through one and two streams); a step beside a busy engine can be priced as
calibrated with all engines at once."""
from __future__ import annotations

from dataclasses import replace

import pytest

from bench.host_cpu import solve_per_request_and_token, step_excess_by_batch
from bench.metrics import RequestRecord
from bench.simulator import ClusterSpec, EngineSpec, get_link, simulate
from bench.simulator.config import SimConfigError, build_cluster, sim_config_from_dict
from bench.simulator.host import HostSpec
from bench.simulator.specs import RequestPathSpec
from bench.workloads import RequestSpec, Workload
from schedulers.hardware import HARDWARE_SPECS
from schedulers.model_spec import MODEL_SPECS
from schedulers.policies import ColocatedPolicy, DisaggregatedPolicy
from schedulers.step_time import StepTimeModel

MODEL = StepTimeModel.from_roofline(MODEL_SPECS["llama-3-8b"], HARDWARE_SPECS["a100"], 16)


# ---- the model ---------------------------------------------------------------------------------

def test_no_cores_means_no_host_model():
    assert HostSpec(cpu_s_per_token=1.0).step_delay_s(1, 8) == 0.0


def test_a_step_takes_its_tokens_path_cpu_over_the_free_cores():
    host = HostSpec(num_cores=4, cpu_s_per_token=0.003)
    assert host.step_delay_s(1, 4) == pytest.approx(4 * 0.003 / 3)
    assert host.step_delay_s(3, 4) == pytest.approx(4 * 0.003)  # one core free
    assert host.step_delay_s(4, 4) == pytest.approx(4 * 0.003)  # none free: on the engines' own
    assert host.step_delay_s(2, 0) == 0.0  # a step that streams nothing


def test_the_measured_step_excess_is_the_line_through_one_and_two_streams():
    host = HostSpec(num_cores=2, cpu_s_per_token=0.003, step_excess_1_s=-0.0005, step_excess_2_s=0.0005)
    assert host.step_delay_s(1, 1, engine_s=0.01) == pytest.approx(-0.0005)
    assert host.step_delay_s(1, 2, engine_s=0.01) == pytest.approx(0.0005)
    assert host.step_delay_s(2, 4, engine_s=0.01) == pytest.approx(0.0025)  # busy engines: measured in
    assert host.step_delay_s(1, 0, engine_s=0.01) == 0.0
    # Only one of the two measured: not this form (the path-CPU form, here 3 ms per token).
    assert HostSpec(2, 0.003, step_excess_1_s=0.001).step_delay_s(1, 1) == pytest.approx(0.003)


def test_a_step_no_other_engine_computes_beside_takes_the_lone_streams_excess():
    host = HostSpec(num_cores=2, step_excess_1_s=0.003, step_excess_2_s=0.004, step_excess_alone_s=0.0005)
    assert host.step_delay_s(1, 1, engine_s=0.01) == pytest.approx(0.0005)  # alone on the host
    assert host.step_delay_s(1, 3, engine_s=0.01) == pytest.approx(0.0005 + 2 * 0.001)  # same slope
    assert host.step_delay_s(2, 1, engine_s=0.01) == pytest.approx(0.003)  # another engine computes
    # With the path's CPU per token as the slope (load-path): each stream beyond the first adds it.
    path = HostSpec(num_cores=2, step_excess_1_s=0.003, step_excess_2_s=0.0025, step_excess_alone_s=0.0005,
                    stream_step_s=0.0015)
    assert path.step_delay_s(1, 3, engine_s=0.01) == pytest.approx(0.0005 + 2 * 0.0015)
    assert path.step_delay_s(2, 2, engine_s=0.01) == pytest.approx(0.003 + 0.0015)
    # Without the lone measurement, every step takes e1 (the measured-steps form).
    assert HostSpec(2, step_excess_1_s=0.003, step_excess_2_s=0.004).step_delay_s(1, 1) == pytest.approx(0.003)


def test_further_streams_follow_the_excess_measured_at_large_batches():
    host = HostSpec(num_cores=2, step_excess_1_s=0.001, step_excess_2_s=0.002, step_excess_alone_s=0.0005,
                    stream_step_s=0.01, step_excess_batch=((4, 0.003), (8, 0.005)))
    busy = 2  # another engine computes: the first stream's excess is e1
    assert host.step_delay_s(busy, 1) == pytest.approx(0.001)
    assert host.step_delay_s(busy, 3) == pytest.approx(0.0025)  # halfway from 2 to 4; the path slope unused
    assert host.step_delay_s(busy, 8) == pytest.approx(0.005)
    assert host.step_delay_s(busy, 10) == pytest.approx(0.006)  # on along the last segment, 0.5 ms a stream
    # Alone, the first stream's excess is the lone one; the further streams add the same.
    assert host.step_delay_s(1, 4) == pytest.approx(0.0005 + 0.002)
    with pytest.raises(ValueError, match="step_excess_batch"):
        HostSpec(num_cores=2, step_excess_batch=((2, 0.003),))


def test_a_negative_excess_shortens_steps_but_never_below_half():
    host = HostSpec(num_cores=2, step_excess_1_s=-0.001, step_excess_2_s=-0.002)
    assert host.step_delay_s(1, 2, engine_s=0.01) == pytest.approx(-0.002)
    assert host.step_delay_s(1, 8, engine_s=0.01) == pytest.approx(-0.005)


def test_the_load_factor_joins_the_measured_points_and_goes_on_along_the_last_segment():
    host = HostSpec(num_cores=2, load_stretch=((2, 1.4), (4, 1.6)))
    assert host.load_factor(0) == 1.0
    assert host.load_factor(1) == pytest.approx(1.2)  # from (0, 1) to the first point
    assert host.load_factor(2) == pytest.approx(1.4)
    assert host.load_factor(3) == pytest.approx(1.5)
    assert host.load_factor(8) == pytest.approx(2.0)  # past the last: its segment's slope
    # Never below 1, and no factor without the points or without a host.
    assert HostSpec(num_cores=2, load_stretch=((2, 1.4), (4, 0.2))).load_factor(8) == 1.0
    assert HostSpec(num_cores=2).load_factor(4) == 1.0
    assert HostSpec(load_stretch=((2, 1.4),)).load_factor(4) == 1.0


def test_the_colocated_path_follows_its_points_beside_streams_when_measured():
    host = HostSpec(num_cores=2, load_stretch=((2, 1.5),), path_beside_streams=((0, 0.010), (2, 0.016), (4, 0.024)))
    assert host.colocated_path_s(0.017, 0) == pytest.approx(0.010)  # the idle probe's 17 ms is not read
    assert host.colocated_path_s(0.017, 1) == pytest.approx(0.013)
    assert host.colocated_path_s(0.017, 3) == pytest.approx(0.020)
    assert host.colocated_path_s(0.017, 9) == pytest.approx(0.024)  # past the last count: the last
    # Without the points: the idle path times the load's factor, as before; without a host, as is.
    assert HostSpec(num_cores=2, load_stretch=((2, 1.5),)).colocated_path_s(0.017, 2) == pytest.approx(0.0255)
    assert HostSpec(path_beside_streams=((0, 0.010),)).colocated_path_s(0.017, 2) == pytest.approx(0.017)


def test_the_hand_over_path_is_the_idle_path_stretched_not_the_colocated_points():
    host = HostSpec(num_cores=2, load_stretch=((2, 1.5),), path_beside_streams=((0, 0.010), (2, 0.016)))
    assert host.stretched_path_s(0.030, 0) == pytest.approx(0.030)
    assert host.stretched_path_s(0.030, 2) == pytest.approx(0.045)  # the points are the colocated route's
    assert HostSpec().stretched_path_s(0.030, 2) == pytest.approx(0.030)  # no host: as measured


@pytest.mark.parametrize("field,value", [("num_cores", -1), ("cpu_s_per_token", -1e-3),
                                         ("load_stretch", ((2, 1.5), (2, 1.6))),
                                         ("load_stretch", ((0, 1.5),)), ("load_stretch", ((2, 0.0),)),
                                         ("path_beside_streams", ((2, 0.01),)),
                                         ("path_beside_streams", ((0, 0.01), (0, 0.02))),
                                         ("path_beside_streams", ((0, -0.01),))])
def test_bad_host_values_are_refused(field, value):
    with pytest.raises(ValueError, match=f"host.{field}"):
        HostSpec(**{field: value})


# ---- in the simulator -------------------------------------------------------------------------

def cluster(roles: dict[str, int], host: HostSpec) -> ClusterSpec:
    spec = ClusterSpec.from_roles(MODEL, roles, EngineSpec(num_kv_blocks=20000, max_model_len=8192),
                                  get_link("nvlink"))
    return replace(spec, host=host)


def one_request(output_tokens: int) -> Workload:
    return Workload("w", (RequestSpec("r0", 0.0, 256, output_tokens),))


@pytest.mark.parametrize("roles,policy", [({"both": 1}, ColocatedPolicy()),
                                          ({"prefill": 1, "decode": 1}, DisaggregatedPolicy())])
def test_every_streamed_token_adds_the_paths_cpu_to_its_step(roles, policy):
    per_token = 0.002
    private = simulate(one_request(16), cluster(roles, HostSpec()), policy).records[0]
    shared = simulate(one_request(16), cluster(roles, HostSpec(num_cores=2, cpu_s_per_token=per_token)),
                      policy).records[0]
    # A lone request: one engine busy at a time, one core free; each step streams one token.
    assert shared.ttft_s == pytest.approx(private.ttft_s + per_token, rel=1e-9)
    assert shared.tpot_s == pytest.approx(private.tpot_s + per_token, rel=1e-9)


def test_a_batch_step_pays_for_every_token_it_streams():
    work = Workload("w", tuple(RequestSpec(f"r{i}", 0.0, 256, 8) for i in range(4)))
    private = simulate(work, cluster({"both": 1}, HostSpec()), ColocatedPolicy()).records
    shared = simulate(work, cluster({"both": 1}, HostSpec(num_cores=2, cpu_s_per_token=0.001)),
                      ColocatedPolicy()).records
    for p, s in zip(private, shared):  # the four decode together: 4 tokens a step
        assert s.tpot_s == pytest.approx(p.tpot_s + 4 * 0.001, rel=1e-9)


def test_a_step_beside_a_busy_engine_is_priced_as_calibrated_with_all_engines_at_once():
    slower = replace(MODEL, overhead_s=MODEL.overhead_s + 0.004, s_per_linear_flop=2 * MODEL.s_per_linear_flop)
    neighbour = HostSpec(num_cores=2, neighbour_coefficients=(slower.overhead_s, slower.s_per_linear_flop,
                                                              slower.s_per_attention_flop, slower.s_per_kv_byte))
    # A lone request never has a busy neighbour: every step at the lone-engine price.
    lone = simulate(one_request(16), cluster({"both": 2}, HostSpec()), ColocatedPolicy()).records[0]
    assert simulate(one_request(16), cluster({"both": 2}, neighbour), ColocatedPolicy()).records[0] == lone
    # Two requests on two engines at once: each engine's steps start while the other computes.
    two = Workload("w", (RequestSpec("r0", 0.0, 256, 16), RequestSpec("r1", 0.0, 256, 16)))
    alone = simulate(two, cluster({"both": 2}, HostSpec()), ColocatedPolicy()).records
    busy = simulate(two, cluster({"both": 2}, neighbour), ColocatedPolicy()).records
    assert {r.decode_worker for r in busy} == {"both-0", "both-1"}
    # The first engine to start has an idle neighbour: its prompt at the lone price; the second's
    # and every decode step beside the other's at the slower one.
    assert sorted(r.ttft_s for r in busy)[0] == pytest.approx(sorted(r.ttft_s for r in alone)[0], rel=1e-9)
    for a, b in zip(alone, busy):
        assert b.tpot_s == pytest.approx(slower.predict(0, 0, [256 + 8]) - MODEL.predict(0, 0, [256 + 8])
                                         + a.tpot_s, rel=0.05)


def test_a_busy_neighbour_never_shortens_a_step():
    faster = replace(MODEL, overhead_s=0.0)
    host = HostSpec(num_cores=2, neighbour_coefficients=(0.0, faster.s_per_linear_flop,
                                                         faster.s_per_attention_flop, faster.s_per_kv_byte))
    two = Workload("w", (RequestSpec("r0", 0.0, 256, 16), RequestSpec("r1", 0.0, 256, 16)))
    alone = simulate(two, cluster({"both": 2}, HostSpec()), ColocatedPolicy()).records
    busy = simulate(two, cluster({"both": 2}, host), ColocatedPolicy()).records
    assert [r.tpot_s for r in busy] == pytest.approx([r.tpot_s for r in alone], rel=1e-9)


def test_a_prefill_beside_streams_and_its_request_path_take_the_load_factor_longer():
    # r0 streams on one engine; r1's prompt arrives at the other while it does.
    work = Workload("w", (RequestSpec("r0", 0.0, 256, 64), RequestSpec("r1", 0.05, 1024, 4)))
    path = RequestPathSpec(colocated_s=0.01)
    idle = replace(cluster({"both": 2}, HostSpec(num_cores=2)), request_path=path)
    loaded = replace(cluster({"both": 2}, HostSpec(num_cores=2, load_stretch=((1, 1.5), (2, 2.0)))),
                     request_path=path)
    base = {r.request_id: r for r in simulate(work, idle, ColocatedPolicy()).records}
    slow = {r.request_id: r for r in simulate(work, loaded, ColocatedPolicy()).records}
    assert slow["r1"].decode_worker != slow["r0"].decode_worker
    # r0 started on an idle host and its decode steps are not prefills: unchanged.
    assert slow["r0"].ttft_s == pytest.approx(base["r0"].ttft_s, rel=1e-9)
    assert slow["r0"].tpot_s == pytest.approx(base["r0"].tpot_s, rel=1e-9)
    # r1's path and its prompt's one step, each beside one stream: 1.5 times as long.
    assert slow["r1"].ttft_s == pytest.approx(1.5 * base["r1"].ttft_s, rel=1e-9)
    assert base["r1"].ttft_s == pytest.approx(0.01 + MODEL.predict(1024, 0, []), rel=1e-9)


def test_a_request_on_a_loaded_host_takes_the_path_measured_beside_its_streams():
    work = Workload("w", (RequestSpec("r0", 0.0, 256, 64), RequestSpec("r1", 0.05, 1024, 4)))
    path = RequestPathSpec(colocated_s=0.01)
    host = HostSpec(num_cores=2, load_stretch=((1, 1.5), (2, 2.0)), path_beside_streams=((0, 0.004), (1, 0.03)))
    stretched = replace(cluster({"both": 2}, replace(host, path_beside_streams=())), request_path=path)
    measured = replace(cluster({"both": 2}, host), request_path=path)
    base = {r.request_id: r for r in simulate(work, stretched, ColocatedPolicy()).records}
    read = {r.request_id: r for r in simulate(work, measured, ColocatedPolicy()).records}
    # r0 came to an idle host: the path at no streams, 4 ms, not the idle deployment's 10.
    assert read["r0"].ttft_s == pytest.approx(base["r0"].ttft_s - 0.006, rel=1e-9)
    # r1 came beside r0's stream: 30 ms, where the prefill's factor made 15 ms of it.
    assert read["r1"].ttft_s == pytest.approx(base["r1"].ttft_s + 0.015, rel=1e-9)


# ---- its measurement and its config ----------------------------------------------------------------

def streamed(rid: str, worker: str, prompt: int, times: list[float]) -> RequestRecord:
    return RequestRecord(rid, prompt, len(times), times[0] - 0.05, first_token_s=times[0], finish_s=times[-1],
                         token_times=list(times), decode_worker=worker)


def test_the_step_excess_counts_each_gaps_batch_on_its_own_worker():
    # Step model: 4 ms per running request. a and b share worker w; c is alone on v.
    a = streamed("a", "w", 100, [1.000, 1.010, 1.020, 1.030])
    b = streamed("b", "w", 100, [1.005, 1.015, 1.025])
    c = streamed("c", "v", 100, [1.000, 1.005, 1.010])
    seen = []

    def step(contexts):
        seen.append(list(contexts))
        return 0.004 * len(contexts)
    # Two on w: a's first two gaps and b's two, 10 - 8 ms; alone: a's last (10 - 4) and c's
    # two (5 - 4): median 1 ms.
    assert step_excess_by_batch([a, b, c], step) == pytest.approx({1: 0.001, 2: 0.002})
    assert [102, 101] in seen  # at b's 1.015: a had 2 tokens, b 1 (context = prompt + tokens so far)
    assert step_excess_by_batch([streamed("d", "w", 10, [1.0])], step) == {}


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
                                "host": {"num_cores": 2, "cpu_s_per_token": 0.004},
                                "policies": {"colocated": {"workers": {"both": 1}}}})
    assert build_cluster(cfg, "colocated").host == HostSpec(2, 0.004)
    measured = sim_config_from_dict({"model": "llama-3-8b", "hardware": "a100",
                                     "host": {"num_cores": 2, "step_excess_1_s": -0.0002,
                                              "step_excess_2_s": 0.0001},
                                     "policies": {"colocated": {"workers": {"both": 1}}}})
    assert build_cluster(measured, "colocated").host == HostSpec(2, 0.0, -0.0002, 0.0001)
    lone = sim_config_from_dict({"model": "llama-3-8b", "hardware": "a100",
                                 "host": {"num_cores": 2, "step_excess_1_s": 0.003, "step_excess_2_s": 0.004,
                                          "step_excess_alone_s": 0.0005},
                                 "policies": {"colocated": {"workers": {"both": 1}}}})
    assert build_cluster(lone, "colocated").host == HostSpec(2, 0.0, 0.003, 0.004, 0.0005)
    together = {"overhead_s": 0.003, "s_per_linear_flop": 1e-12, "s_per_attention_flop": 2e-12,
                "s_per_kv_byte": 0.0}
    beside = sim_config_from_dict({"model": "llama-3-8b", "hardware": "a100",
                                   "host": {"num_cores": 2, "neighbour": together},
                                   "policies": {"colocated": {"workers": {"both": 1}}}})
    assert build_cluster(beside, "colocated").host == HostSpec(2, neighbour_coefficients=(0.003, 1e-12, 2e-12, 0.0))
    with pytest.raises(SimConfigError, match="host.neighbour.s_per_kv_byte"):
        sim_config_from_dict({"model": "llama-3-8b", "hardware": "a100",
                              "host": {"num_cores": 2, "neighbour": {**together, "s_per_kv_byte": None}},
                              "policies": {"colocated": {"workers": {"both": 1}}}})
    loaded = sim_config_from_dict({"model": "llama-3-8b", "hardware": "a100",
                                   "host": {"num_cores": 2, "load_stretch": [[2, 1.4], [4, 1.6]]},
                                   "policies": {"colocated": {"workers": {"both": 1}}}})
    assert build_cluster(loaded, "colocated").host == HostSpec(2, load_stretch=((2, 1.4), (4, 1.6)))
    with pytest.raises(SimConfigError, match="load_stretch"):
        sim_config_from_dict({"model": "llama-3-8b", "hardware": "a100",
                              "host": {"num_cores": 2, "load_stretch": [[4, 1.4], [2, 1.6]]},
                              "policies": {"colocated": {"workers": {"both": 1}}}})
    with pytest.raises(SimConfigError, match="host.cores"):
        sim_config_from_dict({"host": {"cores": 2}, "policies": {"colocated": {"workers": {"both": 1}}}})


def test_the_simulated_router_learns_the_hosts_load_and_prices_prefills_by_it():
    # r0 streams throughout; a 1,024-token prompt arrives every 0.2 s beside it, each alone with
    # it, so each runs 1.5 times as long as calibrated. The router learns it as live does.
    from bench.simulator.simulator import Simulator
    prompts = tuple(RequestSpec(f"p{i}", 0.1 + 0.2 * i, 1024, 1) for i in range(30))
    work = Workload("w", (RequestSpec("r0", 0.0, 256, 2000),) + prompts)
    loaded = cluster({"both": 2}, HostSpec(num_cores=2, load_stretch=((1, 1.5), (2, 2.0))))
    sim = Simulator(loaded, ColocatedPolicy())
    records = {r.request_id: r for r in sim.run(work).records}
    first, last = records["p0"], records["p29"]
    assert first.ttft_s / first.predicted_ttft_s == pytest.approx(1.5, rel=0.02)  # priced as on an idle host
    assert last.ttft_s / last.predicted_ttft_s == pytest.approx(1.0, rel=0.05)
    assert sim.router.feedback.factor_at(1) == pytest.approx(1.5, rel=0.05)


def test_further_streams_follow_the_line_through_the_loops_of_the_mix_when_measured():
    # Points at 1, 3 and 5 streams, the one at 5 low (a noisy loop; joined, the growth would stop
    # at 3): the least-squares line through (1, 2), (3, 4), (5, 4) ms rises 0.5 ms a stream.
    host = HostSpec(num_cores=2, step_excess_1_s=0.001, step_excess_2_s=0.002, step_excess_alone_s=0.0005,
                    step_excess_batch=((4, 0.003), (8, 0.005)),
                    step_excess_mix=((1, 0.002), (3, 0.004), (5, 0.004)))
    busy = 2
    assert host.step_delay_s(busy, 1) == pytest.approx(0.001)  # the first stream's excess is e1 still
    assert host.step_delay_s(busy, 3) == pytest.approx(0.001 + 2 * 0.0005)  # the batch points unused
    assert host.step_delay_s(busy, 10) == pytest.approx(0.001 + 9 * 0.0005)  # on along the line
    assert host.step_delay_s(1, 4) == pytest.approx(0.0005 + 3 * 0.0005)  # alone: the lone stream's, plus the growth
    # A line falling with the batch is noise: the further streams add nothing.
    falling = HostSpec(num_cores=2, step_excess_1_s=0.001, step_excess_2_s=0.002,
                       step_excess_mix=((1, 0.003), (4, 0.001)))
    assert falling.step_delay_s(busy, 5) == pytest.approx(0.001)
    for points in (((2, 0.003), (4, 0.006)), ((1, 0.002),), ((1, 0.002), (1, 0.003))):
        with pytest.raises(ValueError, match="step_excess_mix"):
            HostSpec(num_cores=2, step_excess_mix=points)

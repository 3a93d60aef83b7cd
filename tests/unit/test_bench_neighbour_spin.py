"""vLLM's spin window on a shared CPU host: an engine's processes poll for a second after each
step, so a lone stream's decode steps take the excess measured with the other engines inside
that window, or the one with them idle past it (bench.neighbour_spin measures both;
bench.simulator.host's spin form uses them)."""
from __future__ import annotations

import pytest

from bench.metrics import RequestRecord
from bench.neighbour_spin import lone_excess_by_neighbour
from bench.simulator import simulate
from bench.simulator.config import build_cluster, sim_config_from_dict
from bench.simulator.host import SPIN_WINDOW_S, HostSpec
from bench.workloads import RequestSpec, Workload
from schedulers.policies import DisaggregatedPolicy

from .sim_clusters import cluster


def rec(rid, arrival, tokens, decode, prefill=None, prompt=100):
    return RequestRecord(rid, prompt, len(tokens), arrival, first_token_s=tokens[0], finish_s=tokens[-1],
                         token_times=list(tokens), ok=True, prefill_worker=prefill, decode_worker=decode)


def steady(start, gap, count):
    return [start + i * gap for i in range(count)]


# ---- the host model --------------------------------------------------------------------------

def test_a_lone_step_takes_the_spin_or_the_quiet_excess_by_its_neighbours_window():
    host = HostSpec(num_cores=2, step_excess_1_s=0.003, step_excess_2_s=0.004, step_excess_alone_s=0.002,
                    step_excess_quiet_s=0.001, step_excess_spin_s=0.0025)
    assert host.step_delay_s(1, 1, 0.01, neighbour_spinning=False) == pytest.approx(0.001)
    assert host.step_delay_s(1, 1, 0.01, neighbour_spinning=True) == pytest.approx(0.0025)
    assert host.step_delay_s(1, 3, 0.01, neighbour_spinning=True) == pytest.approx(0.0025 + 2 * 0.001)
    # Another engine computing: the one-stream-per-engine excess, spinning or not.
    assert host.step_delay_s(2, 1, 0.01, neighbour_spinning=True) == pytest.approx(0.003)
    # One of the two not measured: the lone stream's excess stands in for it.
    half = HostSpec(num_cores=2, step_excess_1_s=0.003, step_excess_2_s=0.004, step_excess_alone_s=0.002,
                    step_excess_spin_s=0.0025)
    assert half.step_delay_s(1, 1, 0.01, neighbour_spinning=False) == pytest.approx(0.002)
    assert half.step_delay_s(1, 1, 0.01, neighbour_spinning=True) == pytest.approx(0.0025)


def test_a_config_takes_both_lone_excesses():
    spec = sim_config_from_dict({"name": "t", "model": "llama-3-8b", "hardware": "a100",
                                 "host": {"num_cores": 2, "step_excess_1_s": 0.003, "step_excess_2_s": 0.004,
                                          "step_excess_quiet_s": 0.001, "step_excess_spin_s": 0.0025},
                                 "policies": {"c": {"policy": "colocated", "workers": {"both": 1}}}})
    host = build_cluster(spec, "c").host
    assert (host.step_excess_quiet_s, host.step_excess_spin_s) == (0.001, 0.0025)


def test_the_decode_engine_steps_slower_for_a_second_after_the_prefill_engines_last_step():
    # One disaggregated request with a long decode: its prefill engine steps once, then idles.
    # Every decode gap that starts within SPIN_WINDOW_S of that step takes the spin excess,
    # every later one the quiet excess; nothing else differs from the host without them.
    work = Workload("w", (RequestSpec("r0", 0.0, 256, 400),))
    excess = {"num_cores": 2, "step_excess_1_s": 0.0, "step_excess_2_s": 0.0, "step_excess_alone_s": 0.0}
    plain = simulate(work, cluster({"prefill": 1, "decode": 1}, HostSpec(**excess)), DisaggregatedPolicy())
    split = simulate(work, cluster({"prefill": 1, "decode": 1},
                                   HostSpec(**excess, step_excess_quiet_s=0.001, step_excess_spin_s=0.004)),
                     DisaggregatedPolicy())
    before, after = plain.records[0], split.records[0]
    prefill_end_s = before.arrival_s + (before.ttft_s or 0)  # an upper bound: the hand-over follows it
    extra = [(a, (b - a) - (q - p)) for (p, q), (a, b) in zip(zip(before.token_times, before.token_times[1:]),
                                                          zip(after.token_times, after.token_times[1:]))]
    spin = [d for a, d in extra if a < prefill_end_s + SPIN_WINDOW_S - 0.05]
    quiet = [d for a, d in extra if a > after.first_token_s + SPIN_WINDOW_S]
    assert len(spin) > 20 and len(quiet) > 20  # the decode spans both sides of the window
    assert all(d == pytest.approx(0.004, abs=1e-9) for d in spin)
    assert all(d == pytest.approx(0.001, abs=1e-9) for d in quiet)


# ---- the probe's classification ------------------------------------------------------------

def model(contexts):
    return 0.003  # 3 ms a step, whatever the context


def test_lone_gaps_are_classed_by_the_other_engines_last_activity():
    # w1 streams until 1.002; w0 then streams alone in 4 ms steps from 1.5 to 3.0, 5 ms from 3.0.
    other = rec("o", 0.9, steady(0.952, 0.01, 6), "w1")  # ends at 1.002
    lone = rec("a", 1.49, steady(1.5, 0.004, 376) + steady(3.004, 0.005, 50), "w0")
    out = lone_excess_by_neighbour([lone], [], model, others=[other])
    # Gaps starting by 2.002 (w1's last activity + 1 s) spin, the later ones are quiet.
    assert out["spin"] == {"median_s": pytest.approx(0.001), "count": 126}
    assert out["quiet"]["median_s"] == pytest.approx(0.001)  # 4 ms gaps are the majority
    assert out["quiet"]["count"] == 375 + 50 - 126
    # `others` only lend their activity: their own gaps are not classed.
    assert lone_excess_by_neighbour([other], [], model) == {"quiet": {"median_s": pytest.approx(0.007),
                                                                      "count": 5}}


def test_gaps_beside_other_work_or_a_one_token_step_or_a_second_stream_are_left_out():
    lone = rec("a", 0.99, steady(1.0, 0.004, 101), "w0")  # 1.0 to 1.4
    prefill = rec("b", 1.1, [1.2, 1.21], "w0", prefill="p0")  # p0 computes 1.1-1.2, then b streams on w0
    steps = [("w0", 1.3, 1.302), ("p0", 1.35, 1.36)]
    out = lone_excess_by_neighbour([lone, prefill], steps, model)
    total = sum(v["count"] for v in out.values())
    # a's gaps: 100. Out: 25 beside p0's prefill, 3 beside b's stream on w0 (1.2-1.21), the one
    # holding the step on w0 itself and the 3 beside p0's step (1.348-1.364). b's one gap: beside a.
    assert total == 100 - 25 - 3 - 1 - 3
    # Before p0's prefill no other worker had worked: quiet; after it, p0 is inside its window.
    assert out["quiet"]["count"] == 25 and out["spin"]["count"] == total - 25

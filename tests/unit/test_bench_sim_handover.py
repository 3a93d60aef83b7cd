"""What a streaming step loses while a disaggregated request is handed over to its engine
(bench.simulator.host, `decode_beside_handover`; measured by bench.host_load's probe), and how the
simulator charges it: from the end of the request's prefill to its first token on that engine."""
from __future__ import annotations

from dataclasses import replace

import pytest

from bench.simulator import simulate
from bench.simulator.config import SimConfigError, build_cluster, sim_config_from_dict
from bench.simulator.host import HostSpec
from bench.simulator.specs import RequestPathSpec
from bench.workloads import RequestSpec, Workload
from schedulers.policies import ColocatedPolicy, DisaggregatedPolicy

from .sim_clusters import cluster

EXTRA_S = 0.004
ROLES = {"prefill": 1, "decode": 1}


def test_the_points_are_read_as_the_prefills_are():
    host = HostSpec(num_cores=2, decode_beside_handover=((2, 0.004), (4, 0.008)))
    assert host.beside_handover_s(1) == pytest.approx(0.004)
    assert host.beside_handover_s(3) == pytest.approx(0.006)
    assert host.beside_handover_s(6) == pytest.approx(0.012)
    assert host.beside_handover_s(0) == 0.0 and host.beside_prefill_s(3) == 0.0
    assert HostSpec(num_cores=2, decode_beside_handover=((1, -0.002),)).beside_handover_s(1) == 0.0


def test_bad_points_are_refused_and_a_config_takes_them():
    with pytest.raises(ValueError, match="decode_beside_handover"):
        HostSpec(num_cores=2, decode_beside_handover=((2, 0.004), (1, 0.003)))
    config = {"model": "llama-3-8b", "hardware": "a100",
              "policies": {"disaggregated": {"workers": {"prefill": 1, "decode": 1}}}}
    built = build_cluster(sim_config_from_dict({**config, "host": {"num_cores": 2,
                                                                   "decode_beside_handover": [[1, 0.004]]}}),
                          "disaggregated")
    assert built.host.decode_beside_handover == ((1, 0.004),)
    with pytest.raises(SimConfigError, match="decode_beside_handover"):
        sim_config_from_dict({**config, "host": {"num_cores": 2, "decode_beside_handover": [[0, 0.004]]}})


def gaps(times: list[float]) -> list[tuple[float, float]]:
    """(start, length) of each gap between two tokens."""
    return [(a, b - a) for a, b in zip(times, times[1:])]


def run(host: HostSpec):
    # r0 streams on the decode engine while r1 is prefilled, then handed over (50 ms of path).
    # (r0 was handed over too: its own first step there is charged, before r1's prefill ends.)
    work = Workload("w", (RequestSpec("r0", 0.0, 64, 300), RequestSpec("r1", 0.05, 2000, 2)))
    spec = replace(cluster(ROLES, host), request_path=RequestPathSpec(0.0, 0.05))
    return simulate(work, spec, DisaggregatedPolicy())


def test_a_decode_step_while_a_request_is_handed_over_takes_the_measured_extra():
    plain = run(HostSpec(num_cores=2))
    charged = run(HostSpec(num_cores=2, decode_beside_handover=((1, EXTRA_S),)))
    r0_plain, r1_plain = plain.records
    r0, r1 = charged.records
    assert r1.prefill_worker == "prefill-0" and r0.decode_worker == "decode-0"
    start, end = charged.prompt_prefilled_s["r1"], r1.first_token_s
    assert plain.prompt_prefilled_s["r1"] == pytest.approx(start)  # nothing before the hand-over moved
    # Up to the hand-over the gaps are the same; through it each is longer by the extra.
    before = [g for s, g in gaps(r0.token_times) if s < start]
    assert before == pytest.approx([g for s, g in gaps(r0_plain.token_times) if s < start])
    during = [g for s, g in gaps(r0.token_times) if start <= s < end - 1e-9]
    plain_step = gaps(r0_plain.token_times)[1][1]
    assert len(during) >= 3
    assert during[:-1] == pytest.approx([plain_step + EXTRA_S] * (len(during) - 1), rel=1e-3)
    # The last is the step that gave r1 its first token: r1's first step there, charged too.
    joined = max(g for _, g in gaps(r0_plain.token_times))
    assert during[-1] == pytest.approx(joined + EXTRA_S, rel=1e-3)
    # r1's own first token waits for the longer steps.
    assert r1.first_token_s > r1_plain.first_token_s


def test_a_colocated_deployment_hands_nothing_over_and_pays_nothing():
    work = Workload("w", (RequestSpec("r0", 0.0, 64, 100), RequestSpec("r1", 0.05, 8000, 2)))
    plain = simulate(work, cluster({"both": 2}, HostSpec(num_cores=2)), ColocatedPolicy()).records
    charged = simulate(work, cluster({"both": 2}, HostSpec(num_cores=2, decode_beside_handover=((1, EXTRA_S),))),
                       ColocatedPolicy()).records
    assert [r.token_times for r in plain] == [r.token_times for r in charged]

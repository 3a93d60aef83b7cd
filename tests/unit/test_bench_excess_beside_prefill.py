"""The lone stream's excess beside another engine's prefill step: read off the probe steps
(bench.step_scatter.excess_beside_prefill), priced by the host (step_excess_beside_prefill_s)
where every other engine at work prefills and none is prefill-only."""
from __future__ import annotations

from dataclasses import replace

import pytest

from bench.simulator import simulate
from bench.simulator.host import HostSpec
from bench.step_scatter import EXCESS_GROUP, EXCESS_KEY, MIN_GROUP_STEPS, excess_beside_prefill, probe_steps, probes_host
from bench.workloads import RequestSpec, Workload
from schedulers.policies.colocated import ColocatedPolicy
from schedulers.policies.disaggregated import DisaggregatedPolicy

from .sim_clusters import MODEL, cluster

HOST = HostSpec(num_cores=2, step_excess_1_s=0.003, step_excess_2_s=0.004, step_excess_alone_s=0.002)


def test_the_host_prices_a_step_beside_prefills_only_with_another_engine_at_work():
    host = replace(HOST, step_excess_beside_prefill_s=0.0005)
    assert host.step_delay_s(2, 1, 0.01, beside_prefill=True) == pytest.approx(0.0005)
    assert host.step_delay_s(2, 3, 0.01, beside_prefill=True) == pytest.approx(0.0005 + 2 * 0.001)
    assert host.step_delay_s(2, 1, 0.01) == pytest.approx(0.003)  # beside a decode step: the bursts' excess
    assert host.step_delay_s(1, 1, 0.01, beside_prefill=True) == pytest.approx(0.002)  # alone: the lone excess
    assert HOST.step_delay_s(2, 1, 0.01, beside_prefill=True) == pytest.approx(0.003)  # not measured: as before


def _two_requests() -> Workload:
    # a short prompt that streams long, then a long prompt that prefills on the other engine meanwhile
    return Workload("w", (RequestSpec("streams", 0.0, 64, 400), RequestSpec("long", 0.05, 8000, 2)))


def test_a_decode_step_beside_another_engines_prefill_takes_the_excess_measured_there():
    def streams_tpot(host: HostSpec, roles: dict[str, int], policy) -> float:
        result = simulate(_two_requests(), cluster(roles, host), policy)
        return next(r for r in result.records if r.request_id == "streams").tpot_s

    both = {"both": 2}
    plain = streams_tpot(HOST, both, ColocatedPolicy())
    assert streams_tpot(replace(HOST, step_excess_beside_prefill_s=0.003), both, ColocatedPolicy()) == \
        pytest.approx(plain, rel=1e-12)  # the bursts' own figure: nothing moves
    assert streams_tpot(replace(HOST, step_excess_beside_prefill_s=0.0), both, ColocatedPolicy()) < plain
    # beside a prefill-only engine the host prices its prefill apart (decode_beside_prefill): unchanged
    split = {"prefill": 1, "decode": 1}
    assert streams_tpot(replace(HOST, step_excess_beside_prefill_s=0.0), split, DisaggregatedPolicy()) == \
        pytest.approx(streams_tpot(HOST, split, DisaggregatedPolicy()), rel=1e-12)


def _step(worker: str, role: str, t: float, elapsed_s: float, prefill: int, decodes: int) -> dict:
    return {"worker": worker, "role": role, "t": t, "elapsed_s": elapsed_s, "num_prefill_tokens": prefill,
            "num_decode_reqs": decodes}


def _beside_a_prefill(roles: tuple[str, str], excess_s: float, count: int) -> list[dict]:
    """Engine a's one-stream decode steps, back to back, each `excess_s` over its model, while
    engine b runs one long prefill step across them all."""
    step_s = MODEL.predict(0, 0, [256]) + excess_s
    steps = [_step("a", roles[0], 100.0 + step_s * (i + 1), step_s, 0, 1) for i in range(count)]
    return steps + [_step("b", roles[1], 100.0 + step_s * count + 0.1, step_s * count + 0.2, 4096, 0)]


def test_the_probe_steps_give_the_excess_of_a_lone_stream_beside_a_prefill_where_every_engine_has_both_roles():
    probes = probe_steps(_beside_a_prefill(("both", "both"), 0.0015, 30), [(99.0, 102.0)], MODEL)
    assert len(probes.groups[EXCESS_GROUP]) == 30
    assert probes.excess_beside_prefill_s == pytest.approx([0.0015] * 30, abs=1e-9)
    assert probes_host(probes)[EXCESS_KEY] == pytest.approx(0.0015, abs=1e-9)
    # hybrid: its engine that streams prefills beside a prefill-only engine, priced apart
    hybrid = probe_steps(_beside_a_prefill(("both", "prefill"), 0.0015, 30), [(99.0, 102.0)], MODEL)
    assert hybrid.excess_beside_prefill_s == [] and EXCESS_KEY not in probes_host(hybrid)
    # too few steps for a median
    few = probe_steps(_beside_a_prefill(("both", "both"), 0.0015, MIN_GROUP_STEPS - 1), [(99.0, 102.0)], MODEL)
    assert EXCESS_KEY not in probes_host(few)
    assert excess_beside_prefill([0.001, 0.002, 0.009], min_steps=3) == pytest.approx(0.002)

"""The own-streams stretch rule (bench.simulator.host): on hybrid's engine that streams, a prefill
takes the load probe's stretch for its own streams, whether or not the prefill-only engine computes
beside it; elsewhere it is the decode-neighbour rule."""
from __future__ import annotations

from dataclasses import replace

import pytest

from bench.simulator import simulate
from bench.simulator.host import HostSpec
from bench.workloads import RequestSpec, Workload
from schedulers.policies import ColocatedPolicy, LengthThresholdPolicy

from .sim_clusters import MODEL, cluster

POINTS = HostSpec(num_cores=2, load_stretch=((1, 1.2),), load_stretch_beside=((1, 2.0),))
STREAMING = (RequestSpec("r0", 0.0, 64, 400), RequestSpec("r2", 0.02, 1000, 2))  # r2 prefills beside r0's stream


def _hybrid(host: HostSpec, workload: Workload):
    return simulate(workload, cluster({"prefill": 1, "both": 1}, host), LengthThresholdPolicy(threshold_tokens=1024))


def _ttft(result, request_id: str) -> float:
    return {r.request_id: r for r in result.records}[request_id].ttft_s


def test_on_hybrids_streaming_engine_a_prefill_takes_its_own_streams_stretch_beside_a_busy_prefill_engine():
    # r1's long prompt goes to the prefill-only engine and computes through r2's step.
    work = Workload("w", (*STREAMING, RequestSpec("r1", 0.01, 8000, 2)))
    own = _hybrid(replace(POINTS, stretch_rule="own-streams"), work)
    neighbour = _hybrid(replace(POINTS, stretch_rule="decode-neighbour"), work)
    everywhere = _hybrid(HostSpec(num_cores=2, load_stretch=((1, 1.2),), load_stretch_beside=((1, 1.2),)), work)
    assert {r.request_id: r.decode_worker for r in own.records}["r2"] == "both-0"
    assert own.prompt_prefilled_s["r1"] > {r.request_id: r for r in own.records}["r2"].first_token_s
    # x1.2 (its streams) where decode-neighbour gives the prefill-only engine's x2.0
    assert _ttft(own, "r2") == pytest.approx(_ttft(everywhere, "r2"), rel=1e-9)
    assert _ttft(own, "r2") < _ttft(neighbour, "r2")


def test_on_hybrids_streaming_engine_a_prefill_takes_its_own_streams_stretch_with_the_prefill_engine_idle():
    work = Workload("w", STREAMING)
    own = _hybrid(replace(POINTS, stretch_rule="own-streams"), work)
    neighbour = _hybrid(replace(POINTS, stretch_rule="decode-neighbour"), work)
    idle = _hybrid(HostSpec(num_cores=2), work)
    assert _ttft(neighbour, "r2") == pytest.approx(_ttft(idle, "r2"), rel=1e-9)  # nothing beside it
    prefill_s = MODEL.predict(1000, 0, [])
    assert _ttft(own, "r2") - _ttft(idle, "r2") == pytest.approx(0.2 * prefill_s, rel=0.05)


def test_with_another_engine_that_streams_own_streams_is_the_decode_neighbour_rule():
    # colocated's two engines: r1's prefill on one beside r0's stream on the other
    work = Workload("w", (RequestSpec("r0", 0.0, 128, 24), RequestSpec("r1", 0.02, 8000, 2),
                          RequestSpec("r3", 0.03, 64, 8)))

    def served(rule: str):
        return simulate(work, cluster({"both": 2}, replace(POINTS, stretch_rule=rule)), ColocatedPolicy()).records
    assert [r.ttft_s for r in served("own-streams")] == pytest.approx([r.ttft_s for r in served("decode-neighbour")],
                                                                      rel=1e-12)

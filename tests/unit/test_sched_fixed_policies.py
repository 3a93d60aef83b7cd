"""The colocated and disaggregated policies: who is chosen, and when nobody can be."""
from __future__ import annotations

import pytest

from schedulers.policies import ColocatedPolicy, DisaggregatedPolicy
from schedulers.types import ClusterView, NoCandidateError, RequestInfo, WorkerView

REQUEST = RequestInfo("r1", num_prompt_tokens=2000, max_tokens=16)


def view(*workers: WorkerView) -> ClusterView:
    return ClusterView(tuple(workers))


def test_colocated_picks_the_least_loaded_both_worker():
    decision = ColocatedPolicy().decide(REQUEST, view(
        WorkerView("b1", "both", num_inflight=3), WorkerView("b2", "both", num_inflight=1),
        WorkerView("d1", "decode")))
    assert (decision.route, decision.decode_worker, decision.prefill_worker) == ("colocated", "b2", None)


def test_colocated_falls_back_to_a_decode_worker_that_prefills_locally():
    decision = ColocatedPolicy().decide(REQUEST, view(
        WorkerView("p1", "prefill"), WorkerView("d1", "decode", num_inflight=2),
        WorkerView("d2", "decode", num_inflight=1), WorkerView("b1", "both", is_healthy=False)))
    assert decision.decode_worker == "d2"
    assert "prefills locally" in decision.reason


def test_colocated_without_decode_capable_workers_raises():
    with pytest.raises(NoCandidateError):
        ColocatedPolicy().decide(REQUEST, view(WorkerView("p1", "prefill")))


def test_load_breaks_ties_by_engine_counts_then_kv_usage():
    decision = ColocatedPolicy().decide(REQUEST, view(
        WorkerView("b1", "both", num_inflight=1, num_running=4),
        WorkerView("b2", "both", num_inflight=1, num_running=2, num_waiting=1, kv_cache_usage=0.9),
        WorkerView("b3", "both", num_inflight=1, num_running=3, kv_cache_usage=0.1)))
    assert decision.decode_worker == "b3"  # 3 running+waiting ties b2, lower KV usage


def test_disaggregated_prefers_dedicated_roles():
    decision = DisaggregatedPolicy().decide(REQUEST, view(
        WorkerView("b1", "both"), WorkerView("p1", "prefill", num_inflight=5),
        WorkerView("d1", "decode", num_inflight=5)))
    assert (decision.route, decision.prefill_worker, decision.decode_worker) == ("disaggregated", "p1", "d1")


def test_disaggregated_picks_least_loaded_of_each_role():
    decision = DisaggregatedPolicy().decide(REQUEST, view(
        WorkerView("p1", "prefill", num_inflight=2), WorkerView("p2", "prefill", num_inflight=0),
        WorkerView("d1", "decode", num_inflight=0), WorkerView("d2", "decode", num_inflight=4)))
    assert (decision.prefill_worker, decision.decode_worker) == ("p2", "d1")


def test_disaggregated_never_uses_one_worker_for_both_halves():
    decision = DisaggregatedPolicy().decide(REQUEST, view(
        WorkerView("b1", "both"), WorkerView("b2", "both", num_inflight=3)))
    assert {decision.prefill_worker, decision.decode_worker} == {"b1", "b2"}
    assert decision.prefill_worker == "b1"  # less loaded gets the prefill, the other decodes


def test_disaggregated_with_a_single_both_worker_raises():
    with pytest.raises(NoCandidateError):
        DisaggregatedPolicy().decide(REQUEST, view(WorkerView("b1", "both")))


def test_disaggregated_ignores_unhealthy_workers():
    with pytest.raises(NoCandidateError):
        DisaggregatedPolicy().decide(REQUEST, view(
            WorkerView("p1", "prefill"), WorkerView("d1", "decode", is_healthy=False)))

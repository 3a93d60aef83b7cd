"""The simulated router takes a prompt back from a stalled prefill worker as the live one does
(bench.simulator.router, pd_serve.router.Router._prefill_stalled): only under the adaptive policy,
once the prompt has waited its TTFT SLO, and the engine frees what it held."""
from __future__ import annotations

import pytest

from bench.simulator.engine_request import EngineRequest, Phase
from bench.simulator.host import HostSpec
from bench.simulator.router import GIVE_UP_CHECK_S, give_up_check_s
from bench.simulator.simulator import Simulator
from bench.simulator.specs import EngineSpec, WorkerSpec
from bench.simulator.step_cost import StepCost
from bench.simulator.worker import PREFILL_DONE, SimWorker
from bench.workloads import RequestSpec, Workload
from schedulers.policies import AdaptivePolicy, DisaggregatedPolicy
from schedulers.slo import SloTable

from .sim_clusters import MODEL, cluster

STALL_S = 5.0
# Long prompts close together: with decodes running on the both-engine, the adaptive policy
# sends most of them to the prefill-only engine.
PROMPTS = Workload("prompts", tuple(RequestSpec(f"r{i}", 0.05 * i, 4000, 40) for i in range(12)))
HYBRID = cluster({"prefill": 1, "both": 1}, HostSpec())


class FirstPrefillOnlyStepStalls(Simulator):
    """The prefill-only engine's first step stalls for STALL_S; nothing else does."""

    def _stall_s(self, plan) -> float:
        if self.num_stalls or not any(r.is_prefill_only for r in plan.num_new_tokens):
            return 0.0
        self.num_stalls += 1
        return STALL_S


def test_a_prompt_waiting_out_its_slo_on_a_stalled_prefill_worker_is_prefilled_on_its_decode_worker():
    policy = AdaptivePolicy(MODEL, chunk_tokens=8192)
    plain = Simulator(HYBRID, policy).run(PROMPTS)
    assert plain.num_taken_back == 0 and not any(r.fallback for r in plain.records)
    sent_there = {r.request_id for r in plain.records if r.route == "disaggregated"}
    assert len(sent_there) >= 6

    result = FirstPrefillOnlyStepStalls(HYBRID, AdaptivePolicy(MODEL, chunk_tokens=8192)).run(PROMPTS)
    taken = [r for r in result.records if r.fallback]
    assert result.num_stalls == 1 and result.num_worker_stalls >= 1
    assert len(taken) == result.num_taken_back >= 2
    slo_s = SloTable().ttft_slo_s(4000)
    for r in taken:
        assert r.route == "colocated" and r.prefill_worker is None and r.decode_worker == "both-0"
        assert "prefill worker prefill-0 stalled" in r.fallback
        assert slo_s < r.ttft_s < STALL_S  # waited its SLO at least, not the stall out
        assert r.kv_transfer_bytes == 0 and len(r.token_times) == r.output_tokens
    assert all(r.ok for r in result.records) and result.num_leaked_blocks == 0


def test_other_policies_wait_the_stall_out():
    result = FirstPrefillOnlyStepStalls(HYBRID, DisaggregatedPolicy()).run(PROMPTS)
    assert result.num_stalls == 1 and result.num_taken_back == 0
    first = result.records[0]
    assert first.route == "disaggregated" and first.ttft_s > STALL_S
    assert result.num_leaked_blocks == 0


def test_a_stall_over_before_the_slo_takes_nothing_back():
    class OneSecondStall(FirstPrefillOnlyStepStalls):
        def _stall_s(self, plan) -> float:
            return super()._stall_s(plan) / STALL_S

    lax = SloTable(ttft_buckets=((None, 3.0),))  # the SLO outlasts the stall
    result = OneSecondStall(HYBRID, AdaptivePolicy(MODEL, chunk_tokens=8192, slo_table=lax)).run(PROMPTS)
    first = next(r for r in result.records if r.route == "disaggregated")
    assert result.num_stalls == 1
    assert result.num_taken_back == 0 and not any(r.fallback for r in result.records)
    assert first.ttft_s > 1.0  # it waited the stall out


def test_the_checks_fall_on_the_live_routers_poll():
    assert give_up_check_s(1.0, 1.2) == pytest.approx(1.2)
    assert give_up_check_s(1.0, 1.21) == pytest.approx(1.25)
    assert give_up_check_s(1.0, 1.0) == pytest.approx(1.0)
    assert GIVE_UP_CHECK_S == 0.05


def _worker() -> SimWorker:
    engine = EngineSpec(num_kv_blocks=400, max_model_len=4096, max_num_batched_tokens=256)
    return SimWorker(WorkerSpec("p", "prefill", engine), StepCost.of(MODEL))


def test_an_aborted_prompt_leaves_the_queue_and_frees_its_blocks():
    worker = _worker()
    first, second, third = (EngineRequest(None, 512, 1, is_prefill_only=True) for _ in range(3))
    for r in (first, second, third):
        worker.add(r)
    worker.start(worker.schedule())  # the first prompt's first chunk: 256 of its 512 tokens
    assert worker.abort(third) and third not in worker.waiting and third.phase == Phase.FINISHED
    # In the step in flight: dropped when it ends, with nothing given back for it.
    assert worker.abort(first) and first.phase == Phase.RUNNING
    assert worker.complete() == [] and first.phase == Phase.FINISHED and worker.pool.num_used == 0
    worker.start(worker.schedule())
    assert worker.complete() == [] and worker.running == [second]  # its first chunk
    assert worker.pool.num_used > 0
    assert worker.abort(second) and worker.running == [] and worker.pool.num_used == 0  # between steps
    assert not worker.abort(EngineRequest(None, 64, 1))  # never reached this worker
    fresh = EngineRequest(None, 64, 1, is_prefill_only=True)
    worker.add(fresh)
    worker.start(worker.schedule())
    assert worker.complete() == [(PREFILL_DONE, fresh)]

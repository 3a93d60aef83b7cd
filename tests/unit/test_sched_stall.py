"""A worker silent while requests stream from it: its stall waits in every prediction."""
from __future__ import annotations

import pytest

from schedulers.hardware import HARDWARE_SPECS
from schedulers.model_spec import MODEL_SPECS
from schedulers.policies import AdaptivePolicy
from schedulers.route_prediction import RoutePredictor
from schedulers.prefill_queues import PrefillQueues
from schedulers.stall import STALL_TOLERANCE, stall_s, take_back_reason, worker_silence
from schedulers.step_time import StepTimeModel
from schedulers.types import ClusterView, LinkEstimate, RequestInfo, WorkerView

MODEL = StepTimeModel.from_roofline(MODEL_SPECS["llama-3-8b"], HARDWARE_SPECS["a100"])


def test_a_silence_within_the_tolerance_is_no_stall():
    assert stall_s(0.5, 0.3) == 0.0  # under 2 x 0.3
    assert stall_s(0.6, 0.3) == 0.0
    assert stall_s(1.0, 0.3) == pytest.approx(1.0 - STALL_TOLERANCE * 0.3)
    assert stall_s(1.0, 0.3, tolerance=1.0) == pytest.approx(0.7)


@pytest.mark.parametrize("args", [(-0.1, 0.3), (0.1, -0.3), (0.1, 0.3, 0.5)])
def test_bad_inputs_are_refused(args):
    with pytest.raises(ValueError):
        stall_s(*args)


def test_a_worker_view_refuses_a_negative_stall():
    with pytest.raises(ValueError, match="stall_s"):
        WorkerView("w", "both", stall_s=-1.0)


def test_the_stall_adds_to_the_queue_of_every_route_through_the_worker():
    predictor = RoutePredictor(MODEL)
    request = RequestInfo("r", 512, 16)
    calm, stuck = WorkerView("b", "both", num_running=2), WorkerView("b", "both", num_running=2, stall_s=1.5)
    assert predictor.queue_s(stuck) == pytest.approx(predictor.queue_s(calm) + 1.5)
    slos = (0.2, 0.1)
    assert (predictor.colocated(request, stuck, slos).ttft_s
            == pytest.approx(predictor.colocated(request, calm, slos).ttft_s + 1.5))
    # As a decode worker: the loaded request waits for the stalled worker's first step.
    prefill, link = WorkerView("p", "prefill"), LinkEstimate(0.001, 25e9)
    part = predictor.prefill_on(request, prefill)
    kv = MODEL.kv.bytes_for_tokens(512)
    late = predictor.disaggregated(request, prefill, stuck, part, link, kv, slos)
    on_time = predictor.disaggregated(request, prefill, calm, part, link, kv, slos)
    assert late.decode_wait_s > 1.0 and late.ttft_s > on_time.ttft_s + 1.0


def test_a_workers_silence_counts_from_its_last_output_or_its_oldest_prompt():
    predictor, queues = RoutePredictor(MODEL, chunk_tokens=2048), PrefillQueues()
    kw = dict(queues=queues, predictor=predictor, speed_factor=1.0, path_s=0.02)
    assert worker_silence("p", 5.0, num_decodes=0, streaming=False, last_output_s=None, **kw) is None
    # Streaming: since its last token, against its longest step.
    quiet = worker_silence("d", 5.0, num_decodes=3, streaming=True, last_output_s=4.0, **kw)
    assert quiet.silent_s == pytest.approx(1.0) and quiet.awaited == "token"
    assert quiet.longest_wait_s == pytest.approx(predictor.longest_step_s(3))
    with pytest.raises(ValueError, match="last output"):
        worker_silence("d", 5.0, num_decodes=3, streaming=True, last_output_s=None, **kw)
    # Prompts only: since the oldest was sent (or the last output, if later), against the steps
    # that prefill it and the prompts sent by then (and the path), not those sent after.
    queues.sent("p", "a", 1000, 2.0)
    queues.sent("p", "b", 500, 2.01)
    queues.sent("p", "c", 3000, 3.0)
    quiet = worker_silence("p", 5.0, num_decodes=0, streaming=False, last_output_s=None, **kw)
    assert quiet.silent_s == pytest.approx(3.0) and quiet.awaited == "prefilled prompt"
    assert quiet.longest_wait_s == pytest.approx(predictor.prefill_queue_s(1500, 0) + 0.02)
    assert quiet.stall_s() == pytest.approx(stall_s(3.0, quiet.longest_wait_s)) and quiet.stall_s() > 0
    later = worker_silence("p", 5.0, num_decodes=0, streaming=False, last_output_s=2.99, **kw)
    assert later.silent_s == pytest.approx(2.01)
    assert later.longest_wait_s == pytest.approx(predictor.prefill_queue_s(4500, 0) + 0.02)


def test_the_longest_step_is_a_full_budget_beside_the_decodes():
    predictor = RoutePredictor(MODEL, chunk_tokens=2048)
    assert predictor.longest_step_s(4) == pytest.approx(MODEL.predict(2048, 0, [1024] * 4))
    assert predictor.longest_step_s(4, 2.0) == pytest.approx(2 * predictor.longest_step_s(4))
    # A long prompt queued: its last chunk runs over the context before it.
    assert predictor.longest_step_s(4, 1.0, 8192) == pytest.approx(MODEL.predict(2048, 6144, [1024] * 4))
    assert predictor.longest_step_s(4, 1.0, 8192) > predictor.longest_step_s(4)


def test_the_adaptive_policy_sends_a_prompt_past_a_stalled_worker():
    # Two workers alike but for the stall: the less loaded one is stalled, and the prompt goes to
    # the other; without the stall it goes to the less loaded one.
    policy = AdaptivePolicy(MODEL)
    request = RequestInfo("r", 256, 16)
    busier = WorkerView("b0", "both", num_running=4, num_inflight=4)
    view = ClusterView((busier, WorkerView("b1", "both", num_running=1, num_inflight=1)), {})
    assert policy.decide(request, view).decode_worker == "b1"
    view = ClusterView((busier, WorkerView("b1", "both", num_running=1, num_inflight=1, stall_s=0.8)), {})
    assert policy.decide(request, view).decode_worker == "b0"


def test_the_adaptive_policy_keeps_a_prompt_off_a_stalled_prefill_worker():
    # The decoder's streams have little TPOT slack: a colocated prefill would cost them 1.5 times
    # it, so the prompt goes to the prefill worker; stalled for 0.5 s, that worker's TTFT misses
    # by more, and the prompt stays colocated.
    policy = AdaptivePolicy(MODEL)
    request = RequestInfo("r", 1024, 16)
    links = {("p", "b"): LinkEstimate(0.001, 25e9)}
    both = WorkerView("b", "both", num_running=4, decode_slack_s=0.05)
    assert policy.decide(request, ClusterView((WorkerView("p", "prefill"), both), links)).route == "disaggregated"
    stalled = ClusterView((WorkerView("p", "prefill", stall_s=0.5), both), links)
    decision = policy.decide(request, stalled)
    assert decision.route == "colocated"
    assert decision.predictions["disaggregated.queue_s"] >= 0.5


def test_a_prompt_lost_either_way_goes_past_a_stalled_prefill_worker():
    # Both routes miss the TTFT SLO by more than twice (a 4,096-token prompt on a slow host):
    # the lost-request rule spares the decoder and sends it to the prefill worker, unless that
    # worker is stalled, where it might never be served.
    from schedulers.hardware import HardwareSpec

    slow = HardwareSpec.calibrated("slow", achieved_flops=50e9, achieved_bytes_per_s=20e9)
    policy = AdaptivePolicy(StepTimeModel.from_roofline(MODEL_SPECS["llama-3-8b"], slow))
    request = RequestInfo("r", 4096, 16)
    links = {("p", "b"): LinkEstimate(0.0001, 5e9)}
    both = WorkerView("b", "both")
    healthy = policy.decide(request, ClusterView((WorkerView("p", "prefill"), both), links))
    assert healthy.route == "disaggregated"
    assert healthy.predictions["colocated.ttft_s"] > 2 * healthy.predictions["ttft_slo_s"]
    stalled = policy.decide(request, ClusterView((WorkerView("p", "prefill", stall_s=0.5), both), links))
    assert stalled.route == "colocated"
    # A stalled decoder too: no route is clear of the stall, and the decoder is spared again.
    both_stalled = ClusterView((WorkerView("p", "prefill", stall_s=0.5), WorkerView("b", "both", stall_s=0.5)), links)
    assert policy.decide(request, both_stalled).route == "disaggregated"


def test_a_prompt_is_taken_back_from_a_stalled_prefill_worker_only_to_a_decode_worker_not_stalled():
    asked = []

    def decode_stall(s: float):
        return lambda: asked.append(s) or s

    assert take_back_reason("prefill-0", 1.25, decode_stall(0.0)) == \
        "prefill worker prefill-0 stalled (1.25 s past its longest wait)"
    assert take_back_reason("prefill-0", 1.25, decode_stall(0.4)) is None  # both stuck: stay
    assert take_back_reason("prefill-0", 0.0, decode_stall(0.0)) is None
    assert asked == [0.0, 0.4]  # the decode worker's stall is read only when the prefill worker's is

"""What a predicted TTFT holds beyond the request's own steps: the worker's queue, counted once
per prompt, and the measured path outside the engines."""
from __future__ import annotations

import pytest

from schedulers.hardware import get_hardware
from schedulers.model_spec import MODEL_SPECS
from schedulers.path_estimate import RecentMedian
from schedulers.policies import AdaptivePolicy
from schedulers.prefill_queues import PrefillQueues
from schedulers.route_prediction import RoutePredictor
from schedulers.step_time import StepTimeModel
from schedulers.types import ClusterView, LinkEstimate, RequestInfo, WorkerView

SLOS = (0.2, 0.1)


def _model() -> StepTimeModel:
    return StepTimeModel.from_roofline(MODEL_SPECS["llama-3-8b"], get_hardware("a100"))


def test_the_path_is_added_to_either_route_and_reported():
    pred = RoutePredictor(_model(), chunk_tokens=2048)
    req, w, p = RequestInfo("r", 500, 8), WorkerView("w", "both"), WorkerView("p", "prefill")
    bare = pred.colocated(req, w, SLOS)
    with_path = pred.colocated(req, w, SLOS, path_s=0.006)
    assert with_path.ttft_s == pytest.approx(bare.ttft_s + 0.006)
    assert with_path.as_dict()["colocated.path_s"] == 0.006
    part = pred.prefill_on(req, p)
    link = LinkEstimate(0.001, 10e9)
    dis = pred.disaggregated(req, p, w, part, link, 10**6, SLOS, path_s=0.015)
    assert dis.ttft_s == pytest.approx(pred.disaggregated(req, p, w, part, link, 10**6, SLOS).ttft_s + 0.015)


def test_the_adaptive_policy_reads_each_routes_path_from_the_view():
    policy = AdaptivePolicy(_model())
    workers = (WorkerView("p", "prefill"), WorkerView("b", "both"))
    links = {("p", "b"): LinkEstimate(0.0001, 5e9)}
    req = RequestInfo("r", 300, 8)
    bare = policy.decide(req, ClusterView(workers, links)).predictions
    paths = policy.decide(req, ClusterView(workers, links, path_s={"colocated": 0.005,
                                                                   "disaggregated": 0.013})).predictions
    assert paths["colocated.ttft_s"] == pytest.approx(bare["colocated.ttft_s"] + 0.005)
    assert paths["disaggregated.ttft_s"] == pytest.approx(bare["disaggregated.ttft_s"] + 0.013)


def test_prefill_queues_count_each_prompt_once_and_know_the_longest():
    q = PrefillQueues()
    assert q.num_tokens("w") == 0 and q.longest("w") == 0 and q.oldest_sent_s("w") is None
    q.sent("w", "a", 1000, 10.0)
    q.sent("w", "b", 500, 10.5)
    q.sent("v", "c", 64, 9.0)
    assert q.num_tokens("w") == 1500 and q.longest("w") == 1000 and q.num_prompts("w") == 2
    assert q.oldest_sent_s("w") == 10.0  # where a silent prefill worker's stall counts from
    assert q.num_tokens_sent_by("w", 10.2) == 1000 and q.num_tokens_sent_by("w", 10.5) == 1500  # a step's batch
    q.prefilled("w", "a")
    q.prefilled("w", "a")  # a second call (first token, then the stream's end) does nothing
    assert q.num_tokens("w") == 500 and q.num_tokens("v") == 64 and q.num_prompts("w") == 1
    assert q.longest("w") == 500  # what the stall rule's longest step is priced over
    assert q.oldest_sent_s("w") == 10.5


def test_the_queue_is_its_prefill_steps_beside_the_workers_decodes_and_its_stall():
    pred = RoutePredictor(_model(), chunk_tokens=2048)
    steps = _model().chunked_prefill_steps_s(5000, 0, 2048, [1024] * 3)
    assert len(steps) == 3
    assert pred.prefill_queue_s(5000, 3, 1.5) == pytest.approx(1.5 * sum(steps))
    both = WorkerView("w", "both", num_running=3, num_queued_prefill_tokens=5000, speed_factor=1.5, stall_s=0.4)
    assert pred.queue_s(both) == pytest.approx(1.5 * sum(steps) + 0.4)
    waiting = RoutePredictor(_model(), chunk_tokens=2048, wait_running_step=True)
    half_step = 0.5 * 1.5 * _model().predict(0, 0, [1024] * 3)  # the rest of the step running when it comes
    assert waiting.queue_s(both) == pytest.approx(half_step + 1.5 * sum(steps) + 0.4)
    prefill = WorkerView("p", "prefill", num_running=3, num_queued_prefill_tokens=5000)  # runs no decodes
    assert pred.queue_s(prefill) == pytest.approx(pred.prefill_queue_s(5000, 0))


def test_the_path_estimate_is_the_recent_median_so_one_stall_does_not_move_it():
    m = RecentMedian(window=5)
    assert m.value == 0.0
    for x in (0.005, 0.006, 0.9, 0.005, 0.007):
        m.observe(x)
    assert m.value == 0.006
    for x in (0.02,) * 3:
        m.observe(x)  # the oldest three fall out of the window
    assert m.value == 0.02 and m.count == 5
    with pytest.raises(ValueError):
        RecentMedian(window=0)


def test_the_queue_head_is_the_oldest_prompt_and_its_time_runs_from_when_it_could_start():
    q = PrefillQueues()
    assert q.head("w", 5.0) == (0, 0.0)
    q.sent("w", "a", 1000, 10.0)
    q.sent("w", "b", 500, 10.5)
    assert q.head("w", 10.25) == (1000, pytest.approx(0.25))  # sent at 10.0, nothing before it
    q.prefilled("w", "a", 11.0)
    assert q.head("w", 11.5) == (500, pytest.approx(0.5))  # sent at 10.5, started when "a" was done
    q.sent("w", "c", 64, 12.0)
    q.prefilled("w", "b", 11.8)
    assert q.head("w", 12.5) == (64, pytest.approx(0.5))  # sent after the last prefill ended
    q.prefilled("w", "c")  # failed: says nothing of the engine's progress
    q.prefilled("w", "zzz", 20.0)  # never queued here (a shipped-in request's KV): no progress either
    q.sent("w", "d", 128, 12.6)
    assert q.head("w", 13.0) == (128, pytest.approx(0.4))
    assert q.head("v", 13.0) == (0, 0.0)  # per worker


def test_the_queue_wait_drops_by_what_its_head_has_had_and_by_no_more_than_its_steps():
    model = _model()
    pred, whole = RoutePredictor(model, chunk_tokens=2048), RoutePredictor(model, 2048, credit_queue_head=False)
    req = RequestInfo("r", 300, 8)
    full_s = pred.prefill_queue_s(5000, 0)
    head_s = pred.prefill_queue_s(3000, 0)

    def queue_s(p: RoutePredictor, elapsed_s: float, stall_s: float = 0.0) -> float:
        w = WorkerView("w", "both", num_queued_prefill_tokens=5000, queue_head_tokens=3000,
                       queue_head_elapsed_s=elapsed_s, stall_s=stall_s)
        return p.prefill_on(req, w).queue_s

    assert queue_s(pred, 0.0) == pytest.approx(full_s)
    assert queue_s(pred, head_s / 3) == pytest.approx(full_s - head_s / 3)
    assert queue_s(pred, 10 * head_s) == pytest.approx(full_s - head_s)  # the rest of the queue still waits
    assert queue_s(pred, 10 * head_s, stall_s=0.5) == pytest.approx(full_s - head_s + 0.5)
    assert queue_s(whole, head_s / 3) == pytest.approx(full_s)  # the policy's switch
    # a head that is the whole queue, had for longer than its steps: no wait, never a negative one
    alone = WorkerView("w", "both", num_queued_prefill_tokens=3000, queue_head_tokens=3000, queue_head_elapsed_s=9.0)
    assert pred.prefill_on(req, alone).queue_s == 0.0


def test_a_prompt_waits_out_half_the_step_its_decoding_worker_is_in():
    model = _model()
    pred, at_once = RoutePredictor(model, 2048, wait_running_step=True), RoutePredictor(model, 2048)
    req = RequestInfo("r", 300, 8)
    decoding = WorkerView("w", "both", num_running=8, speed_factor=1.2)
    half_step = 0.5 * 1.2 * model.predict(0, 0, [1024] * 8)
    assert half_step > 0
    assert pred.prefill_on(req, decoding).queue_s == pytest.approx(half_step)
    assert at_once.prefill_on(req, decoding).queue_s == 0.0  # the switch, off by default
    assert pred.prefill_on(req, WorkerView("w", "both")).queue_s == 0.0  # an idle engine starts it at once
    assert pred.prefill_on(req, WorkerView("p", "prefill", num_running=8)).queue_s == 0.0  # runs no decodes
    # The head waited out the same half step: with it credited in full, only the rest of the queue is left.
    queued = WorkerView("w", "both", num_running=8, speed_factor=1.2, num_queued_prefill_tokens=900,
                        queue_head_tokens=600, queue_head_elapsed_s=5.0)
    rest_s = pred.prefill_queue_s(900, 8, 1.2) - pred.prefill_queue_s(600, 8, 1.2)
    assert pred.prefill_on(req, queued).queue_s == pytest.approx(rest_s)
    # Nothing had yet: the half step, then the whole queue.
    fresh = WorkerView("w", "both", num_running=8, speed_factor=1.2, num_queued_prefill_tokens=900,
                       queue_head_tokens=600, queue_head_elapsed_s=0.0)
    assert pred.prefill_on(req, fresh).queue_s == pytest.approx(half_step + pred.prefill_queue_s(900, 8, 1.2))
    waited = AdaptivePolicy(model, wait_running_step=True).decide(req, ClusterView((decoding,), {})).predictions
    assert waited["colocated.queue_s"] == pytest.approx(half_step)
    assert AdaptivePolicy(model).decide(req, ClusterView((decoding,), {})).predictions["colocated.queue_s"] == 0.0


def test_the_adaptive_policy_credits_the_queue_head_unless_told_not_to():
    workers = (WorkerView("p", "prefill"), WorkerView("b", "both", num_queued_prefill_tokens=4000,
                                                      queue_head_tokens=4000, queue_head_elapsed_s=0.004))
    view, req = ClusterView(workers, {("p", "b"): LinkEstimate(0.0001, 5e9)}), RequestInfo("r", 300, 8)
    credited = AdaptivePolicy(_model()).decide(req, view).predictions
    whole = AdaptivePolicy(_model(), credit_queue_head=False).decide(req, view).predictions
    assert credited["colocated.queue_s"] == pytest.approx(whole["colocated.queue_s"] - 0.004)


@pytest.mark.parametrize("head", [(5001, 0.0), (-1, 0.0), (100, -0.1)])
def test_a_queue_head_outside_its_queue_is_refused(head):
    with pytest.raises(ValueError, match="head"):
        WorkerView("w", "both", num_queued_prefill_tokens=5000, queue_head_tokens=head[0], queue_head_elapsed_s=head[1])

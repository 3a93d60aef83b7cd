"""What a predicted TTFT holds beyond the request's own steps: the part of the queue the engine
has not yet worked through, and the measured path outside the engines."""
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


def test_the_queue_the_engine_has_worked_on_for_a_while_is_shorter_never_negative():
    pred = RoutePredictor(_model(), chunk_tokens=2048)
    full_s = sum(pred.step_model.chunked_prefill_steps_s(8000, 0, 2048))
    fresh = WorkerView("w", "both", num_queued_prefill_tokens=8000)
    half = WorkerView("w", "both", num_queued_prefill_tokens=8000, queue_elapsed_s=full_s / 2)
    done = WorkerView("w", "both", num_queued_prefill_tokens=8000, queue_elapsed_s=full_s * 3)
    req = RequestInfo("r", 500, 8)
    assert pred.prefill_on(req, fresh).queue_s == pytest.approx(full_s)
    assert pred.prefill_on(req, half).queue_s == pytest.approx(full_s / 2)
    assert pred.prefill_on(req, done).queue_s == 0.0
    # The decode worker's queue counts the same way for a shipped-in request.
    p = WorkerView("p", "prefill")
    part = pred.prefill_on(req, p)
    link = LinkEstimate(0.001, 10e9)
    waits = [pred.disaggregated(req, p, d, part, link, 10**6, SLOS).decode_wait_s for d in (fresh, half)]
    assert waits[0] - waits[1] == pytest.approx(full_s / 2)


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


def test_prefill_queues_count_tokens_and_the_oldest_prompts_age():
    q = PrefillQueues()
    assert q.num_tokens("w") == 0 and q.elapsed_s("w", 10.0) == 0.0
    q.sent("w", "a", 1000, now_s=10.0)
    q.sent("w", "b", 500, now_s=10.3)
    q.sent("v", "c", 64, now_s=10.2)
    assert q.num_tokens("w") == 1500 and q.elapsed_s("w", 10.5) == pytest.approx(0.5)
    q.prefilled("w", "a")
    q.prefilled("w", "a")  # a second call (first token, then the stream's end) does nothing
    assert q.num_tokens("w") == 500 and q.elapsed_s("w", 10.5) == pytest.approx(0.2)
    assert q.num_tokens("v") == 64


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

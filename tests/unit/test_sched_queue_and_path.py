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

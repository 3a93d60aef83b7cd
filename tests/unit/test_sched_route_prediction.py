"""Disaggregated TTFT accounts for the decode worker's own queued prefill work."""
from __future__ import annotations

import pytest

from schedulers.hardware import get_hardware
from schedulers.model_spec import MODEL_SPECS
from schedulers.route_prediction import RoutePredictor
from schedulers.step_time import StepTimeModel
from schedulers.types import LinkEstimate, RequestInfo, WorkerView


def _predictor() -> RoutePredictor:
    spec = MODEL_SPECS["llama-3-8b"]
    return RoutePredictor(StepTimeModel.from_roofline(spec, get_hardware("a100")), chunk_tokens=2048)


def test_a_busy_decode_worker_delays_the_first_token_by_a_chunk_step():
    pred = _predictor()
    req = RequestInfo("r", num_prompt_tokens=1000, max_tokens=8)
    p = WorkerView("p", "prefill")
    idle_d = WorkerView("d", "both")
    busy_d = WorkerView("d", "both", num_queued_prefill_tokens=5000)
    link = LinkEstimate(0.001, 10e9)
    part = pred.prefill_on(req, p)
    slos = (0.2, 0.1)
    idle = pred.disaggregated(req, p, idle_d, part, link, 10**6, slos)
    busy = pred.disaggregated(req, p, busy_d, part, link, 10**6, slos)
    model = pred.step_model
    # 5,000 queued tokens: the shared step carries a full 2,048-token chunk; 1.5 such steps more.
    chunk_s = model.predict(2048, 0, ()) - model.overhead_s
    assert busy.first_step_s - idle.first_step_s == pytest.approx(1.5 * chunk_s)
    assert busy.ttft_s > idle.ttft_s

"""TPOT slack of running decodes, and a prefill's harm to them against it."""
from __future__ import annotations

import math

import pytest

from schedulers.decode_slack import DecodeProgress, worker_slack_s
from schedulers.hardware import HardwareSpec
from schedulers.model_spec import MODEL_SPECS
from schedulers.route_prediction import RoutePredictor
from schedulers.step_time import StepTimeModel
from schedulers.types import LinkEstimate, RequestInfo, WorkerView


def test_slack_is_the_output_budget_left_at_the_pace_so_far():
    # 11 of 32 tokens, 0.5 s after the first: 50 ms a token so far against a 100 ms SLO.
    p = DecodeProgress(first_token_s=10.0, num_tokens=11, max_tokens=32, tpot_slo_s=0.1)
    assert p.slack_s(10.5, step_s=0.9) == pytest.approx(31 * (0.1 - 0.05))  # its own pace, not step_s
    first = DecodeProgress(10.0, 1, 32, 0.1)
    assert first.slack_s(10.0, step_s=0.03) == pytest.approx(31 * 0.1 - 31 * 0.03)
    assert DecodeProgress(10.0, 1, 1, 0.1).slack_s(99.0, 1.0) == math.inf  # one token: no TPOT


def test_a_worker_is_as_tight_as_its_tightest_request_that_can_still_make_it():
    ok = DecodeProgress(0.0, 11, 32, 0.1)        # 50 ms a token: 1.55 s of slack at t=0.5
    tight = DecodeProgress(0.0, 6, 32, 0.1)      # 100 ms a token: none left, 0 at t=0.5
    lost = DecodeProgress(0.0, 3, 32, 0.1)       # 250 ms a token: past saving
    assert worker_slack_s([ok, lost], 0.5, 0.02) == pytest.approx(1.55)
    assert worker_slack_s([ok, tight, lost], 0.5, 0.02) == pytest.approx(0.0, abs=1e-12)
    assert worker_slack_s([lost], 0.5, 0.02) == math.inf
    assert worker_slack_s([], 0.5, 0.02) == math.inf


def _model() -> StepTimeModel:
    slow = HardwareSpec.calibrated("slow", achieved_flops=2e12, achieved_bytes_per_s=200e9)
    return StepTimeModel.from_roofline(MODEL_SPECS["llama-3-8b"], slow)


def test_a_long_step_beside_decodes_with_slack_to_spare_meets_the_tpot_slo():
    pred = RoutePredictor(_model(), chunk_tokens=2048)
    request = RequestInfo("r", 300, 32)
    slos = (10.0, 0.1)  # a TTFT the prefill meets: only the decodes' side is at stake
    untracked = WorkerView("b", "both", num_running=4)
    part = pred.prefill_on(request, untracked)
    assert part.itl_s > 0.1  # one gap over the TPOT SLO: the old rule calls it a miss
    assert not pred.colocated(request, untracked, slos).meets_slo
    roomy = WorkerView("b", "both", num_running=4, decode_slack_s=10 * part.engine_s)
    c = pred.colocated(request, roomy, slos)
    assert c.decode_harm == pytest.approx(0.1) and c.meets_slo
    tight = WorkerView("b", "both", num_running=4, decode_slack_s=0.5 * part.engine_s)
    assert pred.colocated(request, tight, slos).decode_harm == pytest.approx(2.0)
    assert pred.colocated(request, WorkerView("b", "both", decode_slack_s=math.inf), slos).decode_harm == 0.0


def test_shipped_to_a_decoder_only_its_first_step_comes_out_of_the_slack():
    pred = RoutePredictor(_model(), chunk_tokens=2048)
    request = RequestInfo("r", 3000, 32)
    p = WorkerView("p", "prefill", decode_slack_s=math.inf)
    d = WorkerView("d", "both", num_running=4, decode_slack_s=0.01)
    part = pred.prefill_on(request, p)
    r = pred.disaggregated(request, p, d, part, LinkEstimate(0.001, 10e9), 10**6, (10.0, 0.1))
    first_step_engine_s = r.engine_s - part.engine_s
    assert r.decode_harm == pytest.approx(first_step_engine_s / 0.01)
    assert r.as_dict()["disaggregated.decode_harm"] == r.decode_harm
    with pytest.raises(ValueError, match="decode_slack_s"):
        WorkerView("d", "both", decode_slack_s=-1.0)

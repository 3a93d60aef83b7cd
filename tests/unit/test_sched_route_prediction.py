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


def test_a_decode_worker_busy_prefilling_delays_the_loaded_request():
    pred = _predictor()
    req = RequestInfo("r", num_prompt_tokens=1000, max_tokens=8)
    p = WorkerView("p", "prefill")
    idle_d = WorkerView("d", "both")
    busy_d = WorkerView("d", "both", num_queued_prefill_tokens=50_000)
    link = LinkEstimate(0.001, 10e9)
    part = pred.prefill_on(req, p)
    slos = (0.2, 0.1)
    idle = pred.disaggregated(req, p, idle_d, part, link, 10**6, slos)
    busy = pred.disaggregated(req, p, busy_d, part, link, 10**6, slos)
    model = pred.step_model
    # D must first finish its 50,000 queued tokens in 2,048-token steps; the KV arrives earlier.
    d_queue_s = sum(model.chunked_prefill_steps_s(50_000, 0, 2048))
    kv_ready_s = part.queue_s + part.prefill_s + busy.transfer_s
    assert idle.decode_wait_s == 0.0
    assert busy.decode_wait_s == pytest.approx(d_queue_s - kv_ready_s)
    assert busy.ttft_s == pytest.approx(d_queue_s + busy.first_step_s)


def test_a_short_decode_queue_hides_behind_the_transfer():
    pred = _predictor()
    req = RequestInfo("r", num_prompt_tokens=8000, max_tokens=8)
    p, d = WorkerView("p", "prefill"), WorkerView("d", "both", num_queued_prefill_tokens=64)
    part = pred.prefill_on(req, p)
    r = pred.disaggregated(req, p, d, part, LinkEstimate(0.001, 10e9), 10**6, (1.0, 0.1))
    assert r.decode_wait_s == 0.0  # D's 64 tokens are done long before P's 8,000 are


def test_a_long_prompt_missing_either_way_goes_to_the_prefill_worker():
    from schedulers.hardware import HardwareSpec
    from schedulers.policies import AdaptivePolicy
    from schedulers.types import ClusterView

    # A machine ~1000x slower than an A100: 4,096 tokens take seconds on either route, far past
    # the 0.2 s SLO, and the two violations differ by well under 10%.
    slow = HardwareSpec.calibrated("slow", achieved_flops=50e9, achieved_bytes_per_s=20e9)
    model = StepTimeModel.from_roofline(MODEL_SPECS["llama-3-8b"], slow)
    policy = AdaptivePolicy(model)
    view = ClusterView((WorkerView("p", "prefill"), WorkerView("b", "both")),
                       {("p", "b"): LinkEstimate(0.0001, 5e9)})
    d = policy.decide(RequestInfo("r", 4096, 16), view)
    col, dis = d.predictions["colocated.violation"], d.predictions["disaggregated.violation"]
    assert col > 1 and dis > 1 and dis <= col * 1.1
    assert (d.route, d.prefill_worker, d.decode_worker) == ("disaggregated", "p", "b")


def test_a_worker_running_slower_than_calibrated_has_every_step_priced_so():
    pred = _predictor()
    req = RequestInfo("r", num_prompt_tokens=5000, max_tokens=8)
    calm = WorkerView("b", "both", num_running=3, num_queued_prefill_tokens=3000)
    loaded = WorkerView("b", "both", num_running=3, num_queued_prefill_tokens=3000, speed_factor=1.5)
    a, b = pred.prefill_on(req, calm), pred.prefill_on(req, loaded)
    for field in ("queue_s", "prefill_s", "itl_s", "extra_itl_s", "engine_s"):
        assert getattr(b, field) == pytest.approx(1.5 * getattr(a, field)), field
    p = WorkerView("p", "prefill")
    link = LinkEstimate(0.001, 10e9)
    d_calm = pred.disaggregated(req, p, calm, pred.prefill_on(req, p), link, 10**6, (1.0, 0.1))
    d_slow = pred.disaggregated(req, p, loaded, pred.prefill_on(req, p), link, 10**6, (1.0, 0.1))
    assert d_slow.first_step_s == pytest.approx(1.5 * d_calm.first_step_s)
    assert d_slow.transfer_s == d_calm.transfer_s  # the link is not the host's CPU
    with pytest.raises(ValueError, match="speed_factor"):
        WorkerView("b", "both", speed_factor=0.0)


def test_a_shipped_in_request_waits_for_the_decode_workers_steps_before_its_first():
    from schedulers.route_prediction import KV_LOAD_STEPS

    pred = _predictor()
    req = RequestInfo("r", num_prompt_tokens=300, max_tokens=8)
    p = WorkerView("p", "prefill")
    link = LinkEstimate(0.001, 10e9)
    part = pred.prefill_on(req, p)
    idle = pred.disaggregated(req, p, WorkerView("d", "both"), part, link, 10**6, (1.0, 0.1))
    busy = pred.disaggregated(req, p, WorkerView("d", "both", num_running=4), part, link, 10**6, (1.0, 0.1))
    assert idle.kv_load_s == 0.0  # an idle D polls the read in empty steps
    decode_only_s = pred.step_model.predict(0, 0, [pred.decode_context_tokens] * 4)
    assert busy.kv_load_s == pytest.approx(KV_LOAD_STEPS * decode_only_s)
    assert busy.ttft_s - idle.ttft_s == pytest.approx(busy.kv_load_s + busy.first_step_s - idle.first_step_s)
    assert busy.as_dict()["disaggregated.kv_load_s"] == busy.kv_load_s


def test_a_request_lost_either_way_spares_the_decoder_even_if_it_waits_longer():
    from schedulers.hardware import HardwareSpec
    from schedulers.policies import AdaptivePolicy
    from schedulers.types import ClusterView

    slow = HardwareSpec.calibrated("slow", achieved_flops=50e9, achieved_bytes_per_s=20e9)
    model = StepTimeModel.from_roofline(MODEL_SPECS["llama-3-8b"], slow)
    # The prefill worker has a long queue: disaggregated misses by far more than colocated.
    view = ClusterView((WorkerView("p", "prefill", num_queued_prefill_tokens=4000), WorkerView("b", "both")),
                       {("p", "b"): LinkEstimate(0.0001, 5e9)})
    request = RequestInfo("r", 4096, 16)
    by_violation = AdaptivePolicy(model, lost_ttft_ratio=1e9).decide(request, view)
    col, dis = by_violation.predictions["colocated.violation"], by_violation.predictions["disaggregated.violation"]
    assert dis > col * 1.1 and col > 2  # colocated misses by less, but its TTFT is lost too
    assert by_violation.route == "colocated"
    lost = AdaptivePolicy(model).decide(request, view)
    assert (lost.route, lost.prefill_worker) == ("disaggregated", "p")
    # Below the ratio on one route (a chance to meet it there), the lesser violation again.
    col_ratio = by_violation.predictions["colocated.ttft_s"] / by_violation.predictions["ttft_slo_s"]
    assert AdaptivePolicy(model, lost_ttft_ratio=col_ratio * 1.01).decide(request, view).route == "colocated"
    with pytest.raises(ValueError, match="lost_ttft_ratio"):
        AdaptivePolicy(model, lost_ttft_ratio=0.5)


def test_a_prompt_on_a_worker_with_every_slot_taken_waits_for_one_then_prefills():
    pred = _predictor()
    req = RequestInfo("r", num_prompt_tokens=1000, max_tokens=8)
    free = pred.colocated(req, WorkerView("b", "both", num_queued_prefill_tokens=2000), (1.0, 0.1))
    full = pred.colocated(req, WorkerView("b", "both", num_queued_prefill_tokens=2000, slot_wait_s=0.5),
                          (1.0, 0.1))
    assert free.prefill.queue_s < 0.5  # 2,000 queued tokens take less than the slot's wait
    assert full.prefill.queue_s == pytest.approx(0.5)
    assert full.ttft_s == pytest.approx(0.5 + free.prefill.prefill_s)
    # A queue longer than the slot's wait is what the prompt waits for.
    short = pred.colocated(req, WorkerView("b", "both", num_queued_prefill_tokens=2000, slot_wait_s=1e-4),
                           (1.0, 0.1))
    assert short.prefill.queue_s == pytest.approx(free.prefill.queue_s)


def test_a_shipped_in_request_waits_for_a_slot_on_d_only_past_its_prefill_on_p():
    pred = _predictor()
    req = RequestInfo("r", num_prompt_tokens=4000, max_tokens=8)
    p, link, slos = WorkerView("p", "prefill"), LinkEstimate(0.001, 10e9), (1.0, 0.1)
    part = pred.prefill_on(req, p)
    p_done_s = part.queue_s + part.prefill_s
    free = pred.disaggregated(req, p, WorkerView("d", "both"), part, link, 10**6, slos)
    hidden = pred.disaggregated(req, p, WorkerView("d", "both", slot_wait_s=p_done_s / 2), part, link, 10**6, slos)
    late = pred.disaggregated(req, p, WorkerView("d", "both", slot_wait_s=p_done_s + 0.3), part, link, 10**6, slos)
    assert hidden.decode_wait_s == 0.0 and hidden.ttft_s == pytest.approx(free.ttft_s)
    # The KV read is posted once D admits it: the transfer and load steps follow the free slot.
    assert late.decode_wait_s == pytest.approx(0.3)
    assert late.ttft_s == pytest.approx(free.ttft_s + 0.3)
    assert late.as_dict()["disaggregated.slot_wait_s"] == pytest.approx(p_done_s + 0.3)


def test_a_negative_slot_wait_is_refused():
    with pytest.raises(ValueError, match="slot_wait_s"):
        WorkerView("b", "both", slot_wait_s=-0.1)

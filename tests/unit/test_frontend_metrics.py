"""Prometheus metrics: vLLM-style names, every one exposed, observations land where a
dashboard looks for them, and two deployments in one process never share a registry."""
from __future__ import annotations

import pytest
from prometheus_client.parser import text_string_to_metric_families

from pd_serve.metrics import (METRIC_NAMES, RouterMetrics, decision_reason_label, prefill_time_s)
from pd_serve.request import GenerateResult


def _result(**over) -> GenerateResult:
    base = dict(request_id="r", token_ids=[1, 2, 3], text="abc", route="disaggregated", ttft_s=0.2,
                e2e_s=0.5, itl_s=[0.1, 0.2], prefill_worker="prefill-0", decode_worker="both-0",
                kv_transfer_bytes=65536, kv_transfer_s=0.004, finish_reason="length",
                num_prompt_tokens=2000, predicted_ttft_s=0.25, decision_reason="long prompt",
                fallback=None, token_times=[10.2, 10.3, 10.5])
    base.update(over)
    return GenerateResult(**base)


def _samples(metrics: RouterMetrics) -> dict[str, list]:
    """Family name as exposed (counters without `_total`) -> its samples."""
    return {f.name: f.samples for f in text_string_to_metric_families(metrics.text())}


def _value(metrics: RouterMetrics, sample_name: str, **labels) -> float:
    for samples in _samples(metrics).values():
        for s in samples:
            if s.name == sample_name and all(s.labels.get(k) == v for k, v in labels.items()):
                return s.value
    raise KeyError((sample_name, labels))


def test_every_metric_is_exposed_with_samples_from_the_start():
    m = RouterMetrics(["prefill-0", "both-0"])
    m.observe_decision("colocated", "length_threshold")
    families = _samples(m)
    for name in METRIC_NAMES:
        family = name.removesuffix("_total")  # the parser names counter families without it
        assert family in families and families[family], name


def test_names_follow_vllms_with_the_pd_serve_prefix():
    text = RouterMetrics(["w"]).text()
    assert "# TYPE pd_serve:time_to_first_token_seconds histogram" in text
    assert "# TYPE pd_serve:route_decisions_total counter" in text
    assert "# TYPE pd_serve:kv_cache_usage_perc gauge" in text
    assert all(n.startswith("pd_serve:") for n in METRIC_NAMES) and len(METRIC_NAMES) == 14


def test_a_result_lands_in_the_latency_transfer_and_prediction_histograms():
    m = RouterMetrics(["both-0"])
    m.observe_result(_result(), prefill_s=0.15)
    route = {"route": "disaggregated"}
    assert _value(m, "pd_serve:time_to_first_token_seconds_sum", **route) == pytest.approx(0.2)
    assert _value(m, "pd_serve:inter_token_latency_seconds_count", **route) == 2
    assert _value(m, "pd_serve:e2e_request_latency_seconds_sum", **route) == pytest.approx(0.5)
    assert _value(m, "pd_serve:request_prefill_time_seconds_sum", **route) == pytest.approx(0.15)
    assert _value(m, "pd_serve:kv_transfer_bytes_sum") == 65536
    assert _value(m, "pd_serve:kv_transfer_seconds_sum") == pytest.approx(0.004)
    # |0.25 - 0.2| / 0.2 = 0.25
    assert _value(m, "pd_serve:ttft_prediction_error_ratio_sum", **route) == pytest.approx(0.25)
    assert _value(m, "pd_serve:route_fallbacks_total") == 0
    assert _value(m, "pd_serve:request_prompt_tokens_sum", **route) == 2000


def test_a_colocated_result_moves_no_transfer_and_a_fallback_is_counted():
    m = RouterMetrics(["both-0"])
    m.observe_result(_result(route="colocated", prefill_worker=None, kv_transfer_bytes=0,
                             kv_transfer_s=None, predicted_ttft_s=None,
                             fallback="prefill worker prefill-0 failed"), prefill_s=0.1)
    assert _value(m, "pd_serve:kv_transfer_bytes_count") == 0
    assert _value(m, "pd_serve:ttft_prediction_error_ratio_count", route="colocated") == 0
    assert _value(m, "pd_serve:route_fallbacks_total") == 1
    assert _value(m, "pd_serve:time_to_first_token_seconds_count", route="colocated") == 1


def test_loads_set_the_gauges_and_add_failures_as_differences():
    m = RouterMetrics(["both-0"])
    m.observe_load("both-0", {"num_running": 3, "num_waiting": 2, "kv_cache_usage": 0.85,
                              "num_transfer_failures": 2})
    m.observe_load("both-0", {"num_running": 1, "num_waiting": 0, "kv_cache_usage": 0.1,
                              "num_transfer_failures": 5})
    assert _value(m, "pd_serve:num_requests_running", worker="both-0") == 1
    assert _value(m, "pd_serve:kv_cache_usage_perc", worker="both-0") == pytest.approx(0.1)
    assert _value(m, "pd_serve:kv_transfer_failures_total", worker="both-0") == 5
    m.observe_load("both-0", {"num_transfer_failures": 1})  # the engine restarted: counts from 0
    assert _value(m, "pd_serve:kv_transfer_failures_total", worker="both-0") == 6


def test_decisions_are_counted_by_route_and_a_bounded_reason():
    m = RouterMetrics()
    m.observe_decision("disaggregated", decision_reason_label("auto", "length_threshold", False))
    m.observe_decision("colocated", decision_reason_label("colocated", "length_threshold", False))
    m.observe_decision("colocated", decision_reason_label("auto", "length_threshold", True))
    assert _value(m, "pd_serve:route_decisions_total", route="disaggregated",
                  reason="length_threshold") == 1
    assert _value(m, "pd_serve:route_decisions_total", route="colocated", reason="forced") == 1
    assert _value(m, "pd_serve:route_decisions_total", route="colocated", reason="no_pair") == 1


def test_prefill_time_is_remote_until_kv_ready_or_local_until_first_token():
    disagg = _result(token_times=[10.9])
    assert prefill_time_s(disagg, t_dispatch=10.0, t_decode_start=10.6) == pytest.approx(0.6)
    local = _result(route="colocated", token_times=[10.9])
    assert prefill_time_s(local, t_dispatch=10.0, t_decode_start=10.1) == pytest.approx(0.8)
    assert prefill_time_s(_result(route="colocated", token_times=[]), 10.0, 10.1) is None


def test_two_instances_never_share_samples():
    a, b = RouterMetrics(["w"]), RouterMetrics(["w"])
    a.observe_result(_result(), prefill_s=0.1)
    assert _value(b, "pd_serve:e2e_request_latency_seconds_count", route="disaggregated") == 0

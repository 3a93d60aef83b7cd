"""Prometheus metrics of a deployment, named like vLLM's (`vllm:time_to_first_token_seconds` ->
`pd_serve:time_to_first_token_seconds`) so existing dashboards and queries carry over.

One `RouterMetrics` lives inside the router actor, which every request passes through (gRPC,
HTTP and the in-process API alike); `text()` is the exposition the HTTP front door serves at
/metrics. Each instance has its own CollectorRegistry: several deployments (or tests) in one
process never collide, and nothing leaks into the process-global registry.

| metric                                   | type      | labels        | observed when           |
|------------------------------------------|-----------|---------------|-------------------------|
| time_to_first_token_seconds              | histogram | route         | a request completes     |
| request_prefill_time_seconds             | histogram | route         | a request completes     |
| inter_token_latency_seconds              | histogram | route         | a request completes     |
| e2e_request_latency_seconds              | histogram | route         | a request completes     |
| kv_transfer_seconds, kv_transfer_bytes   | histogram |               | a transfer completed    |
| ttft_prediction_error_ratio              | histogram | route         | the policy predicted    |
| request_prompt_tokens                    | histogram | route         | a request completes     |
| route_decisions_total                    | counter   | route, reason | the policy decides      |
| route_fallbacks_total                    | counter   |               | a route was not taken   |
| kv_transfer_failures_total               | counter   | worker        | engines' stats (polled) |
| num_requests_running / _waiting          | gauge     | worker        | engines' stats (polled) |
| kv_cache_usage_perc (fraction 0..1)      | gauge     | worker        | engines' stats (polled) |
"""
from __future__ import annotations

from typing import Iterable

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client import CONTENT_TYPE_LATEST  # noqa: F401  (re-exported for /metrics)

from pd_serve.request import GenerateResult

PREFIX = "pd_serve:"

# vLLM's buckets (vllm/v1/metrics/loggers.py), so histograms compare bucket for bucket.
TTFT_BUCKETS_S = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0,
                  7.5, 10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0)
ITL_BUCKETS_S = (0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5,
                 10.0, 20.0, 40.0, 80.0)
REQUEST_BUCKETS_S = (0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0,
                     60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0)
# A KV transfer takes from ~100 us (a few blocks over NVLink) to seconds (long prompts over TCP).
KV_TRANSFER_BUCKETS_S = (0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1,
                         0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
KV_TRANSFER_BUCKETS_BYTES = tuple(float(4 ** k * 1024) for k in range(1, 12))  # 4 KiB .. 4 GiB
# vLLM's 1-2-5 series for token counts, up to a million.
PROMPT_TOKENS_BUCKETS = tuple(float(m * 10 ** e) for e in range(7) for m in (1, 2, 5))
PREDICTION_ERROR_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.2, 0.3, 0.5, 0.75, 1.0, 1.5, 2.0, 3.0, 5.0, 10.0)

# route_decisions_total's `reason` label: a small fixed set, never the policy's free-text sentence
# (that stays in the result's decision_reason), so the label's cardinality stays bounded.
REASON_FORCED = "forced"          # the client asked for the route
REASON_NO_PAIR = "no_pair"        # no prefill/decode pair was available: prefilled locally
ROUTES_TAKEN = ("colocated", "disaggregated")


def decision_reason_label(requested_route: str, policy_name: str, is_no_pair_fallback: bool) -> str:
    """The `reason` label of a decision: forced, no_pair, or the name of the policy that chose."""
    if is_no_pair_fallback:
        return REASON_NO_PAIR
    return REASON_FORCED if requested_route != "auto" else policy_name


def prefill_time_s(result: GenerateResult, t_dispatch: float, t_decode_start: float) -> float | None:
    """Seconds the prompt's prefill took as the router saw it.

    Disaggregated: from sending the prompt to the prefill worker until its KV was ready
    (`t_decode_start`). Colocated (or a fallback): from sending the request to the decode worker
    until its first token. None when no token came back.
    """
    if result.route == "disaggregated":
        return t_decode_start - t_dispatch
    if not result.token_times:
        return None
    return result.token_times[0] - t_decode_start


class RouterMetrics:
    """The deployment's metrics in a registry of their own; the router calls the observe_ methods."""

    def __init__(self, worker_ids: Iterable[str] = ()):
        self.registry = CollectorRegistry(auto_describe=True)
        r, p = self.registry, PREFIX
        self.ttft = Histogram(p + "time_to_first_token_seconds", "Time to first token, from the "
                              "router's arrival of the request", ["route"], buckets=TTFT_BUCKETS_S,
                              registry=r)
        self.prefill = Histogram(p + "request_prefill_time_seconds", "Prefill time of the prompt "
                                 "(remote prefill until KV ready, or local until first token)",
                                 ["route"], buckets=REQUEST_BUCKETS_S, registry=r)
        self.itl = Histogram(p + "inter_token_latency_seconds", "Time between consecutive output "
                             "tokens", ["route"], buckets=ITL_BUCKETS_S, registry=r)
        self.e2e = Histogram(p + "e2e_request_latency_seconds", "End-to-end request latency at the "
                             "router", ["route"], buckets=REQUEST_BUCKETS_S, registry=r)
        self.kv_transfer_s = Histogram(p + "kv_transfer_seconds", "Seconds of a request's KV "
                                       "transfer, as the KV connector measured it",
                                       buckets=KV_TRANSFER_BUCKETS_S, registry=r)
        self.kv_transfer_bytes = Histogram(p + "kv_transfer_bytes", "Bytes of a request's KV "
                                           "transfer", buckets=KV_TRANSFER_BUCKETS_BYTES, registry=r)
        self.prediction_error = Histogram(p + "ttft_prediction_error_ratio", "|predicted - actual| "
                                          "/ actual TTFT, for requests whose policy predicted it",
                                          ["route"], buckets=PREDICTION_ERROR_BUCKETS, registry=r)
        self.prompt_tokens = Histogram(p + "request_prompt_tokens", "Prompt length in tokens "
                                       "(the length mix is what makes prefills interfere)",
                                       ["route"], buckets=PROMPT_TOKENS_BUCKETS, registry=r)
        self.decisions = Counter(p + "route_decisions_total", "Routing decisions by route and "
                                 "reason", ["route", "reason"], registry=r)
        self.fallbacks = Counter(p + "route_fallbacks_total", "Requests that did not take the "
                                 "route they were given (prefilled locally instead)", registry=r)
        self.transfer_failures = Counter(p + "kv_transfer_failures_total", "Failed KV transfers as "
                                         "the engines count them", ["worker"], registry=r)
        self.running = Gauge(p + "num_requests_running", "Requests running in the worker's engine",
                             ["worker"], registry=r)
        self.waiting = Gauge(p + "num_requests_waiting", "Requests waiting in the worker's engine",
                             ["worker"], registry=r)
        self.kv_usage = Gauge(p + "kv_cache_usage_perc", "KV cache usage of the worker's engine "
                              "(fraction 0..1, as vLLM's kv_cache_usage_perc)", ["worker"], registry=r)
        # The engines' failure counts are cumulative; we add the difference since the last poll.
        self._last_failures: dict[str, int] = {}
        # Known label values get samples from the start (at zero), so that a dashboard or a check
        # sees the series before the first request of each kind.
        for route in ROUTES_TAKEN:
            for hist in (self.ttft, self.prefill, self.itl, self.e2e, self.prediction_error,
                         self.prompt_tokens):
                hist.labels(route=route)
        for wid in worker_ids:  # every worker has samples from the start, even at zero
            self.observe_load(wid, {})

    # ---- observations ------------------------------------------------------------------------
    def observe_decision(self, route: str, reason: str) -> None:
        self.decisions.labels(route=route, reason=reason).inc()

    def observe_result(self, result: GenerateResult, prefill_s: float | None) -> None:
        """Everything one completed request tells: latencies, its transfer, fallback, prediction."""
        route = result.route
        if result.token_times:
            self.ttft.labels(route=route).observe(result.ttft_s)
        for gap_s in result.itl_s:
            self.itl.labels(route=route).observe(gap_s)
        self.e2e.labels(route=route).observe(result.e2e_s)
        self.prompt_tokens.labels(route=route).observe(result.num_prompt_tokens)
        if prefill_s is not None:
            self.prefill.labels(route=route).observe(max(0.0, prefill_s))
        if result.kv_transfer_bytes > 0:
            self.kv_transfer_bytes.observe(result.kv_transfer_bytes)
            if result.kv_transfer_s is not None:
                self.kv_transfer_s.observe(result.kv_transfer_s)
        if result.fallback:
            self.fallbacks.inc()
        if result.predicted_ttft_s is not None and result.ttft_s > 0:
            error = abs(result.predicted_ttft_s - result.ttft_s) / result.ttft_s
            self.prediction_error.labels(route=route).observe(error)

    def observe_load(self, worker_id: str, load: dict) -> None:
        """One worker's polled engine stats (`EngineWorker.load()`)."""
        self.running.labels(worker=worker_id).set(load.get("num_running", 0))
        self.waiting.labels(worker=worker_id).set(load.get("num_waiting", 0))
        self.kv_usage.labels(worker=worker_id).set(load.get("kv_cache_usage", 0.0))
        failures = int(load.get("num_transfer_failures", 0))
        last = self._last_failures.get(worker_id, 0)
        delta = failures - last if failures >= last else failures  # a restarted engine counts from 0
        self.transfer_failures.labels(worker=worker_id).inc(delta)
        self._last_failures[worker_id] = failures

    # ---- exposition --------------------------------------------------------------------------
    def text(self) -> str:
        """The Prometheus text exposition of every metric above."""
        return generate_latest(self.registry).decode()


METRIC_NAMES = tuple(PREFIX + n for n in (
    "time_to_first_token_seconds", "request_prefill_time_seconds", "inter_token_latency_seconds",
    "e2e_request_latency_seconds", "kv_transfer_seconds", "kv_transfer_bytes",
    "num_requests_waiting", "num_requests_running", "kv_cache_usage_perc",
    "kv_transfer_failures_total", "route_decisions_total", "route_fallbacks_total",
    "ttft_prediction_error_ratio", "request_prompt_tokens"))

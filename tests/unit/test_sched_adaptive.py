"""The adaptive policy on Llama-3-8B / A100 roofline defaults (TTFT SLO by bucket, TPOT SLO 0.1 s).

Numbers quoted in comments are the model's predictions, for orientation.
"""
from __future__ import annotations

import pytest

from schedulers.hardware import HARDWARE_SPECS
from schedulers.model_spec import MODEL_SPECS
from schedulers.policies import AdaptivePolicy
from schedulers.slo import SloTable
from schedulers.step_time import StepTimeModel
from schedulers.types import ClusterView, LinkEstimate, NoCandidateError, RequestInfo, WorkerView

MODEL = StepTimeModel.from_roofline(MODEL_SPECS["llama-3-8b"], HARDWARE_SPECS["a100"])
POLICY = AdaptivePolicy(MODEL)
FAST = LinkEstimate(alpha_s=0.001, beta_bytes_per_s=25e9)
SLOW = LinkEstimate(alpha_s=0.001, beta_bytes_per_s=1e8)
BUSY_DECODER = WorkerView("d1", "decode", num_running=8, num_inflight=8)
PREFILLER = WorkerView("p1", "prefill")


def busy_view(link: LinkEstimate) -> ClusterView:
    return ClusterView((PREFILLER, BUSY_DECODER), {("p1", "d1"): link})


def test_short_prompt_stays_colocated_because_it_is_cheaper():
    # 512 tokens: both meet the 0.2 s SLO; colocated rides on the decode steps (~0.038 s of
    # engine time) where disaggregated pays its own steps (~0.047 s).
    decision = POLICY.decide(RequestInfo("r", 512, 16), busy_view(FAST))
    assert (decision.route, decision.decode_worker) == ("colocated", "d1")
    assert decision.predictions["colocated.engine_s"] < decision.predictions["disaggregated.engine_s"]
    assert "meets" in decision.reason


def test_long_prompt_moves_off_a_busy_decoder_over_a_fast_link():
    # 32K tokens: colocated chunks would stretch d1's 8 decoders' ITL to ~0.34 s > 0.1 s;
    # disaggregated TTFT ~4.2 s (prefill 4.05 + transfer 0.17 + first step) meets the 5 s SLO.
    decision = POLICY.decide(RequestInfo("r", 32768, 16), busy_view(FAST))
    assert (decision.route, decision.prefill_worker, decision.decode_worker) == ("disaggregated", "p1", "d1")
    assert decision.predictions["colocated.itl_s"] > 0.1
    assert decision.predicted_ttft_s == pytest.approx(decision.predictions["disaggregated.ttft_s"])
    assert decision.predicted_ttft_s < 5.0


def test_over_a_slow_link_the_least_violating_route_wins():
    # 4.3 GB at 0.1 GB/s is ~43 s of transfer (violation ~9.4x) against colocated's ITL
    # violation ~3.4x: neither meets, colocated violates least.
    decision = POLICY.decide(RequestInfo("r", 32768, 16), busy_view(SLOW))
    assert decision.route == "colocated"
    assert decision.predictions["colocated.violation"] < decision.predictions["disaggregated.violation"]
    assert "misses" in decision.reason


def test_an_idle_colocated_worker_beats_shipping_kv():
    # b1 decodes nothing, so a local prefill hurts nobody and saves the transfer.
    view = ClusterView((WorkerView("b1", "both"), PREFILLER, BUSY_DECODER), {("p1", "d1"): FAST})
    decision = POLICY.decide(RequestInfo("r", 32768, 16), view)
    assert (decision.route, decision.decode_worker) == ("colocated", "b1")


def test_queued_prefill_tokens_push_to_another_prefill_worker():
    queued = WorkerView("p1", "prefill", num_queued_prefill_tokens=60_000)
    view = ClusterView((queued, WorkerView("p2", "prefill"), BUSY_DECODER),
                       {("p1", "d1"): FAST, ("p2", "d1"): FAST})
    decision = POLICY.decide(RequestInfo("r", 32768, 16), view)
    assert decision.prefill_worker == "p2"


def test_pairs_without_a_link_estimate_are_skipped_unless_a_default_is_given():
    view = ClusterView((PREFILLER, BUSY_DECODER))
    decision = POLICY.decide(RequestInfo("r", 32768, 16), view)
    assert decision.route == "colocated" and "no link estimate" in decision.reason
    with_default = AdaptivePolicy(MODEL, default_link=FAST)
    assert with_default.decide(RequestInfo("r", 32768, 16), view).route == "disaggregated"


def test_view_kv_bytes_per_token_sizes_the_transfer():
    view = ClusterView((PREFILLER, BUSY_DECODER), {("p1", "d1"): SLOW}, kv_bytes_per_token=1000)
    decision = POLICY.decide(RequestInfo("r", 32768, 16), view)
    assert decision.predictions["disaggregated.transfer_s"] == pytest.approx(0.001 + 32768 * 1000 / 1e8)


def test_request_slo_overrides_the_table():
    # 8000 tokens: 1 s bucket; with its own 0.5 s TTFT SLO nothing meets (prefill alone ~0.7 s).
    decision = POLICY.decide(RequestInfo("r", 8000, 16, ttft_slo_s=0.5), busy_view(FAST))
    assert decision.predictions["ttft_slo_s"] == 0.5
    assert decision.predictions[f"{decision.route}.violation"] > 1


def test_custom_slo_table_changes_the_verdict():
    # A lax TPOT SLO (1 s) makes colocated acceptable for 32K on the busy decoder, and cheaper.
    lax = AdaptivePolicy(MODEL, slo_table=SloTable(tpot_slo_s=1.0))
    assert lax.decide(RequestInfo("r", 32768, 16), busy_view(FAST)).route == "colocated"


def test_no_decode_capable_worker_raises():
    with pytest.raises(NoCandidateError):
        POLICY.decide(RequestInfo("r", 100, 16), ClusterView((PREFILLER,)))


def test_predictions_are_recorded_for_both_routes():
    decision = POLICY.decide(RequestInfo("r", 4000, 16), busy_view(FAST))
    for route in ("colocated", "disaggregated"):
        for quantity in ("ttft_s", "queue_s", "prefill_s", "transfer_s", "first_step_s", "itl_s",
                         "extra_itl_s", "engine_s", "violation"):
            assert f"{route}.{quantity}" in decision.predictions
    assert decision.predictions["tpot_slo_s"] == 0.1


def test_extra_itl_is_what_the_local_prefill_adds_to_the_decode_step():
    decision = POLICY.decide(RequestInfo("r", 4000, 16), busy_view(FAST))
    decode_only_s = MODEL.predict(0, 0, [1024] * 8)
    p = decision.predictions
    assert p["colocated.extra_itl_s"] == pytest.approx(p["colocated.itl_s"] - decode_only_s)
    assert p["disaggregated.extra_itl_s"] == 0.0  # p1 decodes nothing


def test_a_tiny_request_on_idle_workers_stays_colocated():
    # A 1-token prompt, idle workers, a free link: both meet; colocated costs less engine time.
    free = ClusterView((WorkerView("b1", "both"), WorkerView("b2", "both")),
                       {("b1", "b2"): LinkEstimate(0.0, 1e30), ("b2", "b1"): LinkEstimate(0.0, 1e30)})
    assert POLICY.decide(RequestInfo("r", 1, 1), free).route == "colocated"


def test_a_full_prefix_hit_still_computes_the_last_token():
    decision = POLICY.decide(RequestInfo("r", 4000, 16, num_cached_tokens=4000), busy_view(FAST))
    assert decision.predictions["colocated.prefill_s"] == pytest.approx(MODEL.predict(1, 3999, [1024] * 8))


def test_a_request_lost_either_way_goes_where_it_harms_the_decodes_least():
    # A TTFT SLO of 1 ms is past saving on every worker (> lost_ttft_ratio times it). "a" has
    # the shorter queue, so the least TTFT, but 8 decodes with 10 ms of slack left; "b" has a
    # longer queue and nothing decoding. The request's TTFT is lost to goodput wherever it goes;
    # a's decodes are not yet: it goes to b (run 54, 7.73 req/s: a 3,179-token prompt predicted
    # at 5.8x its SLO went to the engine with the shorter queue and 10-odd decodes, whose TPOT
    # then ran at 117-175 ms against the 0.1 s SLO).
    a = WorkerView("a", "both", num_running=8, num_inflight=8, num_queued_prefill_tokens=0,
                   decode_slack_s=0.01)
    b = WorkerView("b", "both", num_inflight=1, num_queued_prefill_tokens=2000, decode_slack_s=float("inf"))
    request = RequestInfo("r", 2000, 16, ttft_slo_s=0.001)
    decision = POLICY.decide(request, ClusterView((a, b)))
    assert decision.decode_worker == "b"
    assert decision.predictions["colocated.decode_harm"] == 0.0
    assert decision.predictions["colocated.ttft_s"] > 2 * 0.001
    # Lost either way with no decodes at stake on either: the less loaded one.
    idle_a = WorkerView("a", "both", num_inflight=3, decode_slack_s=float("inf"))
    assert POLICY.decide(request, ClusterView((idle_a, b))).decode_worker == "b"


def test_meeting_order_picks_among_slo_meeting_workers_by_ttft_or_by_load():
    # Both workers meet the SLO. "a" has the shorter queue (lower TTFT) but more requests in
    # flight; "b" the longer queue and fewer. "ttft" (default) takes a, "load" takes b, as the
    # colocated policy would; where only one meets, both orders take it.
    a = WorkerView("a", "both", num_running=6, num_inflight=6, decode_slack_s=float("inf"))
    b = WorkerView("b", "both", num_inflight=1, num_queued_prefill_tokens=512, decode_slack_s=float("inf"))
    request = RequestInfo("r", 256, 16, ttft_slo_s=10.0)
    assert POLICY.decide(request, ClusterView((a, b))).decode_worker == "a"
    by_load = AdaptivePolicy(MODEL, meeting_order="load")
    assert by_load.decide(request, ClusterView((a, b))).decode_worker == "b"
    long_queue = WorkerView("b", "both", num_inflight=1, num_queued_prefill_tokens=200_000,
                            decode_slack_s=float("inf"))
    tight = RequestInfo("r", 256, 16, ttft_slo_s=0.2)
    assert by_load.decide(tight, ClusterView((a, long_queue))).decode_worker == "a"
    with pytest.raises(ValueError, match="meeting_order"):
        AdaptivePolicy(MODEL, meeting_order="fastest")


def test_both_meet_picks_between_two_slo_meeting_routes_by_engine_or_by_decoder_time():
    # An idle prefill-only worker and a decoder with a few streams: a short prompt meets its SLOs
    # either way. "engine" (default) keeps it colocated, cheaper in engine seconds; "decoder"
    # ships it, since only the decode worker's first step then falls on a decode-capable worker.
    p = WorkerView("p", "prefill", decode_slack_s=float("inf"))
    b = WorkerView("b", "both", num_running=4, num_inflight=4, decode_slack_s=float("inf"))
    view = ClusterView((p, b), {("p", "b"): LinkEstimate(0.0001, 25e9)})
    request = RequestInfo("r", 512, 16, ttft_slo_s=10.0, tpot_slo_s=10.0)
    by_engine = POLICY.decide(request, view)
    by_decoder = AdaptivePolicy(MODEL, both_meet="decoder").decide(request, view)
    assert by_engine.route == "colocated"
    assert (by_decoder.route, by_decoder.prefill_worker) == ("disaggregated", "p")
    assert by_decoder.predictions["disaggregated.ttft_s"] <= 10.0  # both met: the rule, not a miss, chose
    with pytest.raises(ValueError, match="both_meet"):
        AdaptivePolicy(MODEL, both_meet="cheapest")

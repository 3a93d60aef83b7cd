"""The router learns each route's path from the engines' own first-token timestamps."""
from types import SimpleNamespace

import pytest

from pd_serve.router import Router, engines_share_s
from pd_serve.worker import _engine_ttft_s
from schedulers.feedback import TtftFeedback
from schedulers.path_estimate import RecentMedian


def test_the_engines_share_is_from_the_hand_over_to_vllms_first_token_timestamp():
    out = SimpleNamespace(metrics=SimpleNamespace(first_token_ts=105.25))
    assert _engine_ttft_s(out, 105.0) == pytest.approx(0.25)
    assert _engine_ttft_s(SimpleNamespace(metrics=None), 105.0) is None  # vLLM kept no stats
    assert _engine_ttft_s(SimpleNamespace(metrics=SimpleNamespace(first_token_ts=0.0)), 105.0) is None


def test_a_route_holds_the_share_of_every_engine_it_calls():
    assert engines_share_s("colocated", {"decode": 0.044}) == pytest.approx(0.044)
    assert engines_share_s("disaggregated", {"prefill": 0.2, "decode": 0.086}) == pytest.approx(0.286)
    assert engines_share_s("disaggregated", {"prefill": None, "decode": 0.1}) is None


def _router():
    return SimpleNamespace(paths={"colocated": RecentMedian(), "disaggregated": RecentMedian()},
                           prediction_log=[], feedback=TtftFeedback(), _load_at_decision={},
                           infos={"both-0": SimpleNamespace(role="both")})


def _result(route, ttft_s):
    return SimpleNamespace(route=route, ttft_s=ttft_s, request_id=f"r-{route}", num_prompt_tokens=100,
                           predicted_ttft_s=0.05, fallback=None, kv_transfer_bytes=0)


def test_the_path_is_the_ttft_less_every_engines_share():
    r = _router()
    decision = SimpleNamespace(predictions={})
    Router._observe_actuals(r, _result("colocated", 0.050), decision, {"decode": 0.044})
    Router._observe_actuals(r, _result("disaggregated", 0.300), decision, {"prefill": 0.200, "decode": 0.086})
    assert r.paths["colocated"].value == pytest.approx(0.006)
    assert r.paths["disaggregated"].value == pytest.approx(0.014)
    assert [e["engines_s"] for e in r.prediction_log] == pytest.approx([0.044, 0.286])


def test_a_request_without_an_engines_timestamp_teaches_nothing():
    r = _router()
    Router._observe_actuals(r, _result("disaggregated", 0.3), SimpleNamespace(predictions={}),
                            {"prefill": None, "decode": 0.1})
    assert r.paths["disaggregated"].count == 0
    assert r.prediction_log[0]["engines_s"] is None


def test_the_feedback_learns_the_calibrated_prediction_at_the_load_it_was_decided_at():
    r = _router()
    seen = []
    r.feedback = SimpleNamespace(observe=lambda *args: seen.append(args))
    r._load_at_decision["r-colocated"] = (1.5, 3, "both-0")  # its worker's speed factor, host load, id
    decision = SimpleNamespace(predictions={"colocated.queue_s": 0.015, "colocated.prefill_s": 0.045})
    Router._observe_actuals(r, _result("colocated", 0.080), decision, {"decode": 0.072})
    assert len(seen) == 1 and seen[0][3] == "both"  # learnt as its kind of engine's
    assert seen[0][:3] == pytest.approx((0.04, 0.072, 3))  # 0.06 predicted / 1.5: the idle-host model's
    assert r.prediction_log[0]["host_inflight"] == 3 and r.prediction_log[0]["speed_factor"] == 1.5


def test_the_load_on_a_worker_is_what_is_in_flight_on_its_host():
    import collections
    infos = {"both-0": SimpleNamespace(node_ip="10.0.0.1"), "both-1": SimpleNamespace(node_ip="10.0.0.1"),
             "prefill-0": SimpleNamespace(node_ip="10.0.0.2")}
    r = SimpleNamespace(infos=infos, inflight=collections.Counter({"both-0": 2, "both-1": 1, "prefill-0": 5}))
    assert Router.host_inflight(r, "both-1") == 3  # both engines of the first node
    assert Router.host_inflight(r, "prefill-0") == 5


def test_the_view_prices_a_worker_by_the_tpot_slack_of_the_requests_it_streams(monkeypatch):
    from schedulers.decode_slack import DecodeProgress

    r = SimpleNamespace(predictor=None, decoding={"w": {"a": DecodeProgress(100.0, 11, 32, 0.1)}, "idle": {}})
    monkeypatch.setattr("pd_serve.router.time.time", lambda: 100.5)
    assert Router._decode_slack_s(r, "w", 1, 1.0) == pytest.approx(31 * (0.1 - 0.05))
    assert Router._decode_slack_s(r, "idle", 0, 1.0) == float("inf")


def test_the_view_prices_a_full_worker_by_its_nearest_finishes_and_a_prefill_worker_not_at_all():
    import collections

    from schedulers.decode_slack import DecodeProgress

    decoding = {"b": {"x": DecodeProgress(0.0, 10, 32, 0.1), "y": DecodeProgress(0.0, 28, 32, 0.1)}, "p": {}}
    infos = {"b": SimpleNamespace(role="both", max_num_seqs=2), "p": SimpleNamespace(role="prefill", max_num_seqs=2)}
    predictor = SimpleNamespace(decode_step_s=lambda n, speed: 0.01 * n * speed)
    r = SimpleNamespace(predictor=predictor, decoding=decoding, infos=infos,
                        inflight=collections.Counter({"b": 2, "p": 9}))
    assert Router._slot_wait_s(r, "b", 1.5) == pytest.approx(4 * 0.03)  # y's 4 tokens, 2 decodes at x1.5
    r.inflight["b"] = 1
    assert Router._slot_wait_s(r, "b", 1.5) == 0.0  # a slot is free
    assert Router._slot_wait_s(r, "p", 1.0) == 0.0  # prompts leave a prefill worker once prefilled


def _stall_router(decoding, last_output_s, roles):
    import collections

    from schedulers.prefill_queues import PrefillQueues

    # longest step 0.25 s at speed 1; a queued prompt's prefill 0.1 s per 1,000 tokens; the
    # longer route's path 0.25 s
    predictor = SimpleNamespace(longest_step_s=lambda n, speed, longest_prompt: 0.25 * speed,
                                prefill_queue_s=lambda tokens, n, speed: 1e-4 * tokens * speed)
    paths = {"colocated": SimpleNamespace(value=0.05), "disaggregated": SimpleNamespace(value=0.25)}
    return SimpleNamespace(predictor=predictor, decoding=decoding, prefill_queues=PrefillQueues(), paths=paths,
                           infos={w: SimpleNamespace(role=role) for w, role in roles.items()},
                           last_output_s=last_output_s, stalled=set(), counters=collections.Counter())


def test_the_view_counts_a_worker_silent_while_it_streams_as_stalled(monkeypatch, caplog):
    from schedulers.decode_slack import DecodeProgress

    r = _stall_router({"w": {"a": DecodeProgress(100.0, 3, 32, 0.1)}, "idle": {}},
                      {"w": 100.0, "idle": 90.0}, {"w": "both", "idle": "both"})
    monkeypatch.setattr("pd_serve.router.time.time", lambda: 100.4)
    assert Router._stall_s(r, "w", 1, 1.0) == 0.0  # 0.4 s: within two longest steps
    assert Router._stall_s(r, "idle", 0, 1.0) == 0.0  # nothing streams from it or waits on it
    monkeypatch.setattr("pd_serve.router.time.time", lambda: 101.5)
    with caplog.at_level("WARNING", logger="pd_serve.router"):
        assert Router._stall_s(r, "w", 1, 1.0) == pytest.approx(1.0)
        assert Router._stall_s(r, "w", 1, 1.0) == pytest.approx(1.0)
    assert r.counters["worker_stalls"] == 1 and r.stalled == {"w"}  # counted and logged once
    assert sum("no token for 1.50 s" in m for m in caplog.messages) == 1
    r.last_output_s["w"] = 101.4  # it stepped again
    assert Router._stall_s(r, "w", 1, 1.0) == 0.0 and r.stalled == set()
    r.prefill_queues.sent("idle", "q", 1000, 101.0)  # a decode-capable worker's first prompt: 0.1 s
    monkeypatch.setattr("pd_serve.router.time.time", lambda: 102.0)
    assert Router._stall_s(r, "idle", 0, 1.0) == pytest.approx(1.0 - 2 * (0.1 + 0.25))


def test_a_prefill_worker_silent_past_its_oldest_prompt_is_stalled(monkeypatch, caplog):
    r = _stall_router({"p": {}}, {"p": 50.0}, {"p": "prefill"})
    r.prefill_queues.sent("p", "a", 2000, 100.0)  # 0.2 s of prefill
    # Allowed: twice (the oldest prompt's 0.2 s + the longer path's 0.25 s) = 0.9 s from its sending.
    monkeypatch.setattr("pd_serve.router.time.time", lambda: 100.85)
    assert Router._stall_s(r, "p", 0, 1.0) == 0.0
    r.prefill_queues.sent("p", "b", 3000, 100.85)  # a later prompt does not lengthen the wait
    monkeypatch.setattr("pd_serve.router.time.time", lambda: 101.5)
    with caplog.at_level("WARNING", logger="pd_serve.router"):
        assert Router._stall_s(r, "p", 0, 1.0) == pytest.approx(0.6)
        assert Router._stall_s(r, "p", 0, 1.0) == pytest.approx(0.6)
    assert r.counters["worker_stalls"] == 1 and r.stalled == {"p"}  # counted and logged once
    assert sum("no prefilled prompt for 1.50 s" in m and "2 prompts wait" in m for m in caplog.messages) == 1
    # The first prompt's KV came back at 101.45: silence counts from then, over the next one's 0.3 s.
    r.prefill_queues.prefilled("p", "a")
    r.last_output_s["p"] = 101.45
    assert Router._stall_s(r, "p", 0, 1.0) == 0.0 and r.stalled == set()
    monkeypatch.setattr("pd_serve.router.time.time", lambda: 102.65)  # 1.2 s > 2 x (0.3 + 0.25)
    assert Router._stall_s(r, "p", 0, 1.0) == pytest.approx(0.1)
    assert Router._stall_s(r, "p", 0, 2.0) == 0.0  # a worker twice as slow: 2 x (0.6 + 0.25)
    r.prefill_queues.prefilled("p", "b")  # nothing waits: no stall
    assert Router._stall_s(r, "p", 0, 1.0) == 0.0


def test_a_prefill_workers_wait_holds_the_prompts_its_next_step_batches(monkeypatch):
    # Busy until its last output at 100.2: the step that then begins batches both prompts sent
    # before it (2,000 + 3,000 tokens: 0.5 s), so it may stay silent 2 x (0.5 + 0.25) = 1.5 s.
    r = _stall_router({"p": {}}, {"p": 100.2}, {"p": "prefill"})
    r.prefill_queues.sent("p", "a", 2000, 100.0)
    r.prefill_queues.sent("p", "b", 3000, 100.015)
    monkeypatch.setattr("pd_serve.router.time.time", lambda: 101.6)
    assert Router._stall_s(r, "p", 0, 1.0) == 0.0  # over the oldest alone: 1.4 s silent, 0.5 s past 2 x 0.45
    r.prefill_queues.sent("p", "c", 4000, 100.5)  # reached it after that step began: not in it
    monkeypatch.setattr("pd_serve.router.time.time", lambda: 101.8)
    assert Router._stall_s(r, "p", 0, 1.0) == pytest.approx(0.1)

"""Dynamo-style rule: disaggregate iff uncached > threshold and the prefill queue is short."""
from __future__ import annotations

import pytest

from schedulers.policies import LengthThresholdPolicy
from schedulers.types import ClusterView, NoCandidateError, RequestInfo, WorkerView

PAIR = ClusterView((WorkerView("b1", "both"), WorkerView("p1", "prefill"), WorkerView("d1", "decode")))
POLICY = LengthThresholdPolicy()  # threshold 1024 tokens, max prefill queue 4


def request(num_prompt_tokens: int, num_cached_tokens: int = 0) -> RequestInfo:
    return RequestInfo("r", num_prompt_tokens, 16, num_cached_tokens)


def test_exactly_at_the_threshold_stays_colocated():
    # 1024 uncached, 1024 > 1024 is false.
    decision = POLICY.decide(request(1024), PAIR)
    assert (decision.route, decision.decode_worker) == ("colocated", "b1")
    assert "1024 uncached tokens <= threshold 1024" in decision.reason


def test_one_token_above_the_threshold_disaggregates():
    # 1025 > 1024.
    decision = POLICY.decide(request(1025), PAIR)
    assert (decision.route, decision.prefill_worker, decision.decode_worker) == ("disaggregated", "p1", "d1")


def test_cached_tokens_do_not_count():
    # 3000 - 2000 = 1000 uncached <= 1024.
    assert POLICY.decide(request(3000, 2000), PAIR).route == "colocated"


def test_a_prefill_queue_at_the_limit_keeps_it_colocated():
    # Queue 4 is not < 4; queue 3 is.
    busy = ClusterView((WorkerView("p1", "prefill", num_inflight=4), WorkerView("d1", "decode")))
    assert POLICY.decide(request(5000), busy).route == "colocated"
    assert POLICY.decide(request(5000), busy).decode_worker == "d1"
    free = ClusterView((WorkerView("p1", "prefill", num_inflight=3), WorkerView("d1", "decode")))
    assert POLICY.decide(request(5000), free).route == "disaggregated"


def test_optional_token_queue_bound():
    policy = LengthThresholdPolicy(max_prefill_queue_tokens=8000)
    queued = ClusterView((WorkerView("p1", "prefill", num_queued_prefill_tokens=8000), WorkerView("d1", "decode")))
    assert policy.decide(request(5000), queued).route == "colocated"


def test_long_prompt_without_a_pair_stays_colocated():
    alone = ClusterView((WorkerView("b1", "both"),))
    decision = POLICY.decide(request(50_000), alone)
    assert decision.route == "colocated" and "no prefill/decode pair" in decision.reason


def test_custom_threshold():
    assert LengthThresholdPolicy(threshold_tokens=4096).decide(request(4096), PAIR).route == "colocated"
    assert LengthThresholdPolicy(threshold_tokens=4096).decide(request(4097), PAIR).route == "disaggregated"


def test_no_decode_capable_worker_raises():
    with pytest.raises(NoCandidateError):
        POLICY.decide(request(10), ClusterView((WorkerView("p1", "prefill"),)))

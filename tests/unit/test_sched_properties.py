"""Property tests of every policy's invariants over random clusters and requests (hypothesis):

- never a dead worker; roles as the route needs; prefill and decode workers distinct;
- never past a worker's max_model_len (prompt + max_tokens where it decodes, prompt + 1 where it
  only prefills);
- never a worker (or a prefill/decode pair) with a full KV cache while one with room could serve;
- NoCandidateError only when no worker can serve;
- the same inputs give the same decision.
"""
from __future__ import annotations

import dataclasses

from hypothesis import given, settings
from hypothesis import strategies as st

from schedulers.candidates import COLOCATED_ROLES, DECODE_ROLES, PREFILL_ROLES
from schedulers.hardware import HARDWARE_SPECS
from schedulers.model_spec import MODEL_SPECS
from schedulers.policies import AdaptivePolicy, ColocatedPolicy, DisaggregatedPolicy, LengthThresholdPolicy
from schedulers.step_time import StepTimeModel
from schedulers.types import (ROLES, ROUTE_COLOCATED, ROUTE_DISAGGREGATED, ClusterView, LinkEstimate,
                              NoCandidateError, RequestInfo, WorkerView)

MODEL = StepTimeModel.from_roofline(MODEL_SPECS["llama-3-8b"], HARDWARE_SPECS["h100"])
POLICIES = {
    "colocated": ColocatedPolicy(),
    "disaggregated": DisaggregatedPolicy(),
    "length_threshold": LengthThresholdPolicy(threshold_tokens=1024, max_prefill_queue=4),
    "adaptive": AdaptivePolicy(MODEL),
    "adaptive+default_link": AdaptivePolicy(MODEL, default_link=LinkEstimate(1e-3, 1e10)),
}


@st.composite
def worker_views(draw, worker_id: str) -> WorkerView:
    return WorkerView(
        worker_id=worker_id, role=draw(st.sampled_from(ROLES)), is_healthy=draw(st.booleans()),
        num_running=draw(st.integers(0, 32)), num_waiting=draw(st.integers(0, 8)),
        kv_cache_usage=draw(st.sampled_from([0.0, 0.3, 0.97, 1.0]) | st.floats(0.0, 1.0)),
        num_inflight=draw(st.integers(0, 16)), num_queued_prefill_tokens=draw(st.integers(0, 20000)),
        max_model_len=draw(st.sampled_from([0, 2048, 8192, 32768])))


@st.composite
def clusters(draw) -> ClusterView:
    n = draw(st.integers(1, 5))
    workers = tuple(draw(worker_views(f"w{i}")) for i in range(n))
    links = {}
    for p in workers:
        for d in workers:
            if p.worker_id != d.worker_id and draw(st.booleans()):
                links[(p.worker_id, d.worker_id)] = LinkEstimate(
                    draw(st.floats(0.0, 0.01)), draw(st.floats(1e8, 5e10)))
    return ClusterView(workers, links, kv_bytes_per_token=draw(st.sampled_from([0, 131072])))


@st.composite
def requests(draw) -> RequestInfo:
    prompt = draw(st.integers(1, 40000))
    return RequestInfo("r", prompt, draw(st.integers(1, 1024)),
                       num_cached_tokens=draw(st.integers(0, prompt)))


def _able(view: ClusterView, roles, num_tokens: int) -> list[WorkerView]:
    return [w for w in view.workers if w.is_healthy and w.role in roles and w.fits(num_tokens)]


def _check_leg(view: ClusterView, worker_id: str, roles, num_tokens: int) -> WorkerView:
    worker = next(w for w in view.workers if w.worker_id == worker_id)
    assert worker.is_healthy and worker.role in roles
    assert worker.fits(num_tokens), (worker, num_tokens)
    return worker


@settings(max_examples=300, deadline=None)
@given(view=clusters(), request=requests(), name=st.sampled_from(sorted(POLICIES)))
def test_decisions_respect_health_roles_lengths_and_full_caches(view, request, name):
    policy = POLICIES[name]
    decode_tokens = request.num_prompt_tokens + request.max_tokens
    try:
        decision = policy.decide(request, view)
    except NoCandidateError:
        can_colocate = bool(_able(view, COLOCATED_ROLES, decode_tokens))
        can_pair = any(p.worker_id != d.worker_id
                       for p in _able(view, PREFILL_ROLES, request.num_prompt_tokens + 1)
                       for d in _able(view, DECODE_ROLES, decode_tokens))
        # colocated needs one decode-capable worker; disaggregated a pair; the others either.
        assert not (can_colocate if name == "colocated" else can_pair if name == "disaggregated"
                    else can_colocate)
        return
    if decision.route == ROUTE_COLOCATED:
        assert decision.prefill_worker is None
        worker = _check_leg(view, decision.decode_worker, COLOCATED_ROLES, decode_tokens)
        if worker.is_full:
            assert all(w.is_full for w in _able(view, COLOCATED_ROLES, decode_tokens)), \
                "full worker chosen over one with room"
    else:
        assert decision.route == ROUTE_DISAGGREGATED
        assert decision.prefill_worker != decision.decode_worker
        decode = _check_leg(view, decision.decode_worker, DECODE_ROLES, decode_tokens)
        prefill = _check_leg(view, decision.prefill_worker, PREFILL_ROLES, request.num_prompt_tokens + 1)
        if decode.is_full or prefill.is_full:
            assert not any(p.worker_id != d.worker_id and not (p.is_full or d.is_full)
                           for p in _able(view, PREFILL_ROLES, request.num_prompt_tokens + 1)
                           for d in _able(view, DECODE_ROLES, decode_tokens)), \
                "pair with a full worker chosen over a pair with room"


@settings(max_examples=150, deadline=None)
@given(view=clusters(), request=requests(), name=st.sampled_from(sorted(POLICIES)))
def test_same_inputs_same_decision(view, request, name):
    policy = POLICIES[name]
    twin = ClusterView(tuple(dataclasses.replace(w) for w in view.workers), dict(view.links),
                       view.kv_bytes_per_token)

    def outcome(v):
        try:
            return policy.decide(dataclasses.replace(request), v)
        except NoCandidateError as err:
            return str(err)

    assert outcome(view) == outcome(twin) == outcome(view)

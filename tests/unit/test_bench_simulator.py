"""The simulator end to end: single-request times match the cost model, the seeds' batch
effects appear, disaggregation trades interference for transfer time, nothing leaks, and the
real policy objects are the ones called. Llama-3-8B on A100 roofline defaults throughout."""
from __future__ import annotations

from dataclasses import dataclass, field

import pytest

from bench.metrics import summarize
from bench.simulator import ClusterSpec, EngineSpec, LinkSpec, get_link, simulate
from bench.workloads import RequestSpec, Workload, fixed, mixed_batch, sharegpt, uniform_batch
from schedulers.hardware import HARDWARE_SPECS
from schedulers.model_spec import MODEL_SPECS
from schedulers.policies import AdaptivePolicy, ColocatedPolicy, DisaggregatedPolicy
from schedulers.registry import make_policy
from schedulers.route_prediction import RoutePredictor
from schedulers.step_time import StepTimeModel
from schedulers.types import ClusterView, Decision, RequestInfo

MODEL = StepTimeModel.from_roofline(MODEL_SPECS["llama-3-8b"], HARDWARE_SPECS["a100"], 16)
NVLINK, ETHERNET = get_link("nvlink"), get_link("eth_25g")


def cluster(roles, link=NVLINK, shared_link=False, **engine):
    engine.setdefault("num_kv_blocks", 20000)
    engine.setdefault("max_model_len", 8192)
    return ClusterSpec.from_roles(MODEL, roles, EngineSpec(**engine), link, shared_link=shared_link)


def one_request(input_tokens, output_tokens=4, arrival_s=0.0):
    return Workload("one", (RequestSpec("r0", arrival_s, input_tokens, output_tokens),))


def ttfts(result, bucket=None):
    return [r.ttft_s for r in result.records if bucket is None or r.bucket == bucket]


def mean(values):
    return sum(values) / len(values)


# ---- single requests against the cost model ------------------------------------------------------

def test_a_lone_colocated_request_takes_the_cost_models_prefill_time():
    result = simulate(one_request(2000), cluster({"both": 1}), ColocatedPolicy())
    assert result.records[0].ttft_s == pytest.approx(MODEL.predict(2000, 0, []), rel=1e-9)


def test_a_lone_chunked_request_takes_the_sum_of_its_chunks():
    # 5000 tokens in 2048-token chunks: (2048 over 0), (2048 over 2048), (904 over 4096).
    expected = sum(MODEL.chunked_prefill_steps_s(5000, 0, 2048))
    result = simulate(one_request(5000), cluster({"both": 1}, max_num_batched_tokens=2048), ColocatedPolicy())
    assert result.records[0].ttft_s == pytest.approx(expected, rel=1e-9)


def test_a_lone_disaggregated_request_adds_the_transfer_and_the_first_decode_step():
    # TTFT = prefill on P + (alpha + KV bytes / bandwidth) + the step on D that computes the last
    # prompt token over the shipped KV: the schedulers' route prediction, term by term.
    n = 3000
    kv_bytes = MODEL.kv.bytes_for_tokens(n)
    expected = MODEL.predict(n, 0, []) + NVLINK.alpha_s + kv_bytes / NVLINK.bandwidth_bytes_per_s \
        + MODEL.predict(1, n - 1, [])
    result = simulate(one_request(n), cluster({"prefill": 1, "decode": 1}, max_num_batched_tokens=4096),
                      DisaggregatedPolicy())
    r = result.records[0]
    assert (r.route, r.prefill_worker, r.decode_worker) == ("disaggregated", "prefill-0", "decode-0")
    assert r.ttft_s == pytest.approx(expected, rel=1e-9)
    assert r.kv_transfer_bytes == kv_bytes
    assert r.kv_transfer_s == pytest.approx(NVLINK.alpha_s + kv_bytes / NVLINK.bandwidth_bytes_per_s, rel=1e-9)


def test_on_an_idle_cluster_the_adaptive_predictions_are_what_the_simulator_measures():
    # The adaptive policy predicts both routes with the same cost model and chunk size; on an idle
    # cluster the simulator reproduces each prediction exactly.
    idle = cluster({"prefill": 1, "decode": 1}, max_model_len=32768, max_num_batched_tokens=2048)
    adaptive = simulate(one_request(20000), idle, AdaptivePolicy(MODEL, chunk_tokens=2048), keep_decisions=True)
    predictions = adaptive.decisions[0].predictions
    measured = {route: simulate(one_request(20000), idle, policy).records[0].ttft_s
                for route, policy in (("colocated", ColocatedPolicy()), ("disaggregated", DisaggregatedPolicy()))}
    assert measured["colocated"] == pytest.approx(predictions["colocated.ttft_s"], rel=1e-9)
    assert measured["disaggregated"] == pytest.approx(predictions["disaggregated.ttft_s"], rel=1e-9)
    assert adaptive.records[0].ttft_s == pytest.approx(adaptive.records[0].predicted_ttft_s, rel=1e-9)


def test_every_policy_gets_the_cost_models_ttft_prediction_as_live():
    # The colocated policy predicts nothing; the router fills in the cost model's TTFT for the
    # route taken, which on an idle worker is exactly what the simulator measures.
    r = simulate(one_request(3000), cluster({"both": 1}), ColocatedPolicy()).records[0]
    assert r.predicted_ttft_s == pytest.approx(r.ttft_s, rel=1e-9)


def test_decode_steps_space_the_tokens():
    result = simulate(one_request(100, output_tokens=5), cluster({"both": 1}), ColocatedPolicy())
    r = result.records[0]
    assert len(r.token_times) == 5 and r.finish_s == r.token_times[-1]
    # Each gap is one decode step over a context of 100, 101, 102, 103 tokens.
    assert r.itl_s == pytest.approx([MODEL.predict(0, 0, [c]) for c in (100, 101, 102, 103)], rel=1e-9)


# ---- the seeds' batches ----------------------------------------------------------------------------

SEED_NO_CHUNKING = dict(max_num_batched_tokens=4160, max_model_len=4160, enable_chunked_prefill=False,
                        max_num_seqs=8)


def test_one_long_prompt_in_the_batch_delays_the_short_ones():
    # No chunking, a 4160-token budget: 8 x 512 share one step (~0.31 s); with 1 x 4096 first in
    # line, it takes a step alone (~0.33 s) and the 7 short ones follow (~0.61 s): about 2x.
    uniform = simulate(uniform_batch(), cluster({"both": 1}, **SEED_NO_CHUNKING), ColocatedPolicy())
    mixed = simulate(mixed_batch(), cluster({"both": 1}, **SEED_NO_CHUNKING), ColocatedPolicy())
    short_uniform, short_mixed = mean(ttfts(uniform, "short")), mean(ttfts(mixed, "short"))
    assert short_mixed > 1.8 * short_uniform
    assert ttfts(mixed, "long")[0] == pytest.approx(MODEL.predict(4096, 0, []), rel=1e-9)


def test_chunking_lowers_the_short_prompts_ttft_and_raises_the_long_ones():
    # 2048-token budget with at most 512 tokens per request and step: the short prompts share the
    # first steps with the long one's chunks instead of waiting for all of it.
    unchunked = simulate(mixed_batch(), cluster({"both": 1}, **SEED_NO_CHUNKING), ColocatedPolicy())
    chunked = simulate(mixed_batch(), cluster({"both": 1}, max_num_batched_tokens=2048,
                                              long_prefill_token_threshold=512, max_num_seqs=8), ColocatedPolicy())
    assert mean(ttfts(chunked, "short")) < 0.6 * mean(ttfts(unchunked, "short"))
    assert ttfts(chunked, "long")[0] > 1.5 * ttfts(unchunked, "long")[0]


def test_disaggregation_removes_the_long_prefills_interference_on_decode_itl():
    # Four short requests decode; a 16K prompt arrives at 0.5 s. Colocated, its 2048-token chunks
    # (~0.2 s each) land between their tokens; disaggregated, the decode worker never runs them.
    requests = tuple(RequestSpec(f"s{i}", 0.0, 256, 200, "short") for i in range(4)) + \
        (RequestSpec("long", 0.5, 16384, 8, "long"),)
    workload = Workload("interference", requests)
    policy = make_policy("length_threshold", threshold_tokens=1024)
    colocated = simulate(workload, cluster({"both": 1}, max_model_len=32768), ColocatedPolicy())
    split = simulate(workload, cluster({"prefill": 1, "both": 1}, max_model_len=32768), policy)
    worst_gap = lambda result: max(g for r in result.records if r.bucket == "short" for g in r.itl_s)
    decode_only_s = MODEL.predict(0, 0, [456] * 4)
    assert worst_gap(colocated) > 10 * decode_only_s
    assert worst_gap(split) < 3 * decode_only_s
    assert [r.route for r in split.records] == ["colocated"] * 4 + ["disaggregated"]


# ---- transfers -------------------------------------------------------------------------------------

def test_transfer_time_grows_with_bytes_over_bandwidth():
    pd = {"prefill": 1, "decode": 1}
    fast = simulate(one_request(4096), cluster(pd, NVLINK), DisaggregatedPolicy()).records[0]
    slow = simulate(one_request(4096), cluster(pd, ETHERNET), DisaggregatedPolicy()).records[0]
    kv_bytes = MODEL.kv.bytes_for_tokens(4096)  # 512 MiB
    # 25 Gb/s Ethernet: 0.54 GB / 3.125 GB/s ~ 0.17 s; NVLink 450 GB/s: ~1.2 ms.
    assert slow.kv_transfer_s - fast.kv_transfer_s == pytest.approx(
        kv_bytes / ETHERNET.bandwidth_bytes_per_s + ETHERNET.alpha_s
        - kv_bytes / NVLINK.bandwidth_bytes_per_s - NVLINK.alpha_s, rel=1e-9)
    assert slow.ttft_s > fast.ttft_s + 0.15
    bigger = simulate(one_request(8192, 2), cluster(pd, ETHERNET, max_model_len=16384),
                      DisaggregatedPolicy()).records[0]
    assert bigger.kv_transfer_s > 1.9 * slow.kv_transfer_s


def test_transfers_on_a_shared_link_slow_each_other():
    # Two prefill workers finish the same prompt at the same instant and ship to one decode
    # worker: on one shared link each moves at half the bandwidth.
    requests = (RequestSpec("a", 0.0, 4096, 2), RequestSpec("b", 0.0, 4096, 2))
    workload = Workload("pair", requests)
    roles = {"prefill": 2, "decode": 1}
    alone = ETHERNET.alpha_s + MODEL.kv.bytes_for_tokens(4096) / ETHERNET.bandwidth_bytes_per_s
    separate = simulate(workload, cluster(roles, ETHERNET), DisaggregatedPolicy())
    shared = simulate(workload, cluster(roles, ETHERNET, shared_link=True), DisaggregatedPolicy())
    assert {r.prefill_worker for r in shared.records} == {"prefill-0", "prefill-1"}
    assert [r.kv_transfer_s for r in separate.records] == pytest.approx([alone, alone], rel=1e-9)
    assert [r.kv_transfer_s for r in shared.records] == pytest.approx(
        [2 * alone - ETHERNET.alpha_s] * 2, rel=1e-9)


# ---- bookkeeping ---------------------------------------------------------------------------------

@pytest.mark.parametrize("roles, policy", [
    ({"both": 2}, ColocatedPolicy()),
    ({"prefill": 1, "decode": 1}, DisaggregatedPolicy()),
    ({"prefill": 1, "both": 1}, make_policy("length_threshold", threshold_tokens=512)),
    ({"both": 2}, AdaptivePolicy(MODEL)),
])
def test_every_request_finishes_and_every_kv_block_comes_back(roles, policy):
    workload = sharegpt(300, rate_per_s=20, seed=1, max_input_tokens=7000, max_output_tokens=300)
    result = simulate(workload, cluster(roles, max_model_len=8192), policy)
    assert all(r.ok and len(r.token_times) == r.output_tokens for r in result.records)
    assert result.num_leaked_blocks == 0


def test_a_small_kv_pool_preempts_recomputes_and_still_returns_every_block():
    workload = fixed(40, input_tokens=500, output_tokens=300, rate_per_s=200, seed=0)
    result = simulate(workload, cluster({"both": 1}, num_kv_blocks=400, max_model_len=1024), ColocatedPolicy())
    assert result.num_preemptions > 0
    assert all(r.ok and len(r.token_times) == 300 for r in result.records)
    assert result.num_leaked_blocks == 0


def test_a_request_longer_than_the_engines_fails_without_stopping_the_run():
    workload = Workload("w", (RequestSpec("ok", 0.0, 100, 4), RequestSpec("huge", 0.0, 9000, 4)))
    records = simulate(workload, cluster({"both": 1}), ColocatedPolicy()).records
    assert records[0].ok and not records[1].ok and "max_model_len" in records[1].error
    assert summarize(records)["num_failed"] == 1


def test_a_closed_loop_keeps_the_concurrency():
    result = simulate(fixed(6, input_tokens=200, output_tokens=10, concurrency=2), cluster({"both": 1}),
                      ColocatedPolicy())
    records = result.records
    assert [r.arrival_s for r in records[:2]] == [0.0, 0.0]
    finishes = sorted(r.finish_s for r in records)
    assert sorted(r.arrival_s for r in records[2:]) == pytest.approx(finishes[:4])
    for r in records:  # never more than two in flight at any arrival
        assert sum(1 for o in records if o.arrival_s <= r.arrival_s < o.finish_s) <= 2


@dataclass
class RecordingPolicy:
    """Records what the simulator asks, then answers as the colocated policy."""

    name: str = "recording"
    calls: list[tuple[RequestInfo, ClusterView]] = field(default_factory=list)

    def decide(self, request: RequestInfo, view: ClusterView) -> Decision:
        self.calls.append((request, view))
        return ColocatedPolicy().decide(request, view)


def test_the_simulator_calls_the_policy_object_it_was_given():
    policy = RecordingPolicy()
    workload = fixed(3, input_tokens=300, output_tokens=50, rate_per_s=1000, seed=0)
    simulate(workload, cluster({"both": 2}), policy)
    assert [request.request_id for request, _ in policy.calls] == [r.request_id for r in workload.requests]
    first_request, first_view = policy.calls[0]
    assert (first_request.num_prompt_tokens, first_request.max_tokens) == (300, 50)
    assert {w.worker_id for w in first_view.workers} == {"both-0", "both-1"}
    assert first_view.kv_bytes_per_token == MODEL.kv.bytes_per_token
    assert first_view.link("both-0", "both-1") == NVLINK.estimate()
    # The second request arrives 1 ms later, while the first is prefilling on both-0: the router
    # counts it in flight with its 300 prompt tokens queued, and routes the second to both-1.
    second_view = policy.calls[1][1]
    busy = next(w for w in second_view.workers if w.worker_id == "both-0")
    assert (busy.num_inflight, busy.num_queued_prefill_tokens) == (1, 300)


def test_a_policy_without_candidates_falls_back_to_colocated_and_is_counted():
    result = simulate(one_request(500), cluster({"both": 1}), DisaggregatedPolicy())
    assert result.num_fallbacks == 1 and result.records[0].route == "colocated"


def test_thousands_of_requests_simulate_in_seconds():
    import time
    started = time.process_time()  # CPU seconds: other processes on the machine do not count
    result = simulate(sharegpt(2000, rate_per_s=16, seed=0), cluster({"both": 2}, max_model_len=32768),
                      ColocatedPolicy())
    assert time.process_time() - started < 20  # ~2 s here
    assert len(result.records) == 2000


# ---- the request path outside the engines ---------------------------------------------------

def with_path(spec: ClusterSpec, colocated_s: float, disaggregated_s: float) -> ClusterSpec:
    from dataclasses import replace

    from bench.simulator.specs import RequestPathSpec
    return replace(spec, request_path=RequestPathSpec(colocated_s, disaggregated_s))


@pytest.mark.parametrize("roles,policy,path_of_route", [
    ({"both": 1}, ColocatedPolicy(), 0.013),
    ({"prefill": 1, "decode": 1}, DisaggregatedPolicy(), 0.031),
])
def test_a_lone_requests_ttft_grows_by_its_routes_measured_path_and_its_tpot_does_not(
        roles, policy, path_of_route):
    base = simulate(one_request(1500, output_tokens=8), cluster(roles), policy).records[0]
    with_paths = simulate(one_request(1500, output_tokens=8), with_path(cluster(roles), 0.013, 0.031),
                          policy).records[0]
    assert with_paths.ttft_s == pytest.approx(base.ttft_s + path_of_route, rel=1e-9)
    assert with_paths.tpot_s == pytest.approx(base.tpot_s, rel=1e-9)


def test_a_disaggregated_path_shorter_than_a_colocated_one_adds_no_second_delay():
    from bench.simulator.specs import RequestPathSpec
    assert RequestPathSpec(0.02, 0.01).handover_s == 0.0
    with pytest.raises(ValueError, match=">= 0"):
        RequestPathSpec(-0.001, 0.0)


def test_requests_arriving_together_still_share_their_first_step_behind_a_path():
    batch = uniform_batch(4, 512, output_tokens=2)
    plain = simulate(batch, cluster({"both": 1}), ColocatedPolicy())
    delayed = simulate(batch, with_path(cluster({"both": 1}), 0.01, 0.0), ColocatedPolicy())
    assert ttfts(delayed) == pytest.approx([t + 0.01 for t in ttfts(plain)], rel=1e-9)


def test_the_simulated_view_carries_the_running_requests_tpot_slack():
    # One long request decodes on a lone worker; a second arrives later and sees its slack, from
    # its tokens so far against the policy's TPOT SLO, as the live router computes it.
    policy = RecordingPolicy()
    workload = Workload("two", (RequestSpec("long", 0.0, 100, 200), RequestSpec("late", 0.5, 100, 4)))
    result = simulate(workload, cluster({"both": 1}), policy)
    assert policy.calls[0][1].workers[0].decode_slack_s == float("inf")  # nothing decoding yet
    late_view = policy.calls[1][1].workers[0]
    first = result.records[0]
    tokens = [t for t in first.token_times if t <= 0.5]
    expected = (200 - 1) * 0.1 - (0.5 - tokens[0]) - (200 - len(tokens)) * (0.5 - tokens[0]) / (len(tokens) - 1)
    assert late_view.decode_slack_s == pytest.approx(expected)


def test_the_simulated_view_carries_the_prompt_at_the_head_of_a_queue_and_how_long_it_has_had():
    # "a" (4,000 tokens) is prefilling when "b" arrives 1 ms later, and both still are when "c"
    # does: the view of each names "a" at the head, had since it was sent, as the live router's.
    policy = RecordingPolicy()
    workload = Workload("three", (RequestSpec("a", 0.0, 4000, 2), RequestSpec("b", 0.001, 100, 2),
                                  RequestSpec("c", 0.002, 100, 2)))
    result = simulate(workload, cluster({"both": 1}), policy)
    assert result.records[0].ttft_s > 0.002, "the first prompt must still be prefilling when the last arrives"
    first, second, third = (view.workers[0] for _, view in policy.calls)
    assert (first.queue_head_tokens, first.queue_head_elapsed_s) == (0, 0.0)
    assert (second.num_queued_prefill_tokens, second.queue_head_tokens) == (4000, 4000)
    assert second.queue_head_elapsed_s == pytest.approx(0.001)
    assert (third.num_queued_prefill_tokens, third.queue_head_tokens) == (4100, 4000)
    assert third.queue_head_elapsed_s == pytest.approx(0.002)


def test_the_simulated_view_prices_the_wait_for_a_running_slot_as_live():
    # Two slots: two requests decode (20 and 60 tokens); a third arriving at 0.08 s finds both
    # slots taken and waits for the nearer finish, at the model's full-batch decode step.
    policy = RecordingPolicy()
    workload = Workload("three", (RequestSpec("a", 0.0, 100, 20), RequestSpec("b", 0.0, 100, 60),
                                  RequestSpec("c", 0.08, 100, 4)))
    result = simulate(workload, cluster({"both": 1}, max_num_seqs=2), policy)
    assert policy.calls[0][1].workers[0].slot_wait_s == 0.0  # a free slot
    late_view = policy.calls[2][1].workers[0]
    a = result.records[0]
    tokens_so_far = sum(1 for t in a.token_times if t <= 0.08)
    assert tokens_so_far >= 1, "the first request must be decoding when the third arrives"
    step_s = RoutePredictor(MODEL, 2048).decode_step_s(2, late_view.speed_factor)
    assert late_view.slot_wait_s == pytest.approx((20 - tokens_so_far) * step_s)
    assert result.records[2].ttft_s > a.e2e_s - 0.08  # it did wait for a's slot

"""The simulator's parts on their own: step cost, link sharing, block pool, one worker's steps."""
from __future__ import annotations

import pytest

from bench.simulator.block_pool import BlockPool
from bench.simulator.engine_request import EngineRequest, Phase
from bench.simulator.links import SharedLink, Transfer
from bench.simulator.specs import EngineSpec, LinkSpec, WorkerSpec
from bench.simulator.step_cost import StepCost
from bench.simulator.worker import FINISHED, TOKEN, SimWorker
from schedulers.hardware import HARDWARE_SPECS
from schedulers.model_spec import MODEL_SPECS
from schedulers.step_time import StepTimeModel, step_features

MODEL = StepTimeModel.from_roofline(MODEL_SPECS["llama-3-8b"], HARDWARE_SPECS["a100"], 16)
COST = StepCost.of(MODEL)


# ---- step cost ---------------------------------------------------------------------------------

@pytest.mark.parametrize("chunk, decodes", [
    ((4096, 0), []), ((512, 1000), [1, 17, 300]), ((1, 4095), []), (None, [0, 16, 1024, 5000]),
])
def test_step_cost_equals_the_schedulers_model_for_one_chunk(chunk, decodes):
    n, c = chunk or (0, 0)
    assert COST.step_s([chunk] if chunk else [], decodes) == pytest.approx(MODEL.predict(n, c, decodes), rel=1e-12)


def test_a_step_with_several_chunks_sums_their_features_with_one_overhead():
    features = [step_features(MODEL.spec, MODEL.kv, 512, 0), step_features(MODEL.spec, MODEL.kv, 300, 2048),
                step_features(MODEL.spec, MODEL.kv, 0, 0, [100, 200])]
    expected = MODEL.overhead_s + sum(MODEL.predict_features(f) - MODEL.overhead_s for f in features)
    assert COST.step_s([(512, 0), (300, 2048)], [100, 200]) == pytest.approx(expected, rel=1e-12)


def test_an_empty_step_takes_no_time():
    assert COST.step_s([], []) == 0.0


# ---- links -------------------------------------------------------------------------------------

def _transfer(num_bytes, start_s=0.0):
    return Transfer(num_bytes, "p", "d", None, None, start_s)


def test_a_lone_transfer_moves_at_full_bandwidth():
    link = SharedLink(LinkSpec(0.0, 1e9))
    link.add(_transfer(int(2e9)), 0.0)
    assert link.next_done_s() == pytest.approx(2.0)


def test_concurrent_transfers_share_the_bandwidth():
    # 1 GB and 3 GB start together on 1 GB/s: each moves at 0.5 GB/s, so the small one ends at
    # 2 s; the large one has 2 GB left, alone at 1 GB/s: done at 4 s (= 4 GB / 1 GB/s overall).
    link = SharedLink(LinkSpec(0.0, 1e9))
    small, large = _transfer(int(1e9)), _transfer(int(3e9))
    link.add(small, 0.0)
    link.add(large, 0.0)
    assert link.next_done_s() == pytest.approx(2.0)
    assert link.pop_done(2.0) == [small]
    assert link.next_done_s() == pytest.approx(4.0)
    assert link.pop_done(4.0) == [large] and small.duration_s == pytest.approx(2.0)


# ---- block pool --------------------------------------------------------------------------------

def test_admission_keeps_the_watermark_but_growth_may_use_it():
    pool = BlockPool(100, watermark_blocks=10)
    assert pool.can_admit(90) and not pool.can_admit(91)
    pool.allocate(90)
    assert pool.can_grow(10) and not pool.can_grow(11)
    pool.free(90)
    assert pool.num_free == 100 and pool.usage == 0.0


# ---- one worker ----------------------------------------------------------------------------------

def worker(**engine):
    engine.setdefault("num_kv_blocks", 10000)
    return SimWorker(WorkerSpec("w", "both", EngineSpec(**engine)), COST)


def run_to_end(w):
    """Step the worker until idle; returns the plans' new-token maps (request index -> tokens)."""
    steps = []
    while True:
        plan = w.schedule()
        if plan.is_empty:
            return steps
        steps.append(plan)
        w.start(plan)
        w.complete()


def test_decodes_come_first_then_partial_prefills_fcfs():
    w = worker(max_num_batched_tokens=1024)
    short, long = EngineRequest(None, 100, 3), EngineRequest(None, 3000, 2)
    w.add(short)
    w.add(long)
    first = w.schedule()
    assert list(first.num_new_tokens.values()) == [100, 924]  # FCFS, long chunked to the budget
    w.start(first)
    w.complete()
    second = w.schedule()
    assert list(second.num_new_tokens.items()) == [(short, 1), (long, 1023)]  # the decode first


def test_long_prefill_threshold_caps_one_requests_chunk():
    w = worker(max_num_batched_tokens=2048, long_prefill_token_threshold=512)
    for n in (4096, 512, 512):
        w.add(EngineRequest(None, n, 1))
    assert list(w.schedule().num_new_tokens.values()) == [512, 512, 512]


def test_without_chunking_a_prompt_waits_until_it_fits_whole():
    w = worker(max_num_batched_tokens=4160, max_model_len=4160, enable_chunked_prefill=False)
    for n in (4096, 512):
        w.add(EngineRequest(None, n, 2))
    assert list(w.schedule().num_new_tokens.values()) == [4096]  # 64 tokens left: the 512 waits


def test_max_num_seqs_limits_running_requests():
    w = worker(max_num_seqs=2)
    for _ in range(3):
        w.add(EngineRequest(None, 10, 5))
    assert len(w.schedule().num_new_tokens) == 2


def test_running_out_of_blocks_preempts_the_newest_and_everything_still_finishes():
    # 12 blocks of 16 tokens, no watermark: two requests of 16 + 100 tokens need 8 blocks each at
    # the end, so the newer one is preempted when the older grows, and recomputed afterwards.
    w = worker(num_kv_blocks=12, watermark=0.0, max_model_len=128)
    old, new = EngineRequest(None, 16, 100), EngineRequest(None, 16, 100)
    w.add(old)
    w.add(new)
    steps = run_to_end(w)
    assert w.num_preemptions >= 1 and new.num_preemptions >= 1 and old.num_preemptions == 0
    assert old.phase == new.phase == Phase.FINISHED
    assert old.num_generated == new.num_generated == 100
    assert w.pool.num_free == 12  # no leak
    assert steps


def test_complete_reports_tokens_and_the_finish():
    w = worker()
    request = EngineRequest(None, 8, 2)
    w.add(request)
    outcomes = []
    for plan in iter(w.schedule, None):
        if plan.is_empty:
            break
        w.start(plan)
        outcomes += [kind for kind, _ in w.complete()]
    assert outcomes == [TOKEN, FINISHED]


def test_a_loaded_kv_counts_at_the_end_of_the_next_step_to_start():
    # vLLM learns a finished read from the output of the first step that starts after it.
    w = worker()
    decoding = EngineRequest(None, 10, 50)
    w.add(decoding)
    w.start(w.schedule())
    w.complete()  # decoding now decodes
    loaded = EngineRequest(None, 300, 4, needs_remote_kv=True)
    w.add(loaded)
    step_k = w.schedule()
    assert step_k.loads_started == [loaded] and loaded not in step_k.num_new_tokens
    w.start(step_k)
    w.kv_loaded(loaded)  # the bytes are in during step k, which started before
    w.complete()
    assert loaded.phase == Phase.LOADING_REMOTE_KV
    step_k1 = w.schedule()
    assert loaded not in step_k1.num_new_tokens
    w.start(step_k1)
    w.complete()  # step k+1's output reports the read done
    step_k2 = w.schedule()
    assert step_k2.num_new_tokens[loaded] == 1  # the last prompt token, then the first output


def test_an_idle_engine_takes_a_loaded_kv_at_once():
    w = worker()
    loaded = EngineRequest(None, 300, 4, needs_remote_kv=True)
    w.add(loaded)
    plan = w.schedule()
    assert plan.loads_started == [loaded] and plan.is_empty
    w.kv_loaded(loaded)
    assert w.schedule().num_new_tokens == {loaded: 1}


def test_engine_spec_rejects_impossible_settings():
    with pytest.raises(ValueError, match="enable_chunked_prefill is false"):
        EngineSpec(max_num_batched_tokens=2048, max_model_len=4096, enable_chunked_prefill=False)
    with pytest.raises(ValueError, match="cannot hold one request"):
        EngineSpec(num_kv_blocks=10, max_model_len=4096)
    with pytest.raises(ValueError, match="watermark"):
        EngineSpec(watermark=1.5)

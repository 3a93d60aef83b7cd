"""The live runner records what the client saw: arrival, each token, the result's fields."""
from __future__ import annotations

import time

from bench.run import prompt_for, run_workload
from bench.workloads import RequestSpec, Workload, fixed

from .results import generate_result


def _fake_stream(**kw):
    """Stands in for Deployment.stream: 2 ms per token, then a result like the router's."""
    n = kw["max_tokens"]
    for i in range(n):
        time.sleep(0.002)
        yield {"type": "token", "token_ids": [i % 7], "t": time.time()}
    if len(kw["prompt_token_ids"]) == 13:
        raise RuntimeError("worker down")
    yield {"type": "result", "result": generate_result(
        route="disaggregated", kv_transfer_bytes=4096, kv_transfer_s=0.001, predicted_ttft_s=0.01,
        prefill_worker="p", decode_worker="d", token_ids=list(range(n)),
        request_id=f"served-{kw['prompt_token_ids'][0]}",
        fallback="prefill worker p stalled; prefilled locally" if n == 3 else None)}


def test_prompts_are_distinct_and_reproducible():
    a = RequestSpec("r1", 0.0, 100, 4)
    b = RequestSpec("r2", 0.0, 100, 4)
    assert prompt_for(a, 259) == prompt_for(a, 259) != prompt_for(b, 259)
    assert len(prompt_for(a, 259)) == 100 and max(prompt_for(a, 259)) < 256


def test_open_loop_records_every_token_and_the_result():
    wl = fixed(num_requests=5, input_tokens=20, output_tokens=4, rate_per_s=200.0, seed=1)
    recs = run_workload(_fake_stream, wl, vocab_size=259, progress=False)
    assert len(recs) == 5 and all(r.ok for r in recs)
    for r in recs:
        assert len(r.token_times) == 4 and r.first_token_s == r.token_times[0]
        assert r.ttft_s >= 0.002 and len(r.itl_s) == 3 and r.route == "disaggregated"
        assert r.kv_transfer_bytes == 4096 and r.predicted_ttft_s == 0.01
        assert r.served_id.startswith("served-")  # joins the router's prediction log
        assert r.fallback is None  # took the route it was given


def test_a_failed_request_is_recorded_not_dropped():
    wl = Workload("w", (RequestSpec("ok", None, 20, 3), RequestSpec("bad", None, 13, 3)), concurrency=2)
    recs = run_workload(_fake_stream, wl, vocab_size=259, progress=False)
    by_id = {r.request_id: r for r in recs}
    assert by_id["ok"].ok and not by_id["bad"].ok and "worker down" in by_id["bad"].error
    assert by_id["ok"].fallback == "prefill worker p stalled; prefilled locally"  # the result's, verbatim

"""bench.prefill_alone: the stretch a prompt met when no other prompt competed for its engine."""
from __future__ import annotations

import pytest

from bench import prefill_alone as pa
from bench import sim_fidelity as sf
from bench.metrics import RequestRecord
from bench.workloads import RequestSpec, Workload
from tests.unit.test_bench_sim_fidelity import ROOT, cal, load, model_dir  # noqa: F401  (shared fixtures)


def record(i: int, arrival_s: float, ttft_s: float, engine: str = "prefill-0", tokens: int = 100,
           bucket: str = "short", colocated: bool = False) -> RequestRecord:
    first = arrival_s + ttft_s
    return RequestRecord(f"r{i}", tokens, 2, arrival_s, first, first + 0.1, [first, first + 0.1], bucket=bucket,
                         route="colocated" if colocated else "disaggregated",
                         prefill_worker=None if colocated else engine, decode_worker="decode-0")


def test_a_prompt_is_alone_when_no_other_prompt_on_its_engine_overlaps_its_window():
    records = [record(0, 0.0, 0.5),  # overlaps r1
               record(1, 0.4, 0.3),  # overlaps r0
               record(2, 1.0, 0.2),  # alone: r3 is on another engine
               record(3, 1.1, 0.2, engine="prefill-1"),  # alone on its engine
               record(4, 2.0, 1.0),  # contains r5 entirely
               record(5, 2.2, 0.1),
               record(6, 3.0, 0.1),  # alone: touching r4's end is no overlap
               record(7, 4.0, 0.1, colocated=True),  # its one engine is decode-0: alone there
               record(8, 5.0, 0.5), record(9, 5.3, 0.5)]  # TTFTs overlap, engine parts do not
    failed = RequestRecord("r10", 100, 2, 1.05, None, ok=False, error="boom", prefill_worker="prefill-0")
    engine = {"r8": 0.2, "r9": 0.2}  # the rest of their TTFT was the hand-over, away from the engine
    assert pa.alone_ids(records + [failed], engine) == {"r2", "r3", "r6", "r7", "r8", "r9"}
    assert pa.alone_ids(records, {}) == {"r2", "r3", "r6", "r7"}  # no engine part: the whole TTFT
    assert pa.prefill_engine(records[7]) == "decode-0" and pa.prefill_engine(records[0]) == "prefill-0"


def test_the_summary_is_each_buckets_median_ratio_over_the_calibrated_step_of_the_prompts_alone():
    records = [record(0, 0.0, 0.3), record(1, 1.0, 0.3, tokens=200), record(2, 2.0, 0.3, tokens=300),
               record(3, 3.0, 0.9, tokens=1000, bucket="medium"),
               record(4, 3.5, 0.1)]  # inside r3's window: neither is alone
    engine = {"r0": 0.15, "r1": 0.36, "r2": 0.3, "r3": 0.8, "r4": 0.05}
    out = pa.alone_summary(records, engine, lambda tokens: tokens / 1000)  # 1 ms a token
    assert out == {"short": {"median": pytest.approx(1.5), "count": 3}}  # 1.5, 1.8, 1.0
    # the windows given apart: r3's ends before r4 arrives, and the ratio still reads its part
    out = pa.alone_summary(records, {"r3": 0.8}, lambda tokens: tokens / 1000, windows_s={**engine, "r3": 0.4})
    assert out == {"medium": {"median": pytest.approx(0.8), "count": 1}}
    assert pa.alone_summary(records[:1], {}, lambda tokens: 1.0) == {}  # no engine part: not counted


def test_a_lone_simulated_prompt_meets_no_stretch_on_an_idle_host_and_the_table_shows_it(cal, model_dir):  # noqa: F811
    config = sf.sim_config_for("colocated", load("colocated.yaml"), cal, model_dir)
    step_model = sf.step_model_from_calibration(cal)
    workload = Workload("one", (RequestSpec("p", 0.0, 700, 2, "medium"), RequestSpec("q", 5.0, 100, 2, "short")))
    result = sf.simulate_system(config, "colocated", step_model, workload)
    engine = sf.sim_engine_ttft(result.records, result.prompt_reached_s)
    out = pa.alone_summary(result.records, engine, lambda tokens: step_model.predict(tokens))
    # no host model in the test config, nothing else running: each prompt took its one step
    assert out["medium"] == {"median": pytest.approx(1.0, rel=1e-6), "count": 1}
    assert out["short"]["count"] == 1
    row = {"system": "colocated", "rate": 1.0,
           "prefill_alone_colocated": {"live": {"medium": {"median": 1.7, "count": 9}}, "sim": out}}
    table = sf.prefill_alone_table([row], buckets=["medium"])
    assert "medium live / sim" in table and table.rstrip().endswith("x1.70 / x1.00 (9) |")

"""bench.ttft_split: a TTFT split into the engine's part and the request path, live and simulated."""
from __future__ import annotations

import pytest

from bench import sim_fidelity as sf
from bench import ttft_split as ts
from bench.metrics import RequestRecord
from bench.workloads import RequestSpec, Workload
from tests.unit.test_bench_sim_fidelity import ROOT, cal, load, model_dir  # noqa: F401  (shared fixtures)


def record(i: int, ttft_s: float, route: str = "colocated", bucket: str = "short") -> RequestRecord:
    return RequestRecord(f"r{i}", 100, 2, 10.0, 10.0 + ttft_s, 10.1 + ttft_s, [10.0 + ttft_s, 10.1 + ttft_s],
                         route=route, bucket=bucket, served_id=f"s{i}")


def test_the_live_engine_part_is_joined_on_the_servers_id_for_colocated_requests_only():
    records = [record(0, 0.10), record(1, 0.20), record(2, 0.30, route="disaggregated"), record(3, 0.40)]
    log = [{"request_id": "s0", "route": "colocated", "engines_s": 0.07},
           {"request_id": "s1", "route": "colocated", "engines_s": None},  # vLLM kept no stats
           {"request_id": "s2", "route": "disaggregated", "engines_s": 0.2},
           {"request_id": "other", "route": "colocated", "engines_s": 1.0}]  # not one of the run's
    assert ts.live_engine_ttft(records, log) == {"r0": 0.07}


def test_the_summary_gives_each_buckets_median_engine_part_and_path():
    records = [record(0, 0.10), record(1, 0.20), record(2, 0.30), record(3, 1.0, bucket="long")]
    engine = {"r0": 0.06, "r1": 0.12, "r2": 0.24, "r3": 0.9}
    out = ts.split_summary(records, engine)
    assert out["short engine"] == {"median_s": pytest.approx(0.12), "count": 3}
    assert out["short path"] == {"median_s": pytest.approx(0.06), "count": 3}  # 0.04, 0.08, 0.06
    assert out["long path"]["median_s"] == pytest.approx(0.1)
    assert ts.split_keys(["short", "long"]) == ["short engine", "short path", "long engine", "long path"]


def test_a_lone_simulated_prompt_spends_its_prefill_in_the_engine_and_the_measured_path_outside(cal, model_dir):  # noqa: F811
    path_s = 0.015
    config = sf.sim_config_for("colocated", load("colocated.yaml"), {**cal, "request_path": {"colocated_s": path_s}},
                               model_dir)
    step_model = sf.step_model_from_calibration(cal)
    workload = Workload("one", (RequestSpec("p", 0.0, 700, 2, "medium"), RequestSpec("q", 5.0, 100, 2, "short")))
    result = sf.simulate_system(config, "colocated", step_model, workload)
    engine = ts.sim_engine_ttft(result.records, result.prompt_reached_s)
    # Alone on an idle engine, the engine's part is the prompt's one prefill step (a budget of
    # 2,048 tokens takes 700 at once), and the rest of the TTFT is the path the config was given.
    assert engine["p"] == pytest.approx(step_model.predict(700), rel=1e-6)
    out = ts.split_summary(result.records, engine)
    assert out["medium path"]["median_s"] == pytest.approx(path_s, abs=1e-9)
    assert out["short path"]["median_s"] == pytest.approx(path_s, abs=1e-9)
    row = {"system": "colocated", "rate": 1.0, "ttft_split_colocated": {"live": out, "sim": out}}
    table = sf.ttft_split_table([row], buckets=["medium"])
    assert "medium engine live / sim ms" in table and table.rstrip().endswith("15.0 / 15.0 (1) |")


def test_the_fidelity_rows_set_the_live_split_from_the_router_log_beside_the_simulated(tmp_path, cal, model_dir):  # noqa: F811
    """run_fidelity reads the live engine parts from the system's predictions.json (its router's
    log) and simulates its own; a live path of 25 ms on every request shows as such."""
    import json

    from tests.unit.test_bench_fidelity_rounds import SYSTEMS, write_rounds

    top = write_rounds(tmp_path, cal, model_dir, [0.0])
    run_dir = tmp_path / "round_0"
    path = run_dir / "colocated" / "rate_2" / "records.json"
    records = [{**r, "served_id": r["request_id"]} for r in json.loads(path.read_text())]
    path.write_text(json.dumps(records))
    (run_dir / "colocated" / "predictions.json").write_text(json.dumps(
        [{"request_id": r["request_id"], "route": r["route"], "engines_s": r["first_token_s"] - r["arrival_s"] - 0.025}
         for r in records]))
    live = json.loads((run_dir / "summary.json").read_text())
    (row,) = sf.run_fidelity(live, None, model_dir, systems=SYSTEMS, live_dir=run_dir, progress=False)
    split = row["ttft_split_colocated"]
    assert sum(v["count"] for k, v in split["live"].items() if k.endswith("engine")) == len(records)
    assert all(v["median_s"] == pytest.approx(0.025) for k, v in split["live"].items() if k.endswith("path"))
    assert set(split["sim"]) == set(split["live"])
    assert "25.0 / " in sf.ttft_split_table([row])
    assert row["ttft_split_disaggregated"]["live"] == {}  # no request went disaggregated


def test_a_disaggregated_request_is_split_at_its_prefill_engine(cal, model_dir):  # noqa: F811
    """Live: the prefill worker's engine part from the router's log; simulated: the prompt
    reaching the prefill engine to its prefill done. Alone, that is the prompt's prefill step,
    and the rest is the path, the hand-over, the transfer and the decode engine's first step."""
    log = [{"request_id": "s0", "route": "disaggregated", "engine_s": {"prefill": 0.3, "decode": 0.05}},
           {"request_id": "s1", "route": "disaggregated", "engine_s": {"prefill": None, "decode": 0.05}}]
    records = [record(0, 0.4, route="disaggregated"), record(1, 0.4, route="disaggregated"), record(2, 0.1)]
    assert ts.live_engine_ttft(records, log, "disaggregated") == {"r0": 0.3}
    out = ts.split_summary(records, {"r0": 0.3}, "disaggregated")
    assert out == {"short prefill engine": {"median_s": pytest.approx(0.3), "count": 1},
                   "short rest": {"median_s": pytest.approx(0.1), "count": 1}}
    with pytest.raises(ValueError, match="route must be one of"):
        ts.live_engine_ttft(records, log, "auto")

    config = sf.sim_config_for("disaggregated", load("disaggregated.yaml"), cal, model_dir)
    step_model = sf.step_model_from_calibration(cal)
    workload = Workload("one", (RequestSpec("p", 0.0, 700, 2, "medium"),))
    result = sf.simulate_system(config, "disaggregated", step_model, workload)
    (rec,) = result.records
    assert rec.route == "disaggregated"
    part = ts.sim_engine_ttft(result.records, result.prompt_reached_s, result.prompt_prefilled_s, "disaggregated")
    assert part["p"] == pytest.approx(step_model.predict(700), rel=1e-6)
    assert 0 < rec.ttft_s - part["p"] < rec.ttft_s
    assert ts.sim_engine_ttft(result.records, result.prompt_reached_s) == {}  # none went colocated

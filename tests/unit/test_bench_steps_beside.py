"""bench.steps_beside: engine steps over their calibrated time, grouped by what the other engines did."""
from __future__ import annotations

import pytest

from bench.simulator import simulate
from bench.simulator.host import HostSpec
from bench.simulator.simulator import StepRecord
from bench.steps_beside import (GAP_S, decode_bucket, live_step_records, neighbour_state, spread, step_ratios,
                                summary_rows, timed)
from bench.workloads import RequestSpec, Workload
from schedulers.policies import LengthThresholdPolicy

from .sim_clusters import MODEL, cluster


def _step(wid: str, start: float, end: float, prefill: int = 0, decodes: int = 0) -> StepRecord:
    return StepRecord(wid, start, end, prefill, decodes)


def test_a_step_runs_to_the_next_ones_start_when_it_follows_within_the_gap():
    steps = [_step("a", 0.0, 0.010, decodes=1), _step("a", 0.010 + GAP_S / 2, 0.030, decodes=1),
             _step("a", 0.030 + 2 * GAP_S, 0.2, decodes=1)]
    got = timed(list(reversed(steps)), "both")  # any order in
    assert [s.start_s for s in got] == [0.0, 0.010 + GAP_S / 2, 0.030 + 2 * GAP_S]
    assert got[0].time_s == pytest.approx(0.010 + GAP_S / 2)  # to the next start
    assert got[1].time_s == pytest.approx(0.020 - GAP_S / 2)  # the next came later: its own end
    assert got[2].time_s == pytest.approx(0.2 - 0.030 - 2 * GAP_S)
    assert {s.role for s in got} == {"both"}


def test_the_state_of_the_other_engines_over_a_step():
    step = timed([_step("a", 1.0, 2.0, prefill=100)], "both")[0]
    prefill = timed([_step("b", 0.5, 1.8, prefill=500)], "prefill")
    decodes = timed([_step("b", 1.0, 1.2, decodes=2), _step("b", 1.2, 1.9, decodes=2)], "both")
    assert neighbour_state(step, [prefill]) == "prefill"
    assert neighbour_state(step, [decodes]) == "decode"
    assert neighbour_state(step, [timed([_step("b", 2.0, 3.0, prefill=5)], "prefill")]) == "idle"  # touching only
    assert neighbour_state(step, [timed([_step("b", 1.0, 1.3, prefill=5), _step("b", 1.3, 1.6, decodes=1)],
                                        "both")]) == "mixed"
    assert neighbour_state(step, []) == "idle"


def test_decode_buckets():
    assert [decode_bucket(n) for n in (0, 1, 2, 3, 4, 7, 8, 40)] == ["0", "1", "2-3", "2-3", "4-7", "4-7", "8+", "8+"]


def test_step_ratios_are_over_the_model_and_grouped():
    both_s, prefill_s = MODEL.predict(1000, 0, [500]), MODEL.predict(4000, 0, [])
    steps = {"both-0": timed([_step("both-0", 0.0, 2 * both_s, prefill=1000, decodes=1),
                              _step("both-0", 1.0, 1.0 + 3 * MODEL.predict(0, 0, [500] * 2), decodes=2)], "both"),
             "prefill-0": timed([_step("prefill-0", 0.0, 1.5 * prefill_s, prefill=4000)], "prefill")}
    assert 2 * both_s < 1.5 * prefill_s < 1.0  # the prompt's step inside the prefill-only engine's; then alone
    groups = step_ratios(steps, MODEL, 500)
    assert groups == {("both", "prefill", "prefill", "1"): [pytest.approx(2.0)],
                      ("both", "decode", "idle", "2-3"): [pytest.approx(3.0)],
                      ("prefill", "prefill", "mixed", "0"): [pytest.approx(1.5)]}


def test_summary_rows_leave_out_small_groups_and_keep_one_sided_ones():
    key, small = ("both", "decode", "idle", "1"), ("both", "decode", "idle", "2-3")
    rows = summary_rows({key: [1.0] * 9 + [3.0], small: [1.0]}, {key: [2.0] * 4}, min_steps=10)
    assert len(rows) == 1
    assert rows[0]["live"] == {"steps": 10, "p50": 1.0, "p90": 3.0}
    assert rows[0]["sim"]["steps"] == 4 and rows[0]["sim"]["p50"] == 2.0
    assert summary_rows({}, {key: [1.0] * 10}, min_steps=10)[0]["live"] == {"steps": 0, "p50": None, "p90": None}


def test_the_scatter_is_the_median_p90_over_p50_of_the_groups_large_on_both_sides():
    def row(live_steps, live, sim_steps, sim):
        return {"live": {"steps": live_steps, "p50": live[0], "p90": live[1]},
                "sim": {"steps": sim_steps, "p50": sim[0], "p90": sim[1]}}
    rows = [row(100, (1.0, 2.0), 100, (1.0, 1.2)), row(300, (2.0, 3.0), 150, (2.0, 2.8)),
            row(100, (1.0, 1.6), 100, (1.0, 1.3)), row(500, (1.0, 9.0), 99, (1.0, 9.0))]  # the last too small
    assert spread(rows, "live") == pytest.approx(1.6)
    assert spread(rows, "sim") == pytest.approx(1.3)
    assert spread(rows[3:], "live") is None


def test_live_steps_inside_a_window_as_records():
    saved = [{"worker": "both-0", "t": 10.0, "elapsed_s": 0.5, "num_prefill_tokens": 64, "num_decode_reqs": 2},
             {"worker": "both-0", "t": 30.0, "elapsed_s": 0.1, "num_prefill_tokens": 0, "num_decode_reqs": 1}]
    assert live_step_records(saved, (5.0, 20.0)) == [StepRecord("both-0", 9.5, 10.0, 64, 2)]


def test_the_simulator_keeps_every_step_when_asked():
    work = Workload("w", (RequestSpec("r0", 0.0, 64, 40), RequestSpec("r1", 0.01, 3000, 4),
                          RequestSpec("r2", 0.02, 500, 8)))
    host = HostSpec(num_cores=2, load_stretch=((1, 1.5),))
    hybrid = cluster({"prefill": 1, "both": 1}, host)
    kept = simulate(work, hybrid, LengthThresholdPolicy(threshold_tokens=1024), keep_steps=True)
    assert simulate(work, hybrid, LengthThresholdPolicy(threshold_tokens=1024)).steps == []
    for wid, stats in kept.workers.items():
        steps = sorted((s for s in kept.steps if s.worker_id == wid), key=lambda s: s.start_s)
        assert len(steps) == stats.num_steps > 0
        assert all(a.end_s <= b.start_s for a, b in zip(steps, steps[1:]))  # one step at a time
        assert sum(s.end_s - s.start_s for s in steps) == pytest.approx(stats.busy_s)
    # every prompt token is prefilled once, on the engine the policy sent it to
    assert sum(s.num_prefill_tokens for s in kept.steps) == 64 + 3000 + 500
    assert sum(s.num_prefill_tokens for s in kept.steps if s.worker_id == "prefill-0") == 3000


def test_the_command_refuses_a_system_the_sweep_did_not_serve_and_a_sweep_without_steps(tmp_path, capsys):
    import json

    from bench.steps_beside import main
    live = tmp_path / "summary.json"
    live.write_text(json.dumps({"experiment": "rates", "rates": [1.0], "round_dirs": ["round_0"],
                                "systems": {"hybrid adaptive": "configs/hybrid.yaml"}}))
    (tmp_path / "round_0" / "hybrid adaptive").mkdir(parents=True)
    (tmp_path / "round_0" / "summary.json").write_text(json.dumps({"rates": [1.0]}))
    assert main(["--live", str(live), "--system", "colocated"]) == 2
    assert "'colocated' is not a system of" in capsys.readouterr().err
    assert main(["--live", str(live)]) == 2
    assert "holds no engine steps" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["--live", str(live), "--rounds", "0"])
    (tmp_path / "round_0" / "hybrid adaptive" / "engine_steps.json").write_text("{}")
    assert main(["--live", str(live)]) == 2  # the round measured nothing before its run
    assert "a round holds no measurements of 'hybrid adaptive'" in capsys.readouterr().err
    with pytest.raises(SystemExit):  # each round's own measurements: there is no growth to choose
        main(["--live", str(live), "--measurements", "own", "--growth", "own"])
    assert "--growth applies to --measurements hardware" in capsys.readouterr().err

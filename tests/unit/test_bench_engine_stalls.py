"""bench.engine_stalls: the steps of a live run that took many times their calibrated time."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench import engine_stalls as es
from bench import sim_fidelity as sf
from bench.metrics import RequestRecord
from tests.unit.test_bench_sim_fidelity import cal, model_dir  # noqa: F401  (shared fixtures)

START = 1_796_533_800.0  # a run's first arrival, wall clock


class LinearModel:
    """A step model: 10 ms, 0.1 ms per prefill token, 1 ms per decode (contexts recorded)."""

    def __init__(self) -> None:
        self.contexts: list[int] = []

    def predict(self, prefill_tokens: int = 0, prefill_context: int = 0, decode_contexts=()) -> float:
        self.contexts += list(decode_contexts)
        return 0.010 + 1e-4 * prefill_tokens + 1e-3 * len(decode_contexts)


def step(t: float, elapsed_s: float, prefill: int = 0, decodes: int = 0, worker: str = "both-0") -> dict:
    return {"worker": worker, "t": START + t, "elapsed_s": elapsed_s, "num_prefill_tokens": prefill,
            "num_decode_reqs": decodes}


def test_a_stall_is_both_times_and_seconds_over_the_calibrated_step():
    steps = [step(1.0, 0.02),                  # an ordinary decode step
             step(2.0, 0.09, decodes=2),       # 7.5x but 0.08 s over: a short step's scatter
             step(3.0, 0.60, prefill=2000),    # 0.21 s predicted: 2.9x, 0.39 s over: a long prefill's spread
             step(4.0, 0.64, prefill=2000),    # 3.05x and 0.43 s over: a stall
             step(5.0, 4.02, prefill=4486),    # run 88's
             step(-5.0, 9.0), step(70.0, 9.0)]  # outside the run
    model = LinearModel()
    run = es.find_stalls(steps, model, (START, START + 60), context=777)
    assert [(s.t_s, s.num_prefill_tokens) for s in run.stalls] == [(4.0, 2000), (5.0, 4486)]
    assert run.stalls[0].predicted_s == pytest.approx(0.21) and run.stalls[0].excess_s == pytest.approx(0.43)
    assert run.steps == 5 and run.prefill_steps == 3
    assert run.busy_s == pytest.approx(0.02 + 0.09 + 0.60 + 0.64 + 4.02)
    assert set(model.contexts) == {777}  # each decode priced at the run's context
    # The thresholds are the caller's; a step one second late is not a stall at 1.5 s over.
    assert len(es.find_stalls(steps, LinearModel(), (START, START + 60), 0, ratio=2.0).stalls) == 3
    assert [s.t_s for s in es.find_stalls(steps, LinearModel(), (START, START + 60), 0, min_excess_s=1.5).stalls] == [5.0]
    for ratio, excess in ((1.0, 0.3), (3.0, -0.1)):
        with pytest.raises(ValueError, match="ratio"):
            es.find_stalls(steps, model, (START, START + 60), 0, ratio, excess)


def test_a_runs_decodes_are_priced_at_its_mean_prompt_and_half_its_output_and_its_window_is_its_requests():
    records = [RequestRecord("a", 1000, 32, START + 1, finish_s=START + 3),
               RequestRecord("b", 3000, 32, START, finish_s=START + 2),
               RequestRecord("c", 500, 0, START + 2, finish_s=None)]
    assert es.decode_context(records) == round(4500 / 3 + 64 / 3 / 2)
    assert es.run_window(records) == (START, START + 3)  # bench.speed_scaled's, which the module reads
    assert es.decode_context([]) == 0


LOG_LINES = """\
(MainProcess pid=25742) INFO 12-06 05:13:16 [loggers.py:199] Engine 000: Iteration(0): 1 context requests, 4096 context tokens, 0 generation requests, 0 generation tokens, iteration elapsed time: 867.80 ms, CPU KV cache usage: 1.6%
(MainProcess pid=25742) INFO 12-06 05:13:17 [loggers.py:199] Engine 000: Iteration(1): 0 context requests, 0 context tokens, 3 generation requests, 3 generation tokens, iteration elapsed time: 9.08 ms, CPU KV cache usage: 0.0%
(MainProcess pid=25742) INFO 12-06 05:13:17 [loggers.py:199] Engine 000: Iteration(2): 0 context requests, 0 context tokens, 0 generation requests, 0 generation tokens, iteration elapsed time: 1.00 ms (dummy), CPU KV cache usage: 0.0%
(MainProcess pid=25742) INFO 12-06 05:13:17 [metrics.py:99] Avg prompt throughput: 10 tokens/s
"""


def test_the_engines_log_lines_give_the_same_steps(tmp_path, monkeypatch):
    import time

    monkeypatch.setenv("TZ", "UTC")  # the lines are in the logging host's local time: here, UTC
    time.tzset()
    (tmp_path / "worker-1.err").write_text(LOG_LINES)
    (tmp_path / "ignored.log").write_text(LOG_LINES)
    steps = es.logged_steps(tmp_path, 2026)
    assert [(s["num_prefill_tokens"], s["num_decode_reqs"], s["elapsed_s"]) for s in steps] == [
        (4096, 0, pytest.approx(0.8678)), (0, 3, pytest.approx(0.00908))]  # the dummy step and other lines left out
    assert {s["worker"] for s in steps} == {"pid 25742"}
    # Whole seconds in local time, the middle of the second taken.
    assert steps[0]["t"] == pytest.approx(1796534596.5)
    monkeypatch.setenv("TZ", "KST-9")  # POSIX: a host logging at UTC+9: the same line is nine hours earlier
    time.tzset()
    try:
        assert es.logged_steps(tmp_path, 2026)[0]["t"] == pytest.approx(1796534596.5 - 9 * 3600)
    finally:
        monkeypatch.undo()
        time.tzset()


def write_sweep(root: Path, cal: dict, steps: list[dict] | None) -> Path:
    """A two-round sweep of one system at 2 req/s, round k's run 10 s from START + 100 k; round k's
    deployment saved `steps[k]` (worker -> steps, their `t` from its run's start; None: nothing)."""
    names = []
    for k in range(2):
        d = root / f"round_{k}"
        run = d / "colocated" / "rate_2"
        run.mkdir(parents=True)
        t0 = START + 100 * k
        run.joinpath("records.json").write_text(json.dumps([
            RequestRecord(f"r{k}", 100, 8, t0, finish_s=t0 + 10).to_dict()]))
        (d / "summary.json").write_text(json.dumps({"experiment": "rates", "rates": [2.0],
                                                    "measured": {"colocated": cal}}))
        if steps is not None:
            (d / "colocated" / es.STEPS_FILE).write_text(json.dumps(
                {wid: {"role": "both", "steps": [{**s, "t": s["t"] + t0} for s in ss]}
                 for wid, ss in steps[k].items()}))
        names.append(d.name)
    top = root / "summary.json"
    top.write_text(json.dumps({"experiment": "rates-rounds", "rates": [2.0], "round_dirs": names}))
    return top


def prefill(t: float, elapsed_s: float) -> dict:
    return {"t": t, "elapsed_s": elapsed_s, "num_prefill_tokens": 100, "num_decode_reqs": 0}


def test_a_sweeps_saved_steps_name_the_runs_that_held_a_stall(tmp_path, cal):
    ordinary = sf.step_model_from_calibration(cal).predict(prefill_tokens=100)
    steps = [{"both-0": [prefill(1, ordinary)], "both-1": [prefill(-30, ordinary + 2.0)]},  # before the run
             {"both-0": [prefill(1, ordinary)], "both-1": [prefill(5, ordinary + 2.0), prefill(6, ordinary)]}]
    rows = es.sweep_stalls(write_sweep(tmp_path, cal, steps))
    assert [(r["round"], r["steps"], len(r["stalls"])) for r in rows] == [("round_0", 1, 0), ("round_1", 3, 1)]
    (s,) = rows[1]["stalls"]
    assert s["worker"] == "both-1" and s["t_s"] == pytest.approx(5.0) and s["excess_s"] == pytest.approx(2.0)
    assert es.stalled_runs(rows) == {("round_1", "colocated", 2.0)}
    # The simulator's stalls: one in the four steps that prefilled, with its excess.
    model = es.stall_model(rows)
    assert model["stall_per_prefill_step"] == pytest.approx(1 / 4) and model["stall_excess_s"] == [pytest.approx(2.0)]
    with pytest.raises(ValueError, match="prefilled"):
        es.stall_model([{**r, "prefill_steps": 0} for r in rows])
    table = es.stalls_table(rows)
    assert "1 in 1" in table and f"{ordinary + 2.0:.2f} s ({ordinary:.2f})" in table


def test_a_run_without_saved_steps_asks_for_the_ray_logs_and_one_without_steps_is_refused(tmp_path, cal):
    top = write_sweep(tmp_path / "a", cal, None)
    with pytest.raises(FileNotFoundError, match="--ray-logs"):
        es.sweep_stalls(top)
    empty = tmp_path / "logs"
    empty.mkdir()
    with pytest.raises(ValueError, match="no engine step"):
        es.sweep_stalls(top, [empty])
    with pytest.raises(ValueError, match="no engine step"):
        es.sweep_stalls(write_sweep(tmp_path / "b", cal, [{"both-0": []}] * 2))


def test_the_command_line_prints_the_table_and_writes_the_runs(tmp_path, cal, capsys):
    late = sf.step_model_from_calibration(cal).predict(prefill_tokens=100) + 1.0
    top = write_sweep(tmp_path, cal, [{"both-0": [prefill(5, late)]}] * 2)
    assert es.main(["--live", str(top)]) == 0
    written = json.loads((tmp_path / es.STALLS_FILE).read_text())
    assert written["ratio"] == es.DEFAULT_RATIO and len(written["runs"]) == 2
    printed = capsys.readouterr().out
    assert "both-0 +5 s" in printed and "round_0" in printed
    assert es.main(["--live", str(write_sweep(tmp_path / "c", cal, None))]) == 2
    assert "--ray-logs" in capsys.readouterr().err


def test_a_rates_sweep_reports_its_stalls_beside_its_summary(tmp_path, cal, capsys):
    from bench.compare import report_stalls

    late = sf.step_model_from_calibration(cal).predict(prefill_tokens=100) + 1.0
    top = write_sweep(tmp_path / "a", cal, [{"both-0": [prefill(5, late)]}] * 2)
    report_stalls(top)
    assert len(json.loads((top.parent / es.STALLS_FILE).read_text())["runs"]) == 2
    assert "2 in 2" in capsys.readouterr().err
    # A sweep without its steps keeps its results and says why it has no stalls.
    bare = write_sweep(tmp_path / "b", cal, None)
    report_stalls(bare)
    assert "engine stalls not found" in capsys.readouterr().err and not (bare.parent / es.STALLS_FILE).exists()

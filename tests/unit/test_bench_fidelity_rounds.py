"""Simulator fidelity over a rates sweep's rounds: the rounds pooled, and each round, live and
simulated, held against the other rounds' live pool."""
from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from bench import sim_fidelity as sf
from bench.fidelity_rounds import (by_load_table, by_rate, count_ok, fidelity_over_rounds, halves_line,
                                   held_out_table)
from bench.metrics import RequestRecord, SloSpec, pooled_summary, summarize
from tests.unit.test_bench_sim_fidelity import ROOT, cal, model_dir  # noqa: F401  (shared fixtures)

SYSTEMS = {"colocated": str(ROOT / "configs/colocated.yaml")}


def later(records: list[RequestRecord], by_s: float) -> list[RequestRecord]:
    """The same requests with every token `by_s` later (TTFT longer by it, TPOT the same)."""
    return [replace(r, first_token_s=r.first_token_s + by_s, finish_s=r.finish_s + by_s,
                    token_times=[t + by_s for t in r.token_times]) for r in records]


def write_rounds(root: Path, cal: dict, model_dir: str, shifts: list[float],
                 measured: list[dict] | None = None) -> Path:
    """A `bench.compare --rounds` directory for colocated at 2 req/s whose live records in round k
    are the simulator's own with `cal`, `shifts[k]` seconds late; round k's deployment measured
    `measured[k]` (default `cal`)."""
    placeholder = summarize([], None)
    placeholder.update(num_requests=6, throughput_rps=1.0, output_tokens_per_s=4.0)
    sim: dict = {}
    sf.run_fidelity({"experiment": "rates", "rates": [2.0], "summaries": {"colocated": {"rate=2": placeholder}}},
                    cal, model_dir, systems=SYSTEMS, progress=False, sim_records=sim)
    names = []
    for k, shift in enumerate(shifts):
        records = later(sim[("colocated", 2.0)], shift)
        d = root / f"round_{k}"
        (d / "colocated" / "rate_2").mkdir(parents=True)
        (d / "colocated" / "rate_2" / "records.json").write_text(json.dumps([r.to_dict() for r in records]))
        (d / "summary.json").write_text(json.dumps({
            "experiment": "rates", "rates": [2.0], "measured": {"colocated": (measured or [cal] * len(shifts))[k]},
            "summaries": {"colocated": {"rate=2": summarize(records, SloSpec())}}}))
        names.append(d.name)
    top = root / "summary.json"
    top.write_text(json.dumps({"experiment": "rates-rounds", "rounds": len(shifts), "rates": [2.0],
                               "round_dirs": names}))
    return top


def test_rounds_the_simulator_reproduces_are_all_within(tmp_path, cal, model_dir):
    top = write_rounds(tmp_path, cal, model_dir, [0.0, 0.0])
    result = fidelity_over_rounds(top, None, model_dir, "load-path", progress=False, systems=SYSTEMS)
    assert result["pooled_within_tolerance"] == result["pooled_checks"] == 3
    row = result["pooled_rows"][0]
    assert row["requests"] == 12 and row["metrics"]["p50_ttft_s"]["rel_error"] == pytest.approx(0.0, abs=1e-12)
    assert row["met_slo"]["live"] == row["met_slo"]["sim"] > 0  # bench.fidelity_ranking's counts
    for h in result["held_out"]:
        assert h["live_round_ok"] == h["sim_round_ok"] == h["sim_vs_own_live_ok"] == h["checks"] == 3


def test_a_round_off_by_a_second_fails_the_held_out_ttfts_but_not_the_tpot(tmp_path, cal, model_dir):
    top = write_rounds(tmp_path, cal, model_dir, [0.0, 0.0, 1.0])
    result = fidelity_over_rounds(top, None, model_dir, "load-path", progress=False, systems=SYSTEMS)
    late = result["held_out"][2]
    # Round 2 against rounds 0 and 1: its TTFTs are a second longer, its TPOT the same.
    assert late["live_round_ok"] == 1 and late["per_metric"]["mean_tpot_s"]["live"] == 1
    # The simulated round 2 is the simulator's own records: as close to rounds 0-1 as they are.
    assert late["sim_round_ok"] == 3 and late["sim_vs_own_live_ok"] == 1
    # Round 0 against rounds 1 and 2 pooled: half the pool is a second late, its p99 with it.
    early = result["held_out"][0]["per_metric"]
    assert early["p99_ttft_s"]["live"] == 0 and early["mean_tpot_s"]["live"] == 1
    assert "round_2" in held_out_table(result["held_out"])
    # The one rate's counts are the rounds' totals; the sweep's rates were given, so no load.
    assert late["per_rate"] == [{"rate": 2.0, "live": 1, "sim": 3, "of": 3}]
    (row,) = result["by_rate"]
    assert row["load"] is None and row["held_out_of"] == 9
    assert row["held_out_live_ok"] == sum(h["live_round_ok"] for h in result["held_out"])
    assert row["held_out_sim_ok"] == sum(h["sim_round_ok"] for h in result["held_out"])


def test_the_halves_pool_two_rounds_each_and_a_late_half_fails_its_ttfts(tmp_path, cal, model_dir):
    top = write_rounds(tmp_path, cal, model_dir, [0.0, 0.0, 1.0, 1.0])
    h = fidelity_over_rounds(top, None, model_dir, "load-path", progress=False, systems=SYSTEMS)["halves"]
    assert h["first"] == ["round_0", "round_1"] and h["second"] == ["round_2", "round_3"] and h["checks"] == 3
    # The second half is a second late: the halves agree on the TPOT alone, both ways.
    assert h["live_second_vs_first"] == h["live_first_vs_second"] == 1
    # The simulated first half is the live one's own records; the second's TTFTs miss the late live.
    assert h["sim_first"] == 3 and h["sim_second"] == 1
    assert "on 1 and 1 of 3 figures; the simulated halves of their live halves on 3 and 1" in halves_line(h, 0.2)
    # Three rounds have no halves of two: that is the held-out view.
    fewer = write_rounds(tmp_path / "three", cal, model_dir, [0.0, 0.0, 1.0])
    assert fidelity_over_rounds(fewer, None, model_dir, "load-path", progress=False, systems=SYSTEMS)["halves"] is None
    assert halves_line(None, 0.2) is None


def test_by_rate_counts_each_rate_apart_with_its_load():
    pooled = [{"rate": 2.0, "metrics": {"p50": {"ok": True}, "p99": {"ok": False}}},
              {"rate": 4.0, "metrics": {"p50": {"ok": False}, "p99": {"ok": False}}}]
    held = [{"per_rate": [{"rate": 2.0, "live": 2, "sim": 1, "of": 2}, {"rate": 4.0, "live": 0, "sim": 1, "of": 2}]},
            {"per_rate": [{"rate": 2.0, "live": 1, "sim": 2, "of": 2}, {"rate": 4.0, "live": 1, "sim": 0, "of": 2}]}]
    rows = by_rate(pooled, held, capacity_rps=4.0)
    assert [(r["rate"], r["load"], r["pooled_ok"], r["held_out_live_ok"], r["held_out_sim_ok"]) for r in rows] == [
        (2.0, 0.5, 1, 3, 3), (4.0, 1.0, 0, 1, 1)]
    assert all(r["pooled_of"] == 2 and r["held_out_of"] == 4 for r in rows)
    table = by_load_table(rows)
    assert "| 0.50 |" in table and "1 / 4" in table
    assert by_rate(pooled, held, None)[0]["load"] is None


@pytest.mark.parametrize("measurements", ["pooled", "hardware"])
def test_pooled_measurements_outvote_one_rounds_far_off_probe(tmp_path, cal, model_dir, measurements):
    # Round 0's probes said every step costs 40 ms more; rounds 1 and 2 measured what the live
    # records were made with. Own: round 0 simulated far too slow; pooled (over the system's
    # rounds, or over every system's and round's as the hardware form): the median is right.
    slow = {**cal, "overhead_s": cal["overhead_s"] + 0.040}
    top = write_rounds(tmp_path, cal, model_dir, [0.0, 0.0, 0.0], measured=[slow, cal, cal])
    own = fidelity_over_rounds(top, None, model_dir, "load-path", progress=False, systems=SYSTEMS)
    assert own["measurements"] == "own" and own["held_out"][0]["sim_vs_own_live_ok"] < 3
    pooled = fidelity_over_rounds(top, None, model_dir, "load-path", progress=False, systems=SYSTEMS,
                                  measurements=measurements)
    assert pooled["measurements"] == measurements
    assert [h["sim_vs_own_live_ok"] for h in pooled["held_out"]] == [3, 3, 3]
    with pytest.raises(ValueError, match="measurements"):
        fidelity_over_rounds(top, None, model_dir, "load-path", progress=False, systems=SYSTEMS, measurements="mean")


def test_pooling_sums_the_durations_and_count_ok_compares_shared_keys():
    runs = [[RequestRecord(f"r{i}", 100, 2, float(i), first_token_s=i + 0.1, finish_s=i + 0.2,
                           token_times=[i + 0.1, i + 0.2]) for i in range(3)] for _ in range(2)]
    pooled = pooled_summary(runs, SloSpec())
    assert pooled["num_requests"] == 6
    assert pooled["throughput_rps"] == pytest.approx(6 / (2 * 2.2))
    one = summarize(runs[0], SloSpec())
    assert count_ok({("a", 1.0): one}, {("a", 1.0): pooled, ("b", 1.0): pooled}, 0.2) == (3, 3)


def test_only_a_rounds_summary_with_two_rounds_is_taken(tmp_path, cal, model_dir):
    one = tmp_path / "one.json"
    one.write_text(json.dumps({"experiment": "rates"}))
    with pytest.raises(ValueError, match="--rounds"):
        fidelity_over_rounds(one, cal, model_dir, "load-path", progress=False)
    single = tmp_path / "single.json"
    single.write_text(json.dumps({"experiment": "rates-rounds", "round_dirs": ["round_0"]}))
    with pytest.raises(ValueError, match="two or more"):
        fidelity_over_rounds(single, cal, model_dir, "load-path", progress=False)


def test_the_command_line_takes_a_rounds_summary(tmp_path, cal, model_dir, monkeypatch, capsys):
    top = write_rounds(tmp_path, cal, model_dir, [0.0, 0.0])
    monkeypatch.setattr(sf, "_default_model_dir", lambda: model_dir)
    calibration = tmp_path / "cal.json"
    calibration.write_text(json.dumps(cal))
    out = tmp_path / "fidelity.json"
    assert sf.main(["--live", str(top), "--calibration", str(calibration), "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "2 rounds pooled" in printed and "held out, all rounds: live 6/6, simulated 6/6" in printed
    # one system: no pair to order
    assert "pairs the simulator orders as live did: 0/0" in printed
    written = json.loads(out.read_text())
    assert written["pooled_within_tolerance"] == 3 and written["held_out_checks"] == 6
    assert written["measurements"] == "hardware"  # the command line's default (bench.pooled_measurements)


def test_the_shipped_colocated_and_adaptive_deployments_are_alike_and_the_others_not():
    from bench.compare import RATES_SYSTEMS
    from bench.pooled_measurements import deployment_shapes

    shapes = deployment_shapes({label: str(ROOT / path) for label, path in RATES_SYSTEMS.items()})
    assert shapes["colocated"] == shapes["adaptive"]
    assert len({shapes["colocated"], shapes["disaggregated"], shapes["hybrid adaptive"]}) == 3


def test_one_rounds_summary_takes_the_hardware_pool_over_its_systems(tmp_path, cal, model_dir, monkeypatch, capsys):
    # One round of colocated, adaptive and disaggregated; adaptive's deployment measured every step
    # 40 ms slow. Its own measurements simulate it far from its live records (the simulator's own
    # with `cal`); the hardware pool takes the step model's median over the three, which is `cal`'s.
    write_rounds(tmp_path, cal, model_dir, [0.0])
    summary = json.loads((tmp_path / "round_0" / "summary.json").read_text())
    slow = {**cal, "overhead_s": cal["overhead_s"] + 0.040}
    labels = ("colocated", "adaptive", "disaggregated")
    summary["measured"] = {"colocated": cal, "adaptive": slow, "disaggregated": cal}
    summary["summaries"] = {label: summary["summaries"]["colocated"] for label in labels}
    one = tmp_path / "round_0" / "summary.json"
    one.write_text(json.dumps(summary))
    monkeypatch.setattr(sf, "_default_model_dir", lambda: model_dir)
    rows = {}
    for measurements in ("own", "hardware"):
        out = tmp_path / f"{measurements}.json"
        assert sf.main(["--live", str(one), "--measurements", measurements, "--out", str(out)]) == 0
        written = json.loads(out.read_text())
        assert written["measurements"] == measurements
        rows[measurements] = {r["system"]: r for r in written["rows"]}
        # the three live summaries are one: every pair ties live (bench.fidelity_ranking)
        assert "pairs the simulator orders as live did: 0/0" in capsys.readouterr().out
    own_ttft = rows["own"]["adaptive"]["metrics"]["p50_ttft_s"]
    hw_ttft = rows["hardware"]["adaptive"]["metrics"]["p50_ttft_s"]
    assert own_ttft["sim"] > hw_ttft["sim"] + 0.030
    assert hw_ttft["sim"] == pytest.approx(rows["hardware"]["colocated"]["metrics"]["p50_ttft_s"]["sim"], rel=0.2)
    assert sf.main(["--live", str(one), "--measurements", "pooled", "--out", str(tmp_path / "x.json")]) == 2
    assert "needs a --rounds sweep" in capsys.readouterr().err


def test_the_host_probe_scales_the_measurements_to_the_runs_slower_host(tmp_path, cal, model_dir):
    # The live runs ran on a host twice as slow as when the deployment was measured, and the
    # probe saw its kernel take 2 ms during the runs against 1 ms during the measurements.
    from bench.speed_scaled import scaled_calibration

    measured = {**cal, "window_s": [-200.0, -150.0]}
    top = write_rounds(tmp_path, scaled_calibration(cal, 2.0), model_dir, [0.0, 0.0], measured=[measured] * 2)
    (tmp_path / "host_speed.jsonl").write_text("".join(
        json.dumps({"t": t, "py_ms": ms / 2, "mm_ms": ms / 2}) + "\n"
        for t, ms in [*((-200.0 + i, 1.0) for i in range(50)), *((i / 10, 2.0) for i in range(-50, 600))]))
    summary = json.loads(top.read_text())
    with pytest.raises(ValueError, match="without the host probe"):
        fidelity_over_rounds(top, None, model_dir, "load-path", progress=False, systems=SYSTEMS, speed="probe")
    top.write_text(json.dumps({**summary, "host_speed": "host_speed.jsonl"}))
    plain = fidelity_over_rounds(top, None, model_dir, "load-path", progress=False, systems=SYSTEMS)
    assert not plain["pooled_rows"][0]["metrics"]["mean_tpot_s"]["ok"]  # half the live TPOT
    probed = fidelity_over_rounds(top, None, model_dir, "load-path", progress=False, systems=SYSTEMS, speed="probe")
    assert probed["pooled_within_tolerance"] == probed["pooled_checks"] == 3
    assert [f for r in probed["host_slowdowns"] for _, _, f in r] == [pytest.approx(2.0)] * 2


def test_each_round_is_simulated_with_draws_of_its_own(tmp_path, cal, model_dir, monkeypatch):  # noqa: F811
    # A form that draws (stretch-draws) gives each round its own seed: the simulated rounds are
    # as many realisations as the live ones, not one repeated.
    import bench.fidelity_rounds as fr
    top = write_rounds(tmp_path, cal, model_dir, [0.0, 0.0, 0.0])
    seeds = []

    def recording(*args, **kwargs):
        seeds.append(kwargs["draw_seed"])
        return sf.run_fidelity(*args, **kwargs)
    monkeypatch.setattr(fr, "run_fidelity", recording)
    fidelity_over_rounds(top, None, model_dir, "load-path", progress=False, systems=SYSTEMS)
    assert seeds == [0, 1, 2]


def test_the_pool_without_the_stalled_rounds_sizes_what_a_stall_did(tmp_path, cal, model_dir):
    top = write_rounds(tmp_path, cal, model_dir, [0.0, 0.0, 1.0])
    late = ("round_2", "colocated", 2.0)
    result = fidelity_over_rounds(top, None, model_dir, "load-path", progress=False, systems=SYSTEMS,
                                  stalled={late})
    # Pooled over every round the late round's second misses the TTFTs; without it all agree.
    assert result["pooled_within_tolerance"] < 3
    (row,) = result["stall_free"]
    assert row["rounds"] == ["round_0", "round_1"] and row["requests"] == 2 * result["pooled_rows"][0]["requests"] // 3
    assert all(m["ok"] for m in row["metrics"].values())
    # No stalled round, or every round stalled: nothing to set apart.
    for stalled in (set(), {(f"round_{k}", "colocated", 2.0) for k in range(3)}):
        assert fidelity_over_rounds(top, None, model_dir, "load-path", progress=False, systems=SYSTEMS,
                                    stalled=stalled)["stall_free"] == []


def test_stalls_simulated_as_rare_events_lengthen_the_ttfts_run_by_run(tmp_path, cal, model_dir):
    top = write_rounds(tmp_path, cal, model_dir, [0.0, 0.0])
    plain = fidelity_over_rounds(top, None, model_dir, "load-path", progress=False, systems=SYSTEMS)
    events = {"stall_per_prefill_step": 0.5, "stall_excess_s": [1.0]}
    stalled = fidelity_over_rounds(top, None, model_dir, "load-path", progress=False, systems=SYSTEMS,
                                   stall_events=events)
    counts = [r["sim_stalls"] for rows in stalled["round_rows"] for r in rows]
    assert all(n > 0 for n in counts) and all(r["sim_stalls"] == 0 for rows in plain["round_rows"] for r in rows)
    # Each simulated round drew its own stalls (seed k), so the rounds differ where the live ones did not.
    ttfts = [r["sim_summary"]["ttft_s"]["mean"] for rows in stalled["round_rows"] for r in rows]
    assert ttfts[0] != ttfts[1]
    p99 = stalled["pooled_rows"][0]["metrics"]["p99_ttft_s"]
    assert p99["sim"] > plain["pooled_rows"][0]["metrics"]["p99_ttft_s"]["sim"] + 0.5
    assert stalled["stall_events"] == events


def test_the_command_line_reads_the_sweeps_stalls_and_simulates_other_sweeps(tmp_path, cal, model_dir, monkeypatch,
                                                                            capsys):
    top = write_rounds(tmp_path, cal, model_dir, [0.0, 0.0, 1.0])
    monkeypatch.setattr(sf, "_default_model_dir", lambda: model_dir)
    calibration = tmp_path / "cal.json"
    calibration.write_text(json.dumps(cal))
    out = str(tmp_path / "fidelity.json")
    common = ["--live", str(top), "--out", out, "--calibration", str(calibration)]
    assert sf.main(common) == 0
    assert "the runs that held an engine stall are not known" in capsys.readouterr().out
    stall = {"worker": "both-0", "t_s": 3.0, "elapsed_s": 2.0, "predicted_s": 0.1, "num_prefill_tokens": 900,
             "num_decode_reqs": 0, "excess_s": 1.9}
    runs = [{"round": f"round_{k}", "system": "colocated", "rate": 2.0, "steps": 40, "prefill_steps": 6,
             "busy_s": 1.0, "stalls": [stall] if k == 2 else []} for k in range(3)]
    (tmp_path / "engine_stalls.json").write_text(json.dumps({"ratio": 3.0, "min_excess_s": 0.3, "runs": runs}))
    assert sf.main(common) == 0
    printed = capsys.readouterr()
    assert "Without the rounds whose run held an engine stall" in printed.out
    assert json.loads(Path(out).read_text())["stall_free"][0]["rounds"] == ["round_0", "round_1"]
    # Another sweep's stalls as rare events: one in the 18 steps that prefilled, of 1.9 s.
    assert sf.main([*common, "--stall-events", str(tmp_path / "engine_stalls.json")]) == 0
    assert "55.56 per 1,000 steps that prefill, 1 excesses of 1.90 s median" in capsys.readouterr().err
    assert json.loads(Path(out).read_text())["stall_events"]["stall_excess_s"] == [1.9]
    assert sf.main([*common, "--stalls", str(tmp_path / "none.json")]) == 2
    single = tmp_path / "round_0" / "summary.json"
    assert sf.main(["--live", str(single), "--out", out, "--stall-events", str(tmp_path / "engine_stalls.json")]) == 2
    assert "--stall-events needs a --rounds sweep" in capsys.readouterr().err


def test_a_seed_offset_scores_the_same_form_on_other_draws_and_zero_on_the_same(tmp_path, cal, model_dir):
    top = write_rounds(tmp_path, cal, model_dir, [0.0, 0.0])
    events = {"stall_per_prefill_step": 0.3, "stall_excess_s": [0.5, 1.0, 2.0]}

    def ttfts(offset):
        result = fidelity_over_rounds(top, None, model_dir, "load-path", progress=False, systems=SYSTEMS,
                                      stall_events=events, seed_offset=offset)
        return [r["sim_summary"]["ttft_s"]["mean"] for rows in result["round_rows"] for r in rows]
    assert ttfts(0) == ttfts(0)
    assert ttfts(sf.SEED_OFFSET_STRIDE) != ttfts(0)


def test_the_command_line_scores_a_drawing_form_over_several_seeds(tmp_path, cal, model_dir, monkeypatch, capsys):
    top = write_rounds(tmp_path, cal, model_dir, [0.0, 0.0])
    monkeypatch.setattr(sf, "_default_model_dir", lambda: model_dir)
    calibration = tmp_path / "cal.json"
    calibration.write_text(json.dumps(cal))
    stall = {"worker": "both-0", "t_s": 3.0, "elapsed_s": 2.0, "predicted_s": 0.1, "num_prefill_tokens": 900,
             "num_decode_reqs": 0, "excess_s": 1.9}
    runs = [{"round": "round_0", "system": "colocated", "rate": 2.0, "steps": 40, "prefill_steps": 6, "busy_s": 1.0,
             "stalls": [stall]}]
    (tmp_path / "stalls.json").write_text(json.dumps({"ratio": 3.0, "min_excess_s": 0.3, "runs": runs}))
    out = tmp_path / "fidelity.json"
    common = ["--live", str(top), "--out", str(out), "--calibration", str(calibration)]
    assert sf.main([*common, "--stall-events", str(tmp_path / "stalls.json"), "--seeds", "3"]) == 0
    seeds = json.loads(out.read_text())["seeds"]
    assert [s["seed_offset"] for s in seeds] == [0, sf.SEED_OFFSET_STRIDE, 2 * sf.SEED_OFFSET_STRIDE]
    assert all(s["pooled_checks"] == 3 and s["held_out_checks"] == 6 for s in seeds)
    assert "The same form on other draws" in capsys.readouterr().out
    # A form that draws nothing would score the same every time; one round has no rounds to hold out.
    assert sf.main([*common, "--seeds", "2"]) == 2
    assert "draws nothing" in capsys.readouterr().err
    single = tmp_path / "round_0" / "summary.json"
    assert sf.main(["--live", str(single), "--out", str(out), "--calibration", str(calibration), "--seeds", "2"]) == 2
    assert sf.main([*common, "--seeds", "0"]) == 2

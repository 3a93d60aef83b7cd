"""bench.route_choices: the adaptive router's choices where both routes missed, and its
predictions by how late they said a request would be, from a live sweep's router log."""
import json

import pytest

from bench.route_choices import Rules, calibration_rows, choice_rows, main, predicted_band
from schedulers.policies.adaptive import MISS_BY_VIOLATION, MISS_LOST, MISS_TIE, miss_rule
from schedulers.slo import SloTable

SLO = SloTable(((4096, 0.2), (None, 1.0)), 0.1)
ADAPTIVE = {"name": "hybrid", "scheduler": {"policy": "adaptive", "params": {},
                                            "slo": {"ttft_buckets": [[4096, 0.2], [None, 1.0]], "tpot_s": 0.1}}}


def _entry(route="disaggregated", colocated_s=0.30, disaggregated_s=0.28, ttft_s=0.25, n=300,
           engine_s=0.2, queue_s=0.2, prefill_s=0.05, rid="r1"):
    """A logged request: each route's predicted TTFT (its violation the TTFT over a 0.2 s SLO)."""
    return {"request_id": rid, "route": route, "num_prompt_tokens": n, "ttft_s": ttft_s,
            "predicted_ttft_s": colocated_s if route == "colocated" else disaggregated_s,
            "predicted": {"colocated.ttft_s": colocated_s, "colocated.violation": colocated_s / 0.2,
                          "colocated.queue_s": queue_s, "colocated.prefill_s": prefill_s,
                          "disaggregated.ttft_s": disaggregated_s, "disaggregated.violation": disaggregated_s / 0.2},
            "engine_s": {"decode": engine_s}}


def test_the_miss_rule_is_lost_both_ways_then_by_violation_past_the_tolerance_else_a_tie():
    assert miss_rule((1.5, 1.6), (False, False), 0.1) == MISS_TIE
    assert miss_rule((1.5, 1.7), (False, False), 0.1) == MISS_BY_VIOLATION
    assert miss_rule((1.7, 1.5), (False, True), 0.1) == MISS_BY_VIOLATION  # one lost is not both
    assert miss_rule((3.0, 9.0), (True, True), 0.1) == MISS_LOST
    assert miss_rule((1.5, 1.7), (False, False), 0.2) == MISS_TIE  # the deployment's own tolerance


def test_the_rules_come_from_the_deployment_and_name_only_requests_both_routes_missed():
    rules = Rules.of_deployment(ADAPTIVE)
    assert (rules.tolerance, rules.lost_ratio) == (0.1, 2.0)  # AdaptivePolicy's defaults
    tuned = Rules.of_deployment({**ADAPTIVE, "scheduler": {**ADAPTIVE["scheduler"],
                                                           "params": {"violation_tolerance": 0.3}}})
    assert tuned.tolerance == 0.3
    assert rules.rule(_entry(colocated_s=0.30, disaggregated_s=0.28)) == MISS_TIE
    assert tuned.rule(_entry(colocated_s=0.35, disaggregated_s=0.28)) == MISS_TIE
    assert rules.rule(_entry(colocated_s=0.35, disaggregated_s=0.28)) == MISS_BY_VIOLATION
    assert rules.rule(_entry(colocated_s=0.5, disaggregated_s=0.9)) == MISS_LOST  # both past 0.4 s
    assert rules.rule(_entry(colocated_s=0.15, disaggregated_s=0.9)) is None  # colocated met it
    # lost is judged against the prompt's own TTFT SLO: past 2 x 0.2 s, not past 2 x 1 s
    assert rules.rule(_entry(colocated_s=0.5, disaggregated_s=0.6)) == MISS_LOST
    assert rules.rule(_entry(n=5000, colocated_s=0.5, disaggregated_s=0.6)) == MISS_BY_VIOLATION
    with pytest.raises(ValueError, match="not adaptive"):
        Rules.of_deployment({"name": "c", "scheduler": {"policy": "colocated"}})


def test_predictions_are_set_against_the_actual_by_route_and_how_late_they_said():
    entries = [_entry("colocated", colocated_s=0.35, ttft_s=0.28, engine_s=0.2),
               _entry("colocated", colocated_s=0.45, ttft_s=0.36, engine_s=0.2),
               _entry("colocated", colocated_s=0.05, ttft_s=0.06, engine_s=0.05),
               _entry("disaggregated", disaggregated_s=0.6, ttft_s=0.66)]
    rows = calibration_rows(entries)
    assert [r[:3] for r in rows] == [["colocated", "0-0.1 s", 1], ["colocated", "0.3-0.5 s", 2],
                                     ["disaggregated", "0.5-1 s", 1]]
    assert rows[1][3:] == ["400", "320", "0.80", "0.80"]  # engine: 0.2 s measured of 0.25 predicted
    assert rows[2][5:] == ["1.10", "-"]  # no engine part off the colocated route
    assert predicted_band(1.7) == "1+ s" and predicted_band(0.2) == "0.2-0.3 s"


def test_choices_count_who_met_the_ttft_slo_by_bucket_rule_and_route():
    entries = [_entry(ttft_s=0.15, rid="a"), _entry(ttft_s=0.30, rid="b"),  # both a tie, disaggregated
               _entry("colocated", colocated_s=0.30, disaggregated_s=0.5, ttft_s=0.18, rid="c"),
               _entry(n=1500, colocated_s=0.6, disaggregated_s=0.9, ttft_s=0.7, rid="d"),
               _entry(colocated_s=0.1, ttft_s=0.1, rid="e")]  # colocated met: no choice between misses
    rows = choice_rows(entries, Rules.of_deployment(ADAPTIVE))
    assert rows == [["short", MISS_BY_VIOLATION, "colocated", 1, "1 (100%)", "180", "300", "500", "0.60"],
                    ["short", MISS_TIE, "disaggregated", 2, "1 (50%)", "225", "300", "280", "0.80"],
                    ["medium", MISS_LOST, "disaggregated", 1, "0 (0%)", "700", "600", "900", "0.78"]]


def test_the_command_reads_every_round_of_a_sweep_and_refuses_a_system_without_a_log(tmp_path, capsys):
    (tmp_path / "summary.json").write_text(json.dumps({"round_dirs": ["round_0", "round_1"]}))
    for k, rid in enumerate(("a", "b")):
        system = tmp_path / f"round_{k}" / "hybrid adaptive"
        (system / "rate_5").mkdir(parents=True)
        deployments = {"deployments": {"hybrid adaptive": ADAPTIVE}}
        (tmp_path / f"round_{k}" / "summary.json").write_text(json.dumps(deployments))
        (system / "predictions.json").write_text(json.dumps([_entry(rid=rid, ttft_s=0.15 if k == 0 else 0.25)]))
        (system / "rate_5" / "records.json").write_text(json.dumps([{"served_id": rid}]))
    assert main([str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "2 requests logged" in out
    assert "about as much" in out and "1 (50%)" in out  # one request of each round, pooled in one row
    assert main([str(tmp_path), "--system", "colocated"]) == 2
    assert "no router log" in capsys.readouterr().err

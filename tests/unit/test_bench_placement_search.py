"""DistServe-style placement search over the simulator (bench/placement_search.py)."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench import placement_search as ps
from bench.max_rate import RateSearch

CONFIG = Path(__file__).resolve().parents[2] / "configs" / "sim_llama3_8b_4xh100_ib.yaml"


def test_every_split_of_four_engines_is_a_candidate_once():
    labels = [p.label for p in ps.placements(4)]
    assert labels[:2] == ["colocated", "adaptive"]
    assert sorted(labels[2:]) == sorted([f"disaggregated {p}P:{4 - p}D" for p in (1, 2, 3)]
                                        + [f"adaptive {p}P+{4 - p}B" for p in (1, 2, 3)])
    assert all(sum(p.workers.values()) == 4 for p in ps.placements(4))
    assert {p.family for p in ps.placements(4)} == set(ps.FAMILIES)


def test_families_narrow_the_candidates():
    assert [p.label for p in ps.placements(3, ["disaggregated"])] == ["disaggregated 1P:2D", "disaggregated 2P:1D"]


@pytest.mark.parametrize("engines, families, message", [(1, ps.FAMILIES, "at least 2"),
                                                         (4, ["colocated", "sarathi"], "sarathi")])
def test_bad_searches_are_refused(engines, families, message):
    with pytest.raises(ValueError, match=message):
        ps.placements(engines, families)


def test_a_placement_config_serves_only_that_placement_with_the_requests_asked():
    base = ps.read_sim_config_dict(CONFIG)
    placement = ps.placements(4, ["disaggregated"])[0]
    config = ps.config_for(base, placement, num_requests=40)
    assert list(config.policies) == [placement.label]
    assert config.policies[placement.label].workers == {"prefill": 1, "decode": 3}
    assert config.workload.params["num_requests"] == 40
    assert base["policies"]["colocated"] == {"workers": {"both": 4}}  # the base is left as it was


def test_rows_give_per_gpu_rates_and_ratios_to_colocated():
    colocated, split = ps.placements(2, ["colocated", "disaggregated"])
    rows = ps.result_rows([(colocated, RateSearch(0.9, max_rate=10.0)),
                           (split, RateSearch(0.9, max_rate=5.0, bounded=False))], gpus_per_engine=2)
    assert [(r["gpus"], r["per_gpu"], r["over_colocated"]) for r in rows] == [(4, 2.5, 1.0), (4, 1.25, 0.5)]
    assert "5+" in ps.rows_table(rows, 0.9)  # an unbounded search says its rate is a floor
    assert ps.best_by_family(rows)["disaggregated"]["placement"] == "disaggregated 1P:1D"


def test_a_placement_whose_best_attainment_stays_near_the_target_is_flagged_slo_bound():
    colocated, split = ps.placements(2, ["colocated", "disaggregated"])
    rows = ps.result_rows([(colocated, RateSearch(0.9, 4.0, points=[(1.0, 0.99), (4.0, 0.91)])),
                           (split, RateSearch(0.9, 1.5, points=[(1.0, 0.905), (2.0, 0.89), (1.5, 0.901)]))],
                          gpus_per_engine=1)
    assert [ps.slo_bound(r, 0.9) for r in rows] == [False, True]
    assert "90.5% (SLO-bound)" in ps.rows_table(rows, 0.9)


@pytest.mark.parametrize("light_load_share, is_slo_bound", [(0.99, False), (0.91, True)])
def test_a_search_that_never_clears_the_target_looks_once_at_a_light_load(monkeypatch, light_load_share,
                                                                          is_slo_bound):
    # 91% at 8-10 req/s, collapsing beyond; below 8 req/s either clear (load-bound) or not (SLO-bound)
    share = lambda rate: 0.5 if rate > 10 else 0.91 if rate >= 8 else light_load_share  # noqa: E731
    monkeypatch.setattr(ps, "attainment_at", lambda config, label, rate: share(rate))
    base = ps.read_sim_config_dict(CONFIG)
    search = ps.search_placement(base, ps.placements(4, ["colocated"])[0], start=8.0, num_requests=20)
    assert 9.8 <= search.max_rate <= 10.0
    assert search.points[-1][0] == 1.0  # the extra look, at an eighth of the lowest rate run
    (row,) = ps.result_rows([(ps.placements(4, ["colocated"])[0], search)], 1)
    assert ps.slo_bound(row, 0.9) == is_slo_bound


def test_the_search_runs_the_real_simulator_end_to_end(tmp_path, capsys):
    code = ps.main(["--config", str(CONFIG), "--engines", "2", "--num-requests", "40",
                    "--families", "colocated,disaggregated", "--precision", "0.1", "--out", str(tmp_path)])
    assert code == 0
    summary = json.loads((tmp_path / "summary.json").read_text())
    rows = {r["placement"]: r for r in summary["rows"]}
    assert set(rows) == {"colocated", "disaggregated 1P:1D"}
    for row in rows.values():
        # every rate reported was simulated and met 90%; the search ran more than one rate
        assert row["runs"] >= 2
        assert any(rate == row["max_rate_per_s"] and share >= 0.9 for rate, share in row["points"])
    assert "over colocated" in capsys.readouterr().out


def test_a_bad_config_is_a_clear_error(tmp_path, capsys):
    bad = tmp_path / "bad.yaml"
    bad.write_text("policies: {colocated: {workers: {both: 2}}}\nhardware: tpu\n")
    assert ps.main(["--config", str(bad)]) == 2
    assert "hardware" in capsys.readouterr().err
    assert ps.main(["--config", str(CONFIG), "--num-requests", "3"]) == 2

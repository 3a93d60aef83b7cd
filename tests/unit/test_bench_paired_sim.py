"""bench.paired_sim: a paired run replayed in the simulator on its deployment's measurements."""
from __future__ import annotations

import copy
import json

import pytest

from bench import paired_sim as ps
from bench.compare import load_yaml, rates_workload
from bench.metrics import SloSpec
from bench.metrics import num_within_slos
from bench.paired import paired_rows
from bench.sim_fidelity import sim_config_for, simulate_system, step_model_from_calibration
from bench.speed_scaled import scaled_calibration
from tests.unit.test_bench_sim_fidelity import ROOT, cal, model_dir  # noqa: F401  (shared fixtures)

ADAPTIVE = load_yaml(str(ROOT / "configs/adaptive.yaml"))


def test_route_colocated_is_the_same_workers_under_the_colocated_policy():
    deployment = copy.deepcopy(ADAPTIVE)
    deployment["scheduler"]["params"] = {"meeting_order": "load"}
    configs = ps.route_configs(deployment)
    assert configs["colocated"]["scheduler"]["policy"] == "colocated"
    assert "params" not in configs["colocated"]["scheduler"]  # the adaptive policy's, not the route's
    assert configs["colocated"]["workers"] == deployment["workers"]
    assert configs["auto"] == deployment and deployment["scheduler"]["policy"] == "adaptive"


def test_the_simulated_ratio_is_set_beside_the_live_pairs(cal, model_dir):  # noqa: F811
    rate, n, out = 3.0, 24, 4
    sim = {}
    for route, cfg in ps.route_configs(ADAPTIVE).items():
        config = sim_config_for(route, cfg, cal, model_dir)
        sim[route] = list(simulate_system(config, route, step_model_from_calibration(cal),
                                          rates_workload(rate, n, out)).records)
    # A live run made of the simulator's own records: one pair, so its ratio is the simulated one.
    live_rows = paired_rows({(0, route, rate): recs for route, recs in sim.items()}, [rate], SloSpec())
    live = {"experiment": "paired", "rates": [rate], "num_requests": n, "output_tokens": out,
            "measured": cal, "rows": live_rows}
    (row,) = ps.simulated_rows(live, ADAPTIVE, model_dir)
    assert row["colocated_ok_sim"] == num_within_slos(sim["colocated"], SloSpec()) == row["colocated_ok_live"]
    assert row["auto_ok_sim"] == row["auto_ok_live"]
    assert row["ratio_sim"] == pytest.approx(row["ratio_live"])
    assert {r.route for r in sim["colocated"]} == {"colocated"}
    assert f"| 3 | {row['colocated_ok_live']:g} / {row['colocated_ok_sim']} |" in ps.rows_markdown([row], n)


def test_a_paired_run_without_measurements_is_refused(model_dir):  # noqa: F811
    live = {"experiment": "paired", "rates": [1.0], "num_requests": 4, "rows": [{}]}
    with pytest.raises(ValueError, match="before the pairs: run bench.paired without --no-measure"):
        ps.simulated_rows(live, ADAPTIVE, model_dir)
    # A run measured before its pairs only (as the first paired runs were) has no 'after'.
    with pytest.raises(ValueError, match="after the pairs"):
        ps.simulated_rows({**live, "measured": {}}, ADAPTIVE, model_dir, measurements="after")


def _paired_live(cal: dict, rate: float, n: int, out: int) -> dict:
    """A paired summary of one rate and one pair (the live counts are beside the point here):
    route colocated ran from 20 to 30 s, route auto from 40 to 50 s."""
    row = {"rate": rate, "colocated_ok": [1], "auto_ok": [1], "auto_vs_colocated": 1.0, "pair_ratios": [1.0],
           "windows_s": {"colocated": [[20.0, 30.0]], "auto": [[40.0, 50.0]]}}
    return {"experiment": "paired", "rates": [rate], "num_requests": n, "output_tokens": out,
            "measured": {**cal, "window_s": [0.0, 10.0]}, "host_speed": "host_speed.jsonl", "rows": [row]}


def test_a_pair_on_a_slower_host_is_simulated_on_measurements_scaled_by_its_slowdown(cal, model_dir, tmp_path):  # noqa: F811
    live = _paired_live(cal, 4.0, 24, 4)
    # The kernel took 2 ms while the deployment was measured, 3 ms during route colocated's run
    # and 2 ms again during route auto's: x1.5 and x1.
    lines = [json.dumps({"t": t, "py_ms": 1.0, "mm_ms": 1.0}) for t in range(0, 10)]
    lines += [json.dumps({"t": t, "py_ms": 1.5, "mm_ms": 1.5}) for t in range(20, 30)]
    lines += [json.dumps({"t": t, "py_ms": 1.0, "mm_ms": 1.0}) for t in range(40, 50)]
    (tmp_path / "host_speed.jsonl").write_text("\n".join(lines))
    slowdowns = ps.pair_slowdowns(live, tmp_path)
    assert slowdowns == [[{"colocated": pytest.approx(1.5), "auto": pytest.approx(1.0)}]]
    (scaled,) = ps.simulated_rows(live, ADAPTIVE, model_dir, slowdowns=slowdowns)
    # Route colocated as on measurements 1.5x slower to begin with, route auto as measured.
    (by_hand,) = ps.simulated_rows({**live, "measured": scaled_calibration(cal, 1.5)}, ADAPTIVE, model_dir)
    (unscaled,) = ps.simulated_rows(live, ADAPTIVE, model_dir)
    assert scaled["host_slowdowns"] == slowdowns[0]
    for k in ("colocated_ok_sim", "colocated_goodput_sim"):
        assert scaled[k] == pytest.approx(by_hand[k]), k
    for k in ("auto_ok_sim", "auto_goodput_sim"):
        assert scaled[k] == pytest.approx(unscaled[k]), k
    assert scaled["colocated_goodput_sim"] < unscaled["colocated_goodput_sim"]
    assert scaled["ratio_sim"] > unscaled["ratio_sim"]  # the baseline ran on the slower host


def test_scaling_by_the_probe_needs_the_probe_and_the_measurement_window(cal, model_dir, tmp_path):  # noqa: F811
    live = _paired_live(cal, 4.0, 24, 4)
    with pytest.raises(ValueError, match="without the host probe"):
        ps.pair_slowdowns({k: v for k, v in live.items() if k != "host_speed"}, tmp_path)
    with pytest.raises(ValueError, match="no window_s"):
        ps.pair_slowdowns({**live, "measured": cal}, tmp_path)
    (tmp_path / "host_speed.jsonl").write_text(json.dumps({"t": 1, "py_ms": 1.0, "mm_ms": 1.0}))
    with pytest.raises(ValueError, match="too few samples"):
        ps.pair_slowdowns(live, tmp_path)


def test_the_replay_takes_the_deployment_the_pairs_recorded_else_the_config_file():
    recorded = {"name": "as-it-ran", "workers": {"both": 2}}
    assert ps.deployment_of({"config": "configs/colocated.yaml", "deployment": recorded}) == recorded
    # without it, the config file as it reads now
    assert ps.deployment_of({"config": "configs/colocated.yaml"})["name"] == "pd-serve-colocated"


def test_same_winner_reads_a_live_ratio_near_one_as_a_tie():
    # a live x1.02 is within fidelity_ranking's 3% band: either simulated answer matches it
    assert ps.same_winner(1.02, 0.95) == "tie live" and ps.same_winner(0.98, 1.10) == "tie live"
    assert ps.same_winner(1.10, 1.01) == "yes" and ps.same_winner(1.10, 0.99) == "no"
    assert ps.same_winner(0.90, 0.97) == "yes" and ps.same_winner(0.90, 1.05) == "no"
    assert ps.same_winner(None, 1.2) == "-" and ps.same_winner(1.2, None) == "-"

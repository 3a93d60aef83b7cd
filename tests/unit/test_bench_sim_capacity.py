"""The simulator's closed-loop capacity for a sweep's deployments."""
from __future__ import annotations

import json

import pytest

from bench.sim_capacity import capacity_rows, main
from bench.speed_scaled import scaled_calibration
from tests.unit.test_bench_sim_fidelity import ROOT, cal, model_dir  # noqa: F401  (shared fixtures)


def write_summary(path, measured: dict) -> None:
    path.write_text(json.dumps({
        "experiment": "rates", "rates": [1.0], "measured": measured,
        "systems": {"colocated": str(ROOT / "configs/colocated.yaml")},
        "capacity": {"system": "colocated", "rps": 5.0, "concurrency": 8, "num_requests": 32, "steady_s": 4.0}}))


def test_a_host_twice_as_slow_halves_the_simulated_capacity(tmp_path, cal, model_dir):  # noqa: F811
    fast, slow = tmp_path / "fast.json", tmp_path / "slow.json"
    write_summary(fast, {"colocated": cal})
    write_summary(slow, {"colocated": scaled_calibration(cal, 2.0)})
    [row] = capacity_rows(fast, "own", seeds=2, model=model_dir)
    [slow_row] = capacity_rows(slow, "own", model=model_dir)
    assert row[0] == "colocated" and row[1] == "0" and "median" in row[3]
    assert float(slow_row[2]) == pytest.approx(float(row[2]) / 2, rel=0.15)


def test_a_sweep_without_measurements_is_refused(tmp_path, capsys):
    path = tmp_path / "none.json"
    write_summary(path, {})
    assert main(["--live", str(path)]) == 2
    assert "no measurements" in capsys.readouterr().err

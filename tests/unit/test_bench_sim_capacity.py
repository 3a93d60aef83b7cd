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


def test_a_stretch_or_a_growth_is_refused_outside_the_hardware_form(tmp_path, capsys, cal):  # noqa: F811
    path = tmp_path / "own.json"
    write_summary(path, {"colocated": cal})
    assert main(["--live", str(path), "--measurements", "own", "--stretch", "counts"]) == 2
    assert "--stretch applies to --measurements hardware" in capsys.readouterr().err
    assert main(["--live", str(path), "--measurements", "own", "--growth", "own"]) == 2
    assert "--growth applies to --measurements hardware" in capsys.readouterr().err


def test_the_growth_reaches_the_hardware_measurements(cal):  # noqa: F811
    # as bench.sim_fidelity --growth: colocated, with no loops of the mix, takes hybrid's (shared) or none (own)
    from bench.pooled_measurements import round_measurements
    host = {"num_cores": 2, "step_excess_batch": [[4, 0.001]]}
    measured = {"colocated": {**cal, "host": host},
                "hybrid": {**cal, "host": {**host, "step_excess_mix": [[1, 0.001], [6, 0.004]]}}}
    systems = {label: str(ROOT / f"configs/{label}.yaml") for label in measured}
    [shared] = round_measurements([{"measured": measured}], systems, "hardware")
    [own] = round_measurements([{"measured": measured}], systems, "hardware", growth="own")
    assert shared["colocated"]["host"]["step_excess_mix_shared"] is True
    assert "step_excess_mix" not in own["colocated"]["host"]


def test_a_rounds_sweep_reads_each_rounds_measurements(tmp_path, cal):  # noqa: F811
    from bench.rate_rounds import round_summaries
    from bench.pooled_measurements import round_measurements
    for k, factor in enumerate((1.0, 2.0)):
        (tmp_path / f"round_{k}").mkdir()
        write_summary(tmp_path / f"round_{k}" / "summary.json", {"colocated": scaled_calibration(cal, factor)})
    top = {"experiment": "rates-rounds", "round_dirs": ["round_0", "round_1"], "rates": [1.0],
           "systems": {"colocated": str(ROOT / "configs/colocated.yaml")}}
    (tmp_path / "summary.json").write_text(json.dumps(top))
    assert [s["measured"]["colocated"] for s in round_summaries(tmp_path / "summary.json", top)] == [
        json.loads(json.dumps(scaled_calibration(cal, f))) for f in (1.0, 2.0)]
    own = round_measurements(round_summaries(tmp_path / "summary.json", top), top["systems"], "own")
    assert own[1]["colocated"]["overhead_s"] == pytest.approx(2 * own[0]["colocated"]["overhead_s"])
    # a single sweep is its own one round
    assert round_summaries(tmp_path / "round_0" / "summary.json", {"rates": [1.0]}) == [{"rates": [1.0]}]


def test_a_record_without_what_the_host_form_needs_is_refused(tmp_path, capsys, cal):  # noqa: F811
    host = {"num_cores": 2, "step_excess_1_s": 0.001, "step_excess_2_s": 0.002, "step_excess_alone_s": 0.0005,
            "step_excess_batch": [[4, 0.003]], "load_stretch": [[1, 1.3]], "cpu_s_per_request": 0.01}
    path = tmp_path / "older.json"
    write_summary(path, {"colocated": {**cal, "host": host,
                                       "request_path": {"colocated_s": 0.0125, "disaggregated_s": 0.025}}})
    # prefill-neighbour needs the probe of a prefill beside another engine's prefills; the
    # default form does not (a sweep without engine steps: own-streams+mix), nor, on colocated, the mix's loops
    assert main(["--live", str(path), "--host", "prefill-neighbour"]) == 2
    assert "--host decode-neighbour" in capsys.readouterr().err
    assert main(["--live", str(path)]) == 0
    assert "colocated" in capsys.readouterr().out
    assert main(["--live", str(path), "--host", "decode-neighbour"]) == 0
    assert "colocated" in capsys.readouterr().out

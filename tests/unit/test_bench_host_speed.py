"""The host probe's samples and windows, and measurements scaled by the slowdown it reads."""
from __future__ import annotations

import time

import pytest

from bench.host_speed import MIN_SAMPLES, HostSpeedProbe, Sample, read_samples, slowdown, window_ms
from bench.metrics import RequestRecord
from bench.sim_fidelity import step_model_from_calibration
from bench.speed_scaled import reference_windows, run_window, scaled_calibration, sweep_slowdowns
from tests.unit.test_bench_sim_fidelity import cal  # noqa: F401  (shared fixture)


def samples(t0: float, n: int, kernel_ms: float) -> list[Sample]:
    return [Sample(t0 + i, kernel_ms / 2, kernel_ms / 2) for i in range(n)]


def test_a_window_takes_the_median_of_its_samples_and_too_few_say_nothing():
    s = samples(0, 10, 2.0) + [Sample(3.5, 50.0, 0.0)] + samples(100, 10, 3.0)
    assert window_ms(s, [[0, 20]]) == pytest.approx(2.0)  # one outlier does not move a median
    assert window_ms(s, [[0, 20], [100, 120]]) == pytest.approx(3.0)  # 21 samples: the 11th of them in order
    assert window_ms(s, [[0, MIN_SAMPLES - 2]]) is None
    assert slowdown(s, (100, 120), [[0, 20]]) == pytest.approx(1.5)
    assert slowdown(s, (50, 60), [[0, 20]]) is None


def test_the_probe_process_samples_until_the_block_ends(tmp_path):
    path = tmp_path / "speed.jsonl"
    path.write_text('{"t": 1, "py_ms": 1, "mm_ms": 1}\n')  # an earlier run's, replaced
    with HostSpeedProbe(path, period_s=0.05) as probe:
        deadline = time.time() + 20
        while time.time() < deadline and (not path.exists() or len(read_samples(path)) < 3):
            time.sleep(0.1)
        assert probe._proc is not None and probe._proc.poll() is None
    first = read_samples(path)
    assert len(first) >= 3 and all(s.t > 1e9 and s.kernel_ms > 0 for s in first)
    time.sleep(0.3)
    assert read_samples(path) == first  # stopped with the block
    with path.open("a") as f:
        f.write('{"t": 5, "py_')  # a line cut short by a kill
    assert len(read_samples(path)) == len(first)


def test_scaling_multiplies_every_measured_time_and_keeps_ratios_and_the_link(cal):  # noqa: F811
    record = {**cal, "request_path": {"colocated_s": 0.02, "disaggregated_s": 0.03, "step_gap_s": 0.001,
                                      "samples": [1, 2]},
              "host": {"num_cores": 2, "background_cores": 0.1, "cpu_s_per_request": 0.01, "cpu_s_per_token": 0.002,
                       "step_excess_1_s": 0.004, "step_excess_2_s": None, "load_stretch": [[1, 1.5]],
                       "step_excess_batch": [[4, 0.006]], "decode_beside_prefill": [[1, 0.003]]}}
    scaled = scaled_calibration(record, 1.5)
    before, after = step_model_from_calibration(record), step_model_from_calibration(scaled)
    for shape in [(0, 0, [100]), (512, 0, []), (256, 256, [64, 900])]:
        assert after.predict(*shape) == pytest.approx(1.5 * before.predict(*shape))
    assert scaled["request_path"] == {"colocated_s": pytest.approx(0.03), "disaggregated_s": pytest.approx(0.045),
                                      "step_gap_s": pytest.approx(0.0015), "samples": [1, 2]}
    host = scaled["host"]
    assert host["cpu_s_per_request"] == pytest.approx(0.015) and host["cpu_s_per_token"] == pytest.approx(0.003)
    assert host["step_excess_1_s"] == pytest.approx(0.006) and host["step_excess_2_s"] is None
    assert host["step_excess_batch"] == [[4, pytest.approx(0.009)]]
    assert host["decode_beside_prefill"] == [[1, pytest.approx(0.0045)]]
    assert host["load_stretch"] == [[1, 1.5]] and host["num_cores"] == 2 and host["background_cores"] == 0.1
    assert scaled["link"] == record["link"]
    assert record["host"]["cpu_s_per_token"] == 0.002  # the record given is left as it was
    with pytest.raises(ValueError, match="> 0"):
        scaled_calibration(record, 0.0)


def test_reference_windows_follow_the_measurements_form():
    measured = [{"a": {"window_s": [0, 10]}, "b": {"window_s": [20, 30]}},
                {"a": {"window_s": [40, 50]}, "b": {"window_s": [60, 70]}}]
    assert reference_windows(measured, 1, "a", "own") == [[40, 50]]
    assert reference_windows(measured, 1, "a", "pooled") == [[0, 10], [40, 50]]
    assert len(reference_windows(measured, 0, "b", "hardware")) == 4
    with pytest.raises(ValueError, match="no measurement window"):
        reference_windows([{"a": {}}], 0, "a", "own")


def test_slowdowns_per_round_against_the_measurements_or_the_sweeps_runs():
    s = samples(0, 10, 2.0) + samples(100, 10, 4.0) + samples(200, 10, 3.0) + samples(300, 10, 3.0)
    measured = [{"a": {"window_s": [0, 10]}}, {"a": {"window_s": [200, 210]}}]
    runs = [{("a", 1.0): (100, 110)}, {("a", 1.0): (300, 310)}]
    own = sweep_slowdowns(s, measured, runs, "own", "probe")
    assert own == [{("a", 1.0): pytest.approx(2.0)}, {("a", 1.0): pytest.approx(1.0)}]
    # Pooled over both rounds' measurements (2 and 3 ms): the median of their 20 samples, 2.5 ms.
    assert sweep_slowdowns(s, measured, runs, "pooled", "probe")[0][("a", 1.0)] == pytest.approx(4.0 / 2.5)
    # Against every run of the sweep (4 and 3 ms: 3.5 ms), whatever the measurements.
    by_runs = sweep_slowdowns(s, measured, runs, "own", "probe-runs")
    assert by_runs == [{("a", 1.0): pytest.approx(4.0 / 3.5)}, {("a", 1.0): pytest.approx(3.0 / 3.5)}]
    with pytest.raises(ValueError, match="too few samples"):
        sweep_slowdowns(s, measured, [{("a", 1.0): (500, 510)}], "own", "probe")
    with pytest.raises(ValueError, match="speed must be"):
        sweep_slowdowns(s, measured, runs, "own", "none")


def test_a_runs_window_runs_from_its_first_arrival_to_its_last_token():
    recs = [RequestRecord("a", 8, 2, arrival_s=10.0, first_token_s=11.0, finish_s=12.0, token_times=[11.0, 12.0]),
            RequestRecord("b", 8, 2, arrival_s=10.5, ok=False, error="boom", token_times=[11.5, 13.0])]
    assert run_window(recs) == (10.0, 13.0)
    with pytest.raises(ValueError):
        run_window([])

"""One system's measurements over a sweep's rounds, pooled figure by figure."""
from __future__ import annotations

import pytest

from bench.pooled_measurements import pooled_measurements, pooled_record


def record(overhead_s: float, stretch: list, batch: list, cores: int = 2, name: str = "colocated") -> dict:
    return {"overhead_s": overhead_s, "config": name, "block_size": 16,
            "link": {"alpha_s": overhead_s / 10, "beta_bytes_per_s": 1e9},
            "calibration": {"step_gap_s": overhead_s},
            "host": {"num_cores": cores, "load_stretch": stretch, "step_excess_batch": batch,
                     "samples": [{"window": overhead_s}]}}


def test_numbers_and_points_at_the_same_counts_take_the_median():
    rounds = [record(0.010, [[1, 1.2], [2, 1.5]], [[4, 0.003]]),
              record(0.030, [[1, 1.1], [2, 2.5]], [[4, 0.001]]),
              record(0.012, [[1, 1.3], [2, 1.6]], [[4, 0.002]])]
    pooled = pooled_record(rounds)
    assert pooled["overhead_s"] == pytest.approx(0.012)
    assert pooled["link"] == {"alpha_s": pytest.approx(0.0012), "beta_bytes_per_s": 1e9}
    assert pooled["host"]["load_stretch"] == [[1, pytest.approx(1.2)], [2, pytest.approx(1.6)]]
    assert pooled["host"]["step_excess_batch"] == [[4, pytest.approx(0.002)]]
    # Counts stay integers; texts, raw samples and probe detail stay the first round's.
    assert pooled["host"]["num_cores"] == 2 and isinstance(pooled["host"]["num_cores"], int)
    assert pooled["block_size"] == 16 and pooled["config"] == "colocated"
    assert pooled["host"]["samples"] == [{"window": 0.010}] and pooled["calibration"] == {"step_gap_s": 0.010}
    # The records given are left as they were.
    assert rounds[1]["overhead_s"] == 0.030


def test_points_at_different_counts_and_keys_missing_somewhere_stay_the_first_rounds():
    a = record(0.010, [[1, 1.2], [2, 1.5]], [[4, 0.003]])
    b = record(0.020, [[1, 1.1], [4, 2.5]], [[4, 0.001]])
    a["host"]["decode_beside_prefill"] = [[1, 0.004]]
    pooled = pooled_record([a, b])
    assert pooled["host"]["load_stretch"] == [[1, 1.2], [2, 1.5]]
    assert pooled["host"]["decode_beside_prefill"] == [[1, 0.004]]
    assert pooled["overhead_s"] == pytest.approx(0.015)


def test_per_system_over_the_rounds_that_measured_it():
    rounds = [{"colocated": record(0.010, [], []), "hybrid": record(0.050, [], [])},
              {"colocated": record(0.020, [], [])}]
    pooled = pooled_measurements(rounds)
    assert set(pooled) == {"colocated", "hybrid"}
    assert pooled["colocated"]["overhead_s"] == pytest.approx(0.015)
    assert pooled["hybrid"]["overhead_s"] == 0.050
    with pytest.raises(ValueError):
        pooled_record([])

"""Pooling rounds of the rates experiment: per-round counts, goodput over summed durations."""
import pytest

from bench.metrics import RequestRecord, SloSpec
from bench.rate_rounds import pool_rounds, rotated


def request(rid, arrival_s, ttft_s, duration_s=1.0):
    """A 100-token prompt (TTFT SLO 0.2 s), two output tokens 0.01 s apart, done at `duration_s`."""
    first = arrival_s + ttft_s
    return RequestRecord(rid, 100, 2, arrival_s, first_token_s=first, finish_s=first + 0.01,
                         token_times=[first, first + 0.01])


def run(t0, ttfts):
    return [request(f"r{k}", t0 + k, ttft) for k, ttft in enumerate(ttfts)]


def test_goodput_pools_every_round_over_their_summed_durations():
    slo = SloSpec()
    rounds = [
        {"colocated": {"rate=1": run(0.0, [0.05, 0.05, 0.5])},       # 2 of 3 meet, 2.06 s
         "disaggregated": {"rate=1": run(100.0, [0.05, 0.5, 0.5])},  # 1 of 3
         "adaptive": {"rate=1": run(200.0, [0.05, 0.05, 0.05])}},    # 3 of 3
        {"colocated": {"rate=1": run(1000.0, [0.05, 0.05, 0.05])},   # 3 of 3
         "disaggregated": {"rate=1": run(1100.0, [0.05, 0.05, 0.5])},
         "adaptive": {"rate=1": run(1200.0, [0.05, 0.5, 0.05])}},
    ]
    pooled = pool_rounds(rounds, [1.0], slo, ("colocated", "disaggregated"))
    rows = {r["system"]: r for r in pooled["rows"]}
    assert rows["colocated"]["met_slo_per_round"] == "2 / 3" and rows["colocated"]["met_slo"] == 5
    assert rows["adaptive"]["met_slo_per_round"] == "3 / 2"
    assert rows["colocated"]["requests"] == 6
    # each run lasts from its first arrival to its last finish, never the gap between rounds
    assert rows["colocated"]["goodput_rps"] == pytest.approx(5 / (2.51 + 2.06))
    assert rows["disaggregated"]["goodput_rps"] == pytest.approx(3 / (2.51 + 2.51))
    assert rows["adaptive"]["goodput_vs_best_baseline"] == pytest.approx(
        rows["adaptive"]["goodput_rps"] / rows["colocated"]["goodput_rps"])
    assert pooled["rounds"] == 2 and pooled["experiment"] == "rates-rounds"


def test_rounds_rotate_which_system_runs_first():
    labels = ["colocated", "disaggregated", "adaptive", "hybrid adaptive"]
    assert rotated(labels, 0) == labels
    assert rotated(labels, 1)[0] == "disaggregated" and rotated(labels, 1)[-1] == "colocated"
    assert rotated(labels, 5) == rotated(labels, 1)
    assert [rotated(labels, k)[0] for k in range(4)] == labels


def test_nothing_to_pool_is_an_error():
    with pytest.raises(ValueError):
        pool_rounds([], [1.0], SloSpec(), ("colocated",))


def test_the_comparison_table_keeps_a_rate_of_ten_and_more_apart_from_its_neighbours():
    from bench.compare import rows_markdown

    table = rows_markdown([{"rate": 10.3, "system": "colocated", "goodput_rps": 6.057, "met_slo": 299}])
    assert "| 10.3 | colocated | 6.057 | 299 |" in table

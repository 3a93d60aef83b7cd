"""bench.paired's bookkeeping: which route goes first, and the per-rate rows of a paired A/B."""
from __future__ import annotations

import pytest

from bench.host_speed import Sample
from bench.metrics import RequestRecord, SloSpec
from bench.paired import paired_rows, route_order, rows_markdown


def served(i: int, ttft_s: float, tpot_s: float = 0.02, arrival_s: float = 0.0) -> RequestRecord:
    first = arrival_s + ttft_s
    times = [first + k * tpot_s for k in range(4)]
    return RequestRecord(f"r{i}", 100, 4, arrival_s, first, times[-1], times)


def run(num_ok: int, num_late: int) -> list[RequestRecord]:
    """`num_ok` requests within both SLOs (100-token prompts: 0.2 s TTFT, 0.1 s TPOT), then
    `num_late` past the TTFT SLO; one per second, so every run spans the same seconds."""
    return [served(i, 0.05 if i < num_ok else 0.5, arrival_s=float(i)) for i in range(num_ok + num_late)]


def test_the_routes_take_turns_going_first():
    assert route_order(0) == ("colocated", "auto")
    assert route_order(1) == ("auto", "colocated")
    assert route_order(2) == route_order(0)


def test_rows_count_each_pair_and_pool_the_goodputs():
    runs = {(0, "colocated", 1.0): run(6, 4), (0, "auto", 1.0): run(8, 2),
            (1, "colocated", 1.0): run(5, 5), (1, "auto", 1.0): run(4, 6)}
    (row,) = paired_rows(runs, [1.0], SloSpec())
    assert row["colocated_ok"] == [6, 5] and row["auto_ok"] == [8, 4]
    assert (row["auto_wins"], row["auto_losses"]) == (1, 1)
    assert row["pair_ratios"] == pytest.approx([8 / 6, 4 / 5])
    # Same spans both ways, so the pooled ratio is the ratio of the counts: 12 / 11.
    assert row["auto_vs_colocated"] == pytest.approx(12 / 11)
    assert "| 1 | 6, 5 | 8, 4 | 1.091 | 1.33, 0.80 | 1 / 1 |" in rows_markdown([row], 10)


def test_a_baseline_with_nothing_within_the_slos_has_no_ratio():
    runs = {(0, "colocated", 2.0): run(0, 3), (0, "auto", 2.0): run(2, 1)}
    (row,) = paired_rows(runs, [2.0], SloSpec())
    assert row["auto_vs_colocated"] is None and row["pair_ratios"] == [None]
    assert row["auto_wins"] == 1


def test_each_run_carries_its_window_and_the_host_kernel_inside_it():
    """With the host probe's samples, a row says how fast the host ran during each route's run
    of each pair: here the second pair's runs (arrivals from 100 s on) ran on a host half as fast."""
    late = [RequestRecord(r.request_id, r.input_tokens, r.output_tokens, r.arrival_s + 100, r.first_token_s + 100,
                          r.finish_s + 100, [t + 100 for t in r.token_times]) for r in run(3, 0)]
    runs = {(0, "colocated", 1.0): run(3, 0), (0, "auto", 1.0): run(2, 1),
            (1, "colocated", 1.0): late, (1, "auto", 1.0): late}
    samples = [Sample(t / 2, 1.0, 1.0) for t in range(6)] + [Sample(100.0 + t / 2, 2.0, 2.0) for t in range(8)]
    (row,) = paired_rows(runs, [1.0], SloSpec(), samples)
    windows = row["windows_s"]
    assert windows["colocated"][0] == [0.0, pytest.approx(2.0 + 0.05 + 3 * 0.02)]
    assert windows["auto"][0] == [0.0, pytest.approx(2.0 + 0.5 + 3 * 0.02)]  # its late last request
    assert windows["auto"][1][0] == windows["colocated"][1][0] == 100.0
    assert row["kernel_ms"] == {"colocated": [2.0, 4.0], "auto": [2.0, 4.0]}
    assert rows_markdown([row], 3).rstrip().endswith("| 2.00 / 2.00, 4.00 / 4.00 |")
    # No samples, no such fields: the run was recorded without the probe.
    assert "kernel_ms" not in paired_rows(runs, [1.0], SloSpec())[0]

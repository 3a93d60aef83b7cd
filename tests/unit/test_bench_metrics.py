"""Metrics on hand-made records, with the arithmetic in comments."""
from __future__ import annotations

import json

import pytest

from bench.metrics import (PlottingUnavailableError, RequestRecord, SloSpec, can_plot, distribution,
                           markdown_table, plot_rate_sweep, plot_ttft_cdf, records_to_dicts, summarize,
                           write_json)


def record(rid, input_tokens, arrival_s, token_times, route="colocated", **kw):
    return RequestRecord(rid, input_tokens, len(token_times), arrival_s, first_token_s=token_times[0],
                         finish_s=token_times[-1], token_times=list(token_times), route=route, **kw)


# A: <=4K, TTFT 0.1, TPOT (0.25 - 0.1) / 2 = 0.075          -> meets both
# B: 4K-16K (SLO 1 s), TTFT 0.5, TPOT 0.2 / 1 = 0.2 > 0.1   -> misses TPOT
# C: <=4K, TTFT 0.3 > 0.2, one token (no TPOT)              -> misses TTFT
# D: <=4K, TTFT 0.05, TPOT 0.15 / 3 = 0.05                  -> meets both
# E: failed                                                 -> misses
A = record("a", 100, 0.0, [0.1, 0.15, 0.25])
B = record("b", 5000, 1.0, [1.5, 1.7], route="disaggregated", kv_transfer_bytes=1000, kv_transfer_s=0.01)
C = record("c", 200, 2.0, [2.3], fallback="prefill worker p stalled; prefilled locally")
D = record("d", 300, 3.0, [3.05, 3.1, 3.15, 3.2])
E = RequestRecord("e", 100, 8, 4.0, ok=False, error="boom")
RECORDS = [A, B, C, D, E]


def test_derived_latencies():
    assert A.ttft_s == pytest.approx(0.1) and A.e2e_s == pytest.approx(0.25)
    assert A.itl_s == pytest.approx([0.05, 0.10])
    assert A.tpot_s == pytest.approx(0.075)
    assert C.tpot_s is None  # one output token: no inter-token time
    assert E.ttft_s is None and E.e2e_s is None and E.tpot_s is None


def test_summary_latency_distributions():
    s = summarize(RECORDS)
    # TTFT of the served: [0.1, 0.5, 0.3, 0.05]; mean 0.95 / 4 = 0.2375; sorted [0.05, 0.1, 0.3, 0.5]
    # p50 = (0.1 + 0.3) / 2 = 0.2; p90 at rank 0.9 * 3 = 2.7: 0.3 + 0.7 * 0.2 = 0.44; p99: 0.3 + 0.97 * 0.2.
    assert s["ttft_s"]["mean"] == pytest.approx(0.2375)
    assert s["ttft_s"]["p50"] == pytest.approx(0.2)
    assert s["ttft_s"]["p90"] == pytest.approx(0.44)
    assert s["ttft_s"]["p99"] == pytest.approx(0.494)
    # TPOT of A, B, D: [0.075, 0.2, 0.05]: mean 0.325 / 3, median 0.075.
    assert s["tpot_s"]["mean"] == pytest.approx(0.325 / 3)
    assert s["tpot_s"]["p50"] == pytest.approx(0.075)
    # ITL pooled: A [0.05, 0.1], B [0.2], D [0.05, 0.05, 0.05]: mean 0.5 / 6, median 0.05.
    assert s["itl_s"]["mean"] == pytest.approx(0.5 / 6)
    assert s["itl_s"]["p50"] == pytest.approx(0.05)
    # E2E: [0.25, 0.7, 0.3, 0.2]: median (0.25 + 0.3) / 2.
    assert s["e2e_s"]["p50"] == pytest.approx(0.275)


def test_summary_throughput_and_goodput():
    s = summarize(RECORDS)
    # Duration: first arrival 0.0 to last finish 3.2. Served 4, output tokens 3 + 2 + 1 + 4 = 10.
    assert s["duration_s"] == pytest.approx(3.2)
    assert (s["num_requests"], s["num_ok"], s["num_failed"]) == (5, 4, 1)
    assert s["throughput_rps"] == pytest.approx(4 / 3.2)
    assert s["output_tokens_per_s"] == pytest.approx(10 / 3.2)
    # Goodput: only A and D meet both SLOs -> 2 / 3.2 req/s; attainment 2 of 5 requests.
    assert s["goodput_rps"] == pytest.approx(2 / 3.2)
    assert s["slo_attainment"] == pytest.approx(0.4)
    assert s["routes"] == {"colocated": 3, "disaggregated": 1, "none": 1}
    assert s["num_fallbacks"] == 1  # C: given disaggregated, prefilled locally
    assert s["kv_transfer_bytes"] == 1000 and s["kv_transfer_s"]["mean"] == pytest.approx(0.01)


def test_summary_per_length_bucket_shares_the_window():
    s = summarize(RECORDS)
    short, medium = s["per_bucket"]["<=4K"], s["per_bucket"]["4K-16K"]
    assert (short["num_requests"], short["num_ok"]) == (4, 3)  # A, C, D and the failed E
    assert short["goodput_rps"] == pytest.approx(2 / 3.2)  # A and D over the whole run's 3.2 s
    assert medium["goodput_rps"] == 0 and medium["ttft_s"]["p50"] == pytest.approx(0.5)


def test_workload_buckets_take_precedence_over_length_buckets():
    labelled = [record("x", 4096, 0.0, [0.1, 0.2], bucket="long"), record("y", 512, 0.0, [0.3, 0.4], bucket="short")]
    assert sorted(summarize(labelled)["per_bucket"]) == ["long", "short"]


def test_a_ttft_exactly_at_the_slo_meets_it():
    at = record("t", 4096, 0.0, [0.2, 0.25])  # <=4K bucket: 0.2 s; TPOT 0.05
    over = record("u", 4097, 0.0, [1.0, 1.05])  # 4K-16K bucket: 1 s exactly
    slo = SloSpec()
    assert slo.meets(at) and slo.meets(over)
    assert not slo.meets(record("v", 4096, 0.0, [0.2001, 0.25]))


def test_custom_slos_and_labels():
    slo = SloSpec(((1000, 0.1), (None, 2.0)), tpot_slo_s=0.02)
    assert slo.bucket_label(1000) == "<=1000" and slo.bucket_label(1001) == ">1000"
    assert SloSpec().bucket_label(5000) == "4K-16K" and SloSpec().bucket_label(20000) == ">16K"
    assert not slo.meets(A)  # TPOT 0.075 > 0.02
    assert SloSpec.from_dict({"ttft_buckets": [[1000, 0.1], [None, 2.0]], "tpot_slo_s": 0.02}) == slo
    with pytest.raises(ValueError, match="unknown key"):
        SloSpec.from_dict({"ttft": 1})
    with pytest.raises(ValueError, match="end with exactly one"):
        SloSpec(((1000, 0.1),))


def test_empty_inputs_give_none_not_errors():
    assert distribution([]) == {"mean": None, "p50": None, "p90": None, "p99": None}
    s = summarize([])
    assert s["num_requests"] == 0 and s["goodput_rps"] is None and s["per_bucket"] == {}


def test_markdown_and_json(tmp_path):
    s = summarize(RECORDS)
    table = markdown_table({"run-a": s})
    assert table.splitlines()[0].startswith("| run | reqs |")
    assert "| run-a | 5 | 4 | 237.5 | 200.0 |" in table  # TTFT mean and p50 in ms
    path = write_json(tmp_path / "out" / "s.json", {"summary": s, "records": records_to_dicts(RECORDS)})
    loaded = json.loads(path.read_text())
    assert loaded["summary"]["goodput_rps"] == pytest.approx(0.625)
    assert RequestRecord.from_dict(loaded["records"][0]) == A


def test_plots_need_matplotlib(tmp_path):
    if can_plot():
        assert plot_ttft_cdf({"a": RECORDS}, tmp_path / "cdf.png").stat().st_size > 0
        assert plot_rate_sweep({"a": [(1.0, summarize(RECORDS))]}, tmp_path / "sweep.png").exists()
    else:
        with pytest.raises(PlottingUnavailableError, match="pip install matplotlib"):
            plot_ttft_cdf({"a": RECORDS}, tmp_path / "cdf.png")

"""bench.token_gaps: each inter-token gap classed by what the engines did meanwhile."""
from __future__ import annotations

import json

import pytest

from bench.metrics import RequestRecord
from bench.token_gaps import classify_gaps, gap_summary, main, quiet_excess_by_batch


def rec(rid, arrival, tokens, decode, prefill=None, ok=True):
    return RequestRecord(rid, 100, len(tokens), arrival, first_token_s=tokens[0], finish_s=tokens[-1],
                         token_times=list(tokens), ok=ok, prefill_worker=prefill, decode_worker=decode)


def test_gaps_are_classed_by_what_overlapped_them():
    # a streams on w0 from 1.0 to 1.03; b prefills on w1 over a's first gap, then decodes there
    # over its next two; c arrives on w0 itself during a's second gap.
    a = rec("a", 0.9, [1.000, 1.010, 1.020, 1.030], "w0")
    b = rec("b", 1.002, [1.011, 1.025, 1.040], "w1")
    c = rec("c", 1.012, [1.018, 1.050], "w0")
    gaps = classify_gaps([a, b, c])
    assert gaps["nb-prefill"] == pytest.approx([0.010])  # a: 1.000-1.010 beside b's prefill
    assert gaps["own+nb-decode"] == pytest.approx([0.010, 0.010, 0.032])  # a's last two, c's one
    # b's gaps: beside a's decode (1.011-1.025, 1.025-1.040), nothing else on w1.
    assert gaps["nb-decode"] == pytest.approx([0.014, 0.015])
    assert sum(len(v) for v in gaps.values()) == 3 + 2 + 1


def test_a_lone_request_is_alone_and_failed_requests_do_not_count():
    lone = rec("a", 0.0, [0.1, 0.103, 0.106], "w0")
    failed = rec("f", 0.0, [0.1, 0.2], "w1", ok=False)
    gaps = classify_gaps([lone, failed])
    assert gaps["alone"] == pytest.approx([0.003, 0.003])
    summary = gap_summary(gaps)
    assert summary == {"alone": {"mean_s": pytest.approx(0.003), "median_s": pytest.approx(0.003), "count": 2}}


def test_a_disaggregated_requests_prefill_occupies_its_prefill_worker():
    streaming = rec("a", 0.0, [1.0, 1.01, 1.02], "d0")
    shipped = rec("b", 1.001, [1.05, 1.06], "d0", prefill="p0")  # prefills on p0 until 1.05
    gaps = classify_gaps([streaming, shipped])
    assert gaps["nb-prefill"] == pytest.approx([0.01, 0.01])


def test_quiet_excess_counts_only_the_gaps_with_nothing_else_on_the_host():
    # a streams alone on d0 in 4 ms steps, then with b in 8 ms steps; b prefills on d0 itself
    # over a's step 1.012-1.020.
    a = rec("a", 0.99, [1.000, 1.004, 1.008, 1.012, 1.020, 1.028, 1.036], "d0")
    b = rec("b", 1.0121, [1.020, 1.028, 1.036], "d0")

    def model(contexts):  # 3 ms a step, 1 ms more per further stream
        return 0.003 + 0.001 * (len(contexts) - 1)

    excess = quiet_excess_by_batch([a, b], model)
    assert excess == {1: {"median_s": pytest.approx(0.001), "count": 3},  # 4 ms against 3
                      2: {"median_s": pytest.approx(0.004), "count": 4}}  # 8 ms against 4, both streams'
    # c prefills on p0 over a's first step: that gap is not quiet.
    c = rec("c", 1.001, [1.0035, 1.0036], "d1", prefill="p0")
    assert quiet_excess_by_batch([a, b, c], model)[1]["count"] == 2
    # e decodes on w1 until 1.025: only the last two-stream step (a's and b's) is quiet.
    e = rec("e", 0.0, [0.5, 1.025], "w1")
    assert {n: v["count"] for n, v in quiet_excess_by_batch([a, b, e], model).items()} == {2: 2}
    assert set(quiet_excess_by_batch([a, b], model, max_batch=1)) == {1}  # two streams fold into "1+"


def test_the_cli_reads_a_rates_run(tmp_path, capsys):
    d = tmp_path / "hybrid adaptive" / "rate_0.5"
    d.mkdir(parents=True)
    (d / "records.json").write_text(json.dumps([rec("a", 0.0, [0.1, 0.103], "w0").to_dict()]))
    assert main([str(tmp_path), "--json", str(tmp_path / "gaps.json")]) == 0
    out = capsys.readouterr().out
    assert "hybrid adaptive" in out and "3.00 / 3.00 (1)" in out
    assert json.loads((tmp_path / "gaps.json").read_text())["hybrid adaptive"]["rate_0.5"]["alone"]["count"] == 1
    assert main([str(tmp_path / "nothing")]) == 2

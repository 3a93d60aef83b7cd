"""`pd-serve diagnose` on metrics a RouterMetrics produced from synthetic requests: each
bottleneck path is named with its numbers, a uniform workload is not, and the advice follows
the seeds' order (chunk size, then length routing, then disaggregation)."""
from __future__ import annotations

import pytest

from pd_serve.diagnose import (KV_PRESSURE, PREFILL_INTERFERENCE, TRANSFER_BOUND, collect, diagnose,
                               format_report, window_stats)
from pd_serve.metrics import RouterMetrics
from pd_serve.metrics_window import Histogram, parse_snapshot
from pd_serve.request import GenerateResult


def _result(ttft_s: float, num_prompt_tokens: int, route: str = "colocated",
            kv_transfer_s: float | None = None) -> GenerateResult:
    return GenerateResult(
        request_id="r", token_ids=[1, 2], text="", route=route, ttft_s=ttft_s, e2e_s=ttft_s + 0.1,
        itl_s=[0.05], prefill_worker="prefill-0" if route == "disaggregated" else None,
        decode_worker="both-0", kv_transfer_bytes=4096 if kv_transfer_s else 0,
        kv_transfer_s=kv_transfer_s, finish_reason="length", num_prompt_tokens=num_prompt_tokens,
        token_times=[100.0, 100.05])


class Recorder:
    """Feeds a RouterMetrics and snapshots its exposition, as scrapes one second apart would."""

    def __init__(self):
        self.metrics = RouterMetrics(["both-0"])
        self.snapshots = [parse_snapshot(self.metrics.text(), 0.0)]

    def request(self, ttft_s: float, prompt_tokens: int, prefill_s: float | None = None, **kw):
        self.metrics.observe_result(_result(ttft_s, prompt_tokens, **kw),
                                    prefill_s if prefill_s is not None else ttft_s * 0.95)

    def scrape(self):
        self.snapshots.append(parse_snapshot(self.metrics.text(), float(len(self.snapshots))))


def _interval_of_short_requests(rec: Recorder, n: int = 12) -> None:
    for i in range(n):
        rec.request(0.10 + 0.01 * (i % 5), 64)


def test_histogram_quantile_interpolates_like_prometheus():
    h = Histogram(((0.1, 10.0), (0.5, 90.0), (1.0, 100.0), (float("inf"), 100.0)), 100.0, 30.0)
    assert h.quantile(0.5) == pytest.approx(0.1 + 0.4 * (50 - 10) / 80)
    assert h.quantile(0.99) == pytest.approx(0.5 + 0.5 * (99 - 90) / 10)
    later = Histogram(((0.1, 10.0), (0.5, 90.0), (1.0, 110.0), (float("inf"), 110.0)), 110.0, 39.0)
    window = later.minus(h)
    assert window.count == 10 and window.quantile(0.5) == pytest.approx(0.75)
    assert Histogram(((1.0, 0.0), (float("inf"), 0.0)), 0.0, 0.0).quantile(0.5) is None


def test_long_prompts_mixed_into_short_ones_are_prefill_interference():
    rec = Recorder()
    for _ in range(4):
        _interval_of_short_requests(rec)
        rec.request(3.0, 6000, prefill_s=2.9)           # a long prefill ...
        for _ in range(3):
            rec.request(2.5, 64, prefill_s=2.4)         # ... and the short ones stuck behind it
        rec.scrape()
    stats = window_stats(rec.snapshots)
    d = diagnose(stats)
    assert [f.path for f in d.active] == [PREFILL_INTERFERENCE]
    assert stats.ttft_p99_s > 10 * stats.ttft_p50_s and stats.prompt_tokens_p99 > 1000
    assert "chunk size" in d.advice[0] and "length-based routing" in d.advice[1]
    assert "disaggregation" in d.advice[2]
    report = format_report(stats, d)
    assert "verdict: prefill interference" in report and "p99 TTFT" in report


def test_a_uniform_short_workload_is_none():
    rec = Recorder()
    for _ in range(4):
        _interval_of_short_requests(rec)
        rec.scrape()
    d = diagnose(window_stats(rec.snapshots))
    assert d.verdict == "none" and d.advice == ()


def test_a_tail_with_uniform_lengths_is_queueing_not_interference():
    rec = Recorder()
    for _ in range(3):
        _interval_of_short_requests(rec)
        for _ in range(3):
            rec.request(1.5, 64)
        rec.scrape()
    d = diagnose(window_stats(rec.snapshots))
    assert d.verdict == "none" and any("queueing" in n for n in d.notes)


def test_waiting_rising_at_high_kv_usage_is_kv_pressure():
    rec = Recorder()
    for waiting in (0, 1, 3, 6):
        rec.metrics.observe_load("both-0", {"num_waiting": waiting, "num_running": 8,
                                            "kv_cache_usage": 0.93})
        _interval_of_short_requests(rec)
        rec.scrape()
    d = diagnose(window_stats(rec.snapshots))
    assert [f.path for f in d.active] == [KV_PRESSURE]
    assert "0.93" in d.active[0].evidence and "kv_cache_gib" in d.advice[0]


def test_waiting_rising_with_room_in_the_cache_is_not_kv_pressure():
    rec = Recorder()
    for waiting in (0, 2, 5):
        rec.metrics.observe_load("both-0", {"num_waiting": waiting, "kv_cache_usage": 0.4})
        _interval_of_short_requests(rec)
        rec.scrape()
    assert diagnose(window_stats(rec.snapshots)).verdict == "none"


def test_transfer_as_a_large_share_of_ttft_is_transfer_bound():
    rec = Recorder()
    for _ in range(3):
        _interval_of_short_requests(rec)
        for _ in range(3):
            rec.request(0.2, 2000, route="disaggregated", kv_transfer_s=0.1)  # 50% of TTFT
        rec.scrape()
    stats = window_stats(rec.snapshots)
    d = diagnose(stats)
    assert [f.path for f in d.active] == [TRANSFER_BOUND]
    assert stats.transfer_share == pytest.approx(0.5) and stats.num_disaggregated == 9
    assert "threshold" in d.advice[0]


def test_too_few_requests_say_nothing():
    rec = Recorder()
    rec.request(3.0, 6000)
    rec.request(0.1, 64)
    rec.scrape()
    d = diagnose(window_stats(rec.snapshots))
    assert d.verdict == "none" and "too thin" in d.notes[0]


def test_collect_scrapes_across_the_window():
    texts = iter([RouterMetrics().text()] * 5)
    now = [0.0]

    def sleep(s: float) -> None:
        now[0] += s

    snaps = collect(lambda: next(texts), window_s=20, interval_s=5, clock=lambda: now[0], sleep=sleep)
    assert [s.t for s in snaps] == [0.0, 5.0, 10.0, 15.0, 20.0]

"""How precisely a live run pins each figure (bench/live_spread.py)."""
from __future__ import annotations

import random

import pytest

from bench.live_spread import bootstrap_interval, inside, spread, spread_counts
from bench.metrics import RequestRecord, SloSpec, summarize


def _records(ttfts: list[float], tpot_s: float = 0.01, outputs: int = 11) -> list[RequestRecord]:
    return [RequestRecord(f"r{i}", 100, outputs, arrival_s=float(i), first_token_s=i + t,
                          finish_s=i + t + tpot_s * (outputs - 1)) for i, t in enumerate(ttfts)]


def test_the_figures_are_the_ones_the_summary_gives():
    rng = random.Random(1)
    records = _records([rng.lognormvariate(-2, 1) for _ in range(200)])
    s = summarize(records, SloSpec())
    got = spread(records, 0.2)
    assert got["p50_ttft_s"]["value"] == pytest.approx(s["ttft_s"]["p50"])
    assert got["p99_ttft_s"]["value"] == pytest.approx(s["ttft_s"]["p99"])
    assert got["mean_tpot_s"]["value"] == pytest.approx(s["tpot_s"]["mean"])


def test_a_heavy_tail_leaves_the_p99_unpinned_and_the_median_pinned():
    rng = random.Random(2)
    records = _records([rng.lognormvariate(-2, 1) for _ in range(240)])
    got = spread(records, 0.2)
    lo, hi = got["p99_ttft_s"]["interval"]
    assert lo < got["p99_ttft_s"]["value"] < hi
    assert not got["p99_ttft_s"]["pinned"]  # 240 draws of a lognormal: its p99 is not known to 20%
    more = spread(_records([rng.lognormvariate(-2, 1) for _ in range(2000)]), 0.2)
    assert more["p50_ttft_s"]["pinned"]  # 2,000 draws pin its median
    assert got["mean_tpot_s"]["interval"] == pytest.approx((0.01, 0.01))  # every TPOT alike
    assert got["mean_tpot_s"]["pinned"]


def test_more_requests_narrow_the_interval():
    rng = random.Random(3)
    draws = [rng.lognormvariate(-2, 1) for _ in range(2000)]
    few = bootstrap_interval(_records(draws[:100]), "p50_ttft_s")
    many = bootstrap_interval(_records(draws), "p50_ttft_s")
    assert many[1] - many[0] < (few[1] - few[0]) / 2


def test_counts_take_a_simulated_figure_inside_the_live_interval_as_agreeing():
    row = {"metrics": {"p99_ttft_s": {"sim": 1.3, "ok": False}, "p50_ttft_s": {"sim": 2.0, "ok": False},
                       "mean_tpot_s": {"sim": 0.1, "ok": True}},
           "spread": {"p99_ttft_s": {"interval": (0.8, 1.4), "pinned": False},
                      "p50_ttft_s": {"interval": (0.9, 1.1), "pinned": True},
                      "mean_tpot_s": {"interval": (0.09, 0.11), "pinned": True}}}
    assert spread_counts([row]) == {"figures": 3, "pinned": 2, "within_or_inside": 2}
    assert inside((1.0, 2.0), 1.5) and not inside((1.0, 2.0), 2.5) and not inside(None, 1.0)


def test_no_served_request_has_no_interval_and_bad_arguments_are_refused():
    failed = [RequestRecord("r", 10, 2, arrival_s=0.0, ok=False, error="x")]
    assert bootstrap_interval(failed, "p50_ttft_s") is None
    assert spread(failed, 0.2)["p50_ttft_s"] == {"value": None, "interval": None, "pinned": False}
    with pytest.raises(ValueError, match="figure"):
        bootstrap_interval(_records([0.1]), "p90_e2e_s")
    with pytest.raises(ValueError, match="resamples"):
        bootstrap_interval(_records([0.1]), "p50_ttft_s", resamples=1)

"""bench.handover_gaps: token gaps by what was under way (a prefill, a hand-over), live beside
simulated."""
from __future__ import annotations

import json

import pytest

from bench.handover_gaps import classify, gaps_table, live_windows, main, sim_windows
from bench.metrics import RequestRecord


def stream(rid: str, first: float, gap: float, n: int, **kw) -> RequestRecord:
    times = [first + k * gap for k in range(n)]
    return RequestRecord(rid, 64, n, arrival_s=kw.pop("arrival_s", first - 0.1), first_token_s=first,
                         finish_s=times[-1], token_times=times, route="disaggregated", **kw)


def test_a_live_requests_window_splits_where_its_prefill_ended():
    r = stream("a", first=1.0, gap=0.01, n=3, arrival_s=0.2, served_id="srv-a")
    other = stream("b", first=1.0, gap=0.01, n=3, served_id="srv-b")  # not in the log: left out
    prefills, handovers = live_windows([r, other], {"srv-a": (0.5, 0.05)})
    # 0.8 s of TTFT: 0.25 s outside both engines, a third of it before the prefill
    [(start, end)], [(handed, first)] = prefills, handovers
    assert (start, end) == pytest.approx((0.2 + 0.25 / 3, 0.2 + 0.25 / 3 + 0.5))
    assert first == 1.0 and handed == pytest.approx(end)


def test_simulated_windows_come_from_the_recorded_moments():
    r = stream("a", first=2.0, gap=0.01, n=3)
    prefills, handovers = sim_windows([r], {"a": 1.0}, {"a": 1.5})
    assert prefills == [(1.0, 1.5)] and handovers == [(1.5, 2.0)]


def test_each_gap_is_classed_by_what_was_under_way_and_the_streams_then():
    # one stream, 10 ms gaps from t=0 to 0.2; a prefill 0.05-0.1, a hand-over 0.1-0.15
    r = stream("s", first=0.0, gap=0.01, n=21)
    out = classify([r], prefills=[(0.05, 0.1)], handovers=[(0.1, 0.15)])
    assert len(out[("prefill", "1 stream")]) == 5  # midpoints 0.055 ... 0.095
    assert len(out[("hand-over", "1 stream")]) == 5
    assert len(out[("nothing", "1 stream")]) == 10
    assert ("both", "1 stream") not in out
    both = classify([r], prefills=[(0.0, 0.2)], handovers=[(0.1, 0.2)])
    assert len(both[("both", "1 stream")]) == 10
    # three streams at once fall in the middle bucket
    many = classify([stream(f"s{k}", 0.0, 0.01, 5) for k in range(3)], [], [])
    assert len(many[("nothing", "2-4 streams")]) == 12


def test_the_table_sets_live_beside_simulated_and_needs_enough_gaps():
    live = {("hand-over", "1 stream"): [0.024] * 12, ("nothing", "1 stream"): [0.014] * 3}
    sim = {("hand-over", "1 stream"): [0.011] * 20}
    table = gaps_table(live, sim)
    assert "24.0 / 11.0 (12)" in table and "- / - (3)" in table


def test_a_sweep_without_rounds_or_the_system_is_refused(tmp_path, capsys):
    path = tmp_path / "summary.json"
    path.write_text(json.dumps({"experiment": "rates", "rates": [1.0]}))
    assert main(["--live", str(path)]) == 2
    assert "--round" in capsys.readouterr().err
    path.write_text(json.dumps({"experiment": "rates-rounds", "round_dirs": ["round_0"], "rates": [1.0],
                                "systems": {"colocated": "configs/colocated.yaml"}}))
    assert main(["--live", str(path), "--system", "disaggregated"]) == 2
    assert "no system 'disaggregated'" in capsys.readouterr().err

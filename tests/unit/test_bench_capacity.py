"""Capacity from a closed loop's records, and the sweep's rates set from it (bench/capacity.py)."""
from __future__ import annotations

import argparse

import pytest

from bench import compare
from bench.capacity import Capacity, parse_loads, rates_at, steady_capacity
from bench.metrics import RequestRecord


def closed_loop(num_requests: int, concurrency: int, service_s: float, tail_s: float = 0.0) -> list[RequestRecord]:
    """A closed loop of identical requests, each `service_s` long: a new one is sent when one
    finishes. The last `concurrency` take `tail_s` longer (a slow drain)."""
    slots = [0.0] * concurrency
    records = []
    for k in range(num_requests):
        i = min(range(concurrency), key=slots.__getitem__)
        start = slots[i]
        finish = start + service_s + (tail_s if k >= num_requests - concurrency else 0.0)
        slots[i] = finish
        records.append(RequestRecord(f"r{k}", 100, 8, start, first_token_s=start + 0.1, finish_s=finish))
    return records


def test_capacity_is_the_steady_completion_rate_and_ignores_the_drain():
    # 4 in flight, each 2 s: 2 req/s while the loop is full, whatever the last requests do.
    for tail in (0.0, 30.0):
        cap = steady_capacity(closed_loop(32, 4, 2.0, tail), 4, "colocated")
        assert cap.rps == pytest.approx(2.0) and cap.num_requests == 32 and cap.concurrency == 4
        assert cap.steady_s == pytest.approx(14.0)  # 28 completions at 2 per second
    # Twice as slow a host: half the capacity.
    assert steady_capacity(closed_loop(32, 4, 4.0), 4, "colocated").rps == pytest.approx(1.0)


def test_capacity_refuses_failed_requests_and_a_loop_too_short_to_fill():
    records = closed_loop(16, 4, 1.0)
    records[3].ok, records[3].error = False, "engine died"
    with pytest.raises(ValueError, match="1 of 16 capacity requests failed, first: engine died"):
        steady_capacity(records, 4, "colocated")
    with pytest.raises(ValueError, match="at least 8 requests"):
        steady_capacity(closed_loop(7, 4, 1.0), 4, "colocated")


def test_loads_are_ascending_distinct_fractions():
    assert parse_loads("0.25, 0.5,1") == [0.25, 0.5, 1.0]
    for bad, message in [("", "> 0"), ("0,0.5", "> 0"), ("0.5,x", "numbers"), ("0.5,0.25", "ascending"),
                         ("0.5,0.5", "distinct")]:
        with pytest.raises(ValueError, match=message):
            parse_loads(bad)


def test_rates_are_the_loads_of_capacity_to_three_figures():
    cap = Capacity("colocated", 2.3456, 8, 32, 12.0)
    assert rates_at([0.25, 0.5, 0.75], cap) == [0.586, 1.17, 1.76]
    with pytest.raises(ValueError, match="not distinct"):
        rates_at([0.5, 0.5001], cap)
    assert "2.35 req/s" in cap.line() and Capacity(**cap.to_dict()) == cap


def test_compare_takes_rates_as_given_or_from_the_measured_capacity(monkeypatch):
    args = argparse.Namespace(rates="1,2", loads="0.5", out="unused")
    assert compare.sweep_rates(args, compare.SloSpec()) == ([1.0, 2.0], {})
    for bad in ("1,fast", "0,1"):
        with pytest.raises(ValueError, match="--rates"):
            compare.sweep_rates(argparse.Namespace(rates=bad, loads="0.5", out="unused"), compare.SloSpec())
    measured = Capacity("colocated", 4.0, 8, 32, 7.0)
    monkeypatch.setattr(compare, "measure_capacity", lambda a, s: measured)
    rates, origin = compare.sweep_rates(argparse.Namespace(rates="auto", loads="0.25,0.5,1", out="unused"),
                                        compare.SloSpec())
    assert rates == [1.0, 2.0, 4.0]
    assert origin == {"capacity": measured.to_dict(), "loads": [0.25, 0.5, 1.0]}
    # Bad loads are refused before anything is deployed.
    monkeypatch.setattr(compare, "measure_capacity", lambda a, s: pytest.fail("measured with bad loads"))
    with pytest.raises(ValueError, match="--loads"):
        compare.sweep_rates(argparse.Namespace(rates="auto", loads="1,0.5", out="unused"), compare.SloSpec())

"""bench.fidelity_ranking: whether the simulator orders the systems as the live sweep did."""
from __future__ import annotations

from bench.fidelity_ranking import ALL_RATES, agreement, met_slo, pair_orders, ranking_table


def row(system: str, rate: float, live: int, sim: int) -> dict:
    return {"system": system, "rate": rate, "met_slo": {"live": live, "sim": sim}}


def test_met_slo_counts_the_requests_within_both_slos():
    assert met_slo({"slo_attainment": 0.75, "num_requests": 240}) == 180
    assert met_slo({"slo_attainment": None, "num_requests": 0}) == 0


def test_pairs_agree_where_the_simulated_order_is_the_live_one_and_live_ties_agree_with_any():
    rows = [row("a", 5.0, 300, 250), row("b", 5.0, 350, 240),  # b wins live, a simulated: wrong order
            row("a", 2.0, 100, 90), row("b", 2.0, 200, 150),  # same order
            row("a", 8.0, 300, 100), row("b", 8.0, 305, 300)]  # within 3% live: a tie
    orders = pair_orders(rows)
    assert [o["rate"] for o in orders] == [2.0, 5.0, 8.0, ALL_RATES]  # rates ascending, then their sums
    by_rate = {o["rate"]: o for o in orders}
    assert by_rate[2.0]["agrees"] and not by_rate[2.0]["live_tie"]
    assert not by_rate[5.0]["agrees"]
    assert by_rate[8.0]["live_tie"] and by_rate[8.0]["agrees"]
    assert by_rate[ALL_RATES]["live"] == (700, 855) and by_rate[ALL_RATES]["sim"] == (440, 690)
    assert agreement(orders) == (1, 2)  # single rates only, the tie left out
    table = ranking_table(orders)
    assert "NO" in table and "tie live" in table and " all |" in table


def test_three_systems_give_three_pairs_per_rate_and_a_tighter_tie_decides_more():
    rows = [row(s, 1.0, live, sim) for s, live, sim in (("a", 100, 100), ("b", 102, 90), ("c", 150, 160))]
    orders = pair_orders(rows)
    assert [o["pair"] for o in orders if o["rate"] == 1.0] == [("a", "b"), ("a", "c"), ("b", "c")]
    assert agreement(orders) == (2, 2)
    strict = pair_orders(rows, tie=0.0)
    assert agreement(strict) == (2, 3)  # 100 < 102 live, 100 > 90 simulated

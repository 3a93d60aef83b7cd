"""Does the simulator order the systems as the live sweep did?

The simulator is how this project chooses between deployments and policies at scales these
machines lack, so what it must get right above all is which of two systems serves more requests
within both SLOs. The figures' 20% check (`bench.sim_fidelity`) does not say that: a simulator can
miss every p99 by 30% and still order the systems right, or meet 20% on each and order two close
ones wrong. Stop 61's case: the adaptive policy's `both_meet: decoder` had gained 12-21% at 64 req/s
in the simulated 4 x H100 and lost 14% live on hybrid (results/rates_v115).

Per rate, the requests each system served within both SLOs, live and simulated (pooled over the
rounds), and for every pair of systems whether the simulator orders them as live did; also the
same over every rate together. A pair whose live counts differ by less than `tie` (relative) is
a tie live, and any simulated order agrees with it: rounds of 240 requests spread by about 5%.
"""
from __future__ import annotations

from itertools import combinations
from typing import Any, Mapping, Sequence

from pd_serve.report import format_table

TIE = 0.03  # live counts within 3% of each other: a tie, which any simulated order matches
ALL_RATES = "all"


def met_slo(summary: Mapping[str, Any]) -> int:
    """Requests within both SLOs (`bench.metrics.summarize`: attainment over all requests)."""
    return round((summary["slo_attainment"] or 0.0) * summary["num_requests"])


def _counts(rows: Sequence[Mapping[str, Any]]) -> dict[Any, dict[str, dict[str, int]]]:
    """rate -> system -> {"live": n, "sim": n}, rates ascending, then ALL_RATES (their sums)."""
    by_rate: dict[Any, dict[str, dict[str, int]]] = {}
    totals: dict[str, dict[str, int]] = {}
    for row in sorted(rows, key=lambda r: r["rate"]):
        met = row["met_slo"]
        by_rate.setdefault(row["rate"], {})[row["system"]] = dict(met)
        total = totals.setdefault(row["system"], {"live": 0, "sim": 0})
        total["live"] += met["live"]
        total["sim"] += met["sim"]
    return {**by_rate, ALL_RATES: totals} if totals else {}


def order(a: float, b: float, tie: float = 0.0) -> int:
    """1 if a > b, -1 if a < b, 0 within `tie` of the larger (relative)."""
    if abs(a - b) <= tie * max(a, b):
        return 0
    return 1 if a > b else -1


def pair_orders(rows: Sequence[Mapping[str, Any]], tie: float = TIE) -> list[dict[str, Any]]:
    """For every rate (then ALL_RATES) and pair of systems: live and simulated counts within both
    SLOs, and whether the simulated order matches the live one (any does where live ties)."""
    out = []
    for rate, systems in _counts(rows).items():
        for a, b in combinations(systems, 2):
            live = (systems[a]["live"], systems[b]["live"])
            sim = (systems[a]["sim"], systems[b]["sim"])
            live_order = order(*live, tie)
            out.append({"rate": rate, "pair": (a, b), "live": live, "sim": sim, "live_tie": live_order == 0,
                        "agrees": live_order == 0 or order(*sim) == live_order})
    return out


def agreement(orders: Sequence[Mapping[str, Any]]) -> tuple[int, int]:
    """(pairs the simulator orders as live did, pairs live did not tie), over single rates only."""
    decided = [o for o in orders if o["rate"] != ALL_RATES and not o["live_tie"]]
    return sum(o["agrees"] for o in decided), len(decided)


def ranking_table(orders: Sequence[Mapping[str, Any]]) -> str:
    """Markdown: one row per rate and pair of systems."""
    body = []
    for o in orders:
        (a, b), live, sim = o["pair"], o["live"], o["sim"]
        rate = o["rate"] if o["rate"] == ALL_RATES else f"{o['rate']:g}"
        verdict = "tie live" if o["live_tie"] else ("yes" if o["agrees"] else "NO")
        body.append([rate, f"{a} / {b}", f"{live[0]} / {live[1]}", f"{sim[0]} / {sim[1]}", verdict])
    return format_table(["rate req/s", "systems", "within both SLOs live", "simulated", "same order"], body)

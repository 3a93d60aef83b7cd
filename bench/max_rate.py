"""The highest request rate at which a system still meets its SLOs: DistServe's goodput.

DistServe (OSDI '24) rates a placement by the largest arrival rate at which a given share of
requests (90% in its evaluation) meet both the TTFT and the TPOT SLO, per GPU. Here that rate is
found by search over one monotone-in-practice function, the SLO attainment of a run at a rate:
double from a start until a run misses the target, then bisect between the last rate that met it
and the first that did not. Attainment is not strictly monotone (each rate is its own random
arrival process), so the answer is the last rate seen to meet the target, at the precision the
bisection reached, never a rate that was not run.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

DEFAULT_ATTAINMENT = 0.9      # DistServe's share of requests within both SLOs
DEFAULT_REL_PRECISION = 0.02  # stop bisecting when the bracket is this narrow, relative
MAX_DOUBLINGS = 20            # 2**20 times the start: a system this fast has no useful bound here


@dataclass
class RateSearch:
    """What a search ran: `points` (rate, attainment) in the order run; `max_rate` the highest
    rate that met `target` (0 when none did, down to `floor`); `bounded` False when even the last
    doubling met it (the true maximum lies higher)."""

    target: float
    max_rate: float = 0.0
    bounded: bool = True
    points: list[tuple[float, float]] = field(default_factory=list)


def max_rate_meeting(attainment_at: Callable[[float], float], start: float,
                     target: float = DEFAULT_ATTAINMENT, rel_precision: float = DEFAULT_REL_PRECISION,
                     floor: float | None = None) -> RateSearch:
    """Search the highest rate whose `attainment_at(rate)` (a share in [0, 1]) is at least
    `target`, starting at `start` req/s; below `floor` (default start / 1024) it gives up and
    reports 0."""
    if not start > 0:
        raise ValueError(f"the search must start at a rate > 0, got {start}")
    if not 0 < target <= 1:
        raise ValueError(f"the attainment target must be in (0, 1], got {target}")
    if not 0 < rel_precision < 1:
        raise ValueError(f"rel_precision must be in (0, 1), got {rel_precision}")
    floor = start / 1024 if floor is None else floor
    search = RateSearch(target)

    def meets(rate: float) -> bool:
        share = attainment_at(rate)
        if not 0 <= share <= 1:
            raise ValueError(f"attainment at {rate} req/s must be a share in [0, 1], got {share}")
        search.points.append((rate, share))
        return share >= target

    good, bad = None, None
    if meets(start):
        good = start
        for _ in range(MAX_DOUBLINGS):
            if not meets(good * 2):
                bad = good * 2
                break
            good *= 2
        else:
            search.max_rate, search.bounded = good, False
            return search
    else:
        bad = start
        while bad / 2 >= floor:
            if meets(bad / 2):
                good = bad / 2
                break
            bad /= 2
        if good is None:
            return search
    while (bad - good) / good > rel_precision:
        mid = (good + bad) / 2
        if meets(mid):
            good = mid
        else:
            bad = mid
    search.max_rate = good
    return search

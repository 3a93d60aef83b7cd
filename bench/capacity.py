"""The request rate a deployment sustains on this host, measured, and sweep rates set from it.

Fixed rates mean different loads on different hosts: 2-8 req/s was light load for every system
on run 30's Intel host and past every system's capacity on run 32's AVX2-only AMD one, where the
1,024-token prefill took 3-6x longer. `bench.compare --rates auto --loads 0.25,0.5,0.75` first
measures the colocated baseline's capacity for the rates experiment's own request mix, then
serves each load as that fraction of it, so one sweep asks the same question on any host.

Capacity here is the completion rate of a closed loop that keeps `concurrency` requests in
flight: what `vllm bench serve` calls maximum throughput. It counts only the loop's steady part,
from the first send to the completion that ends it (the (n - c)-th: after it fewer than c
requests are left to keep the loop full). It is the rate the deployment cannot serve faster than
whatever the SLOs; where the SLOs bind first, goodput falls well below a load of 1.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

from bench.metrics import RequestRecord

# Requests in flight per engine while measuring: enough that every engine always has prompts to
# prefill and a batch to decode, as vLLM's maximum-throughput runs do.
CONCURRENCY_PER_ENGINE = 4
# Requests per engine slot: the steady part then spans at least 15 x concurrency completions.
# It was 4 (32 requests on two engines, a 3-4 s steady part) until run 60: the bucket mix's 5%
# of 3,000-4,000-token prompts come 1 or 2 to such a loop, and the simulator, serving eight draws
# of the mix on run 59's measurements, put the capacity at 5.19-9.39 req/s with 32 requests
# (coefficient of variation 0.18) and at 5.47-7.41 with 128 (0.08). A longer loop also averages
# the host's drift over 15-25 s instead of 3-4 s.
REQUESTS_PER_SLOT = 16


@dataclass(frozen=True)
class Capacity:
    """A measured capacity: `rps` completions per second at `concurrency` in flight."""

    system: str
    rps: float
    concurrency: int
    num_requests: int
    steady_s: float

    def to_dict(self) -> dict[str, Any]:
        return {"system": self.system, "rps": self.rps, "concurrency": self.concurrency,
                "num_requests": self.num_requests, "steady_s": self.steady_s}

    def line(self) -> str:
        return (f"capacity of {self.system}: {self.rps:.2f} req/s (closed loop of {self.concurrency}, "
                f"{self.num_requests} requests, steady part {self.steady_s:.1f} s)")


def parse_loads(text: str) -> list[float]:
    """'0.25,0.5,1' -> [0.25, 0.5, 1.0]: fractions of capacity, each > 0, ascending, distinct."""
    try:
        loads = [float(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise ValueError(f"--loads must be numbers separated by commas, got {text!r}") from None
    if not loads or any(not x > 0 for x in loads):
        raise ValueError(f"--loads must be fractions of capacity > 0, got {text!r}")
    if loads != sorted(set(loads)):
        raise ValueError(f"--loads must be distinct and ascending, got {text!r}")
    return loads


def steady_capacity(records: Sequence[RequestRecord], concurrency: int, system: str) -> Capacity:
    """Completions per second of a closed loop's records over its steady part (module docstring).
    Raises ValueError if a request failed or the loop never ran full for long."""
    failed = [r for r in records if not r.ok or r.finish_s is None]
    if failed:
        raise ValueError(f"{len(failed)} of {len(records)} capacity requests failed, first: {failed[0].error}")
    n = len(records)
    if n < 2 * concurrency:
        raise ValueError(f"need at least {2 * concurrency} requests for a closed loop of {concurrency}, got {n}")
    finishes = sorted(r.finish_s for r in records)
    steady = n - concurrency
    start = min(r.arrival_s for r in records)
    span = finishes[steady - 1] - start
    if not span > 0:
        raise ValueError(f"the loop's steady part has no length ({span} s)")
    return Capacity(system, steady / span, concurrency, n, span)


def rates_at(loads: Sequence[float], capacity: Capacity) -> list[float]:
    """The Poisson rates for `loads` (fractions of `capacity`), to 3 significant figures; they
    name the workloads (`rate=...`), so distinct loads must give distinct rates."""
    rates = [float(f"{load * capacity.rps:.3g}") for load in loads]
    if len(set(rates)) != len(rates) or not all(r > 0 for r in rates):
        raise ValueError(f"loads {list(loads)} of {capacity.rps:.3g} req/s give rates {rates}: "
                         "not distinct and positive")
    return rates

"""A prefill step stretched by the host's load as the load changes while the step runs.

The host model (`bench.simulator.host`, the load forms) makes a prefill step take
`load_factor(streams)` times its engine time, for the requests streaming on the host. A long
prompt on an engine with a large budget is one step of 300-400 ms, and requests that arrive
meanwhile start streaming on the other engine halfway through it. Priced once, at its start,
such a step kept the factor of an idle host: hybrid's 3,922-token prompt, prefilled alone on
its prefill worker while three short requests arrived and streamed on the other engine, took
407 ms simulated against 672 ms live (run 26, round 1, 2 req/s), and hybrid's p99 TTFT came out
20-50% low in every saved run. Here the step's engine time is work done at the rate 1 / factor,
and the factor is re-read whenever the host's streams change, so each stretch of the step runs
at the load that held then. With the path-cores host form every step is stretched this way, by
the requests on their request path as well (`HostSpec.path_factor`).
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass
class StretchedStep:
    """`work_s`: engine seconds of the step still to do at `since_s`, done at 1 / `factor` per
    second; `tail_s`: a fixed time after the work (the host's delay for the tokens the step
    streams, which does not stretch)."""

    work_s: float
    factor: float
    since_s: float
    tail_s: float = 0.0

    def __post_init__(self) -> None:
        if self.work_s < 0 or self.factor <= 0:
            raise ValueError(f"a stretched step needs work >= 0 and a factor > 0, got {self}")

    @property
    def end_s(self) -> float:
        return self.since_s + self.work_s * self.factor + self.tail_s

    def restretch(self, now_s: float, factor: float) -> bool:
        """The load's factor is `factor` from `now_s` on; returns whether the step's end moved.
        Once the work is done (the step is in its tail), nothing moves."""
        done = (now_s - self.since_s) / self.factor
        if done >= self.work_s:
            return False
        self.work_s -= done
        self.since_s = now_s
        if factor == self.factor:
            return False
        self.factor = factor
        return True

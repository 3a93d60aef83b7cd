"""The part of a TTFT outside the engines, learned from finished requests.

The step-time model predicts engine steps. A TTFT as the router measures it also holds the way
from the router into each engine and the first token's way back: Ray calls, the worker's
front-end, vLLM's output processing. A few ms per worker a route calls (measured here on the
hybrid deployment: 4-8 ms colocated, 12-17 ms disaggregated), so without it short prompts were
predicted 30-60% fast. It is measured per request, not guessed: each worker reports its
request's TTFT inside the engine (vLLM's timestamp of the step that sampled the first token,
against the moment the worker handed the request over), and the path is the rest. The estimate
is the median of the last `window` requests per route, so one stalled call does not move it.
"""
from __future__ import annotations

import collections
import statistics
from dataclasses import dataclass, field


@dataclass
class RecentMedian:
    """The median of the last `window` observations (0.0 before the first)."""

    window: int = 32
    _values: collections.deque = field(default_factory=collections.deque, repr=False)

    def __post_init__(self) -> None:
        if self.window < 1:
            raise ValueError("window must be >= 1")
        self._values = collections.deque(self._values, maxlen=self.window)

    def observe(self, x: float) -> None:
        self._values.append(float(x))

    @property
    def count(self) -> int:
        return len(self._values)

    @property
    def value(self) -> float:
        return statistics.median(self._values) if self._values else 0.0

"""Keep TTFT predictions honest as the machine changes and as its load changes: a multiplicative
correction learned from predicted-versus-actual prefill times, with a term for the load.

The step-time model is calibrated once, at start-up, on an idle machine. Two things make the
real steps slower than that:
- drift: the machine is shared, and its speed changes (other processes, thermal limits);
- load: the requests already in flight on the same host take a share of what the prefill needs
  (on the CPU host here, every stream keeps engine loops, front-ends, router and client busy on
  the cores the engines compute on). Measured over runs 22-24, live TTFT over the idle-host
  prediction was 0.87-1.08 with nothing in flight, 1.2-1.5 beside one request, 1.4-1.8 beside
  four.

Every finished request gives y = log(actual / raw) of its prefill's queue wait + compute inside
its engine (the router's choice; the rest of a TTFT, such as waiting on a decode worker that
later arrivals keep busy, is not engine speed), where raw is the calibrated model's prediction
before any correction, and x = log(1 + n), n = requests in flight on the prefilling worker's host
when it was decided. A least-squares line through them, with exponential forgetting (an
observation `half_life` observations old weighs half), gives

    factor(n) = exp(a + b log(1 + n)),  b >= 0,  clamped to [min_factor, max_factor]

a is the drift (the factor on an idle host), b how fast the load slows prefills (more in flight
never makes a prefill faster, so a negative slope is taken as none). `ridge` shrinks b toward 0
while the loads seen barely differ, so that a few requests at one load cannot tilt the line.
The first `warmup` observations only accumulate, so one odd request at start-up does not swing
the model.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Mapping


def load_coordinate(num_inflight: int) -> float:
    """x of the load line: log(1 + requests in flight); measured slowdowns grow about so."""
    return math.log1p(max(0, num_inflight))


def predicted_prefill_s(route: str, predictions: Mapping[str, float]) -> float:
    """The queue wait + compute a decision predicted for its prefilling engine (0 if none)."""
    return predictions.get(f"{route}.queue_s", 0.0) + predictions.get(f"{route}.prefill_s", 0.0)


@dataclass
class TtftFeedback:
    half_life: float = 20.0  # observations after which an old one weighs half
    warmup: int = 3
    min_factor: float = 0.25
    max_factor: float = 4.0
    ridge: float = 0.2       # in units of weight x x^2: about a dozen observations at n = 1
    num_observed: int = 0
    _w: float = 0.0
    _sx: float = 0.0
    _sy: float = 0.0
    _sxx: float = 0.0
    _sxy: float = 0.0

    def __post_init__(self) -> None:
        if self.half_life <= 0 or not 0 < self.min_factor <= 1 <= self.max_factor or self.ridge < 0:
            raise ValueError("half_life must be > 0, min_factor <= 1 <= max_factor and ridge >= 0")

    def observe(self, raw_predicted_s: float, actual_s: float, num_inflight: int = 0) -> None:
        """One finished request: its uncorrected prediction, its measured time (seconds) and the
        requests in flight on its host when it was decided."""
        if not (raw_predicted_s > 0 and actual_s > 0):
            return
        decay = 0.5 ** (1.0 / self.half_life)
        x, y = load_coordinate(num_inflight), math.log(actual_s / raw_predicted_s)
        self._w = self._w * decay + 1.0
        self._sx = self._sx * decay + x
        self._sy = self._sy * decay + y
        self._sxx = self._sxx * decay + x * x
        self._sxy = self._sxy * decay + x * y
        self.num_observed += 1

    def line(self) -> tuple[float, float]:
        """(a, b) of log factor = a + b log(1 + n); (0, 0) until warmed up."""
        if self.num_observed < self.warmup:
            return 0.0, 0.0
        mean_x, mean_y = self._sx / self._w, self._sy / self._w
        spread_xx = self._sxx - self._w * mean_x * mean_x
        spread_xy = self._sxy - self._w * mean_x * mean_y
        slope = max(0.0, spread_xy / (spread_xx + self.ridge)) if spread_xx + self.ridge > 0 else 0.0
        return mean_y - slope * mean_x, slope

    def factor_at(self, num_inflight: int) -> float:
        """The multiplier for the calibrated model's step times on a host with `num_inflight`
        requests in flight (1.0 until warmed up)."""
        a, b = self.line()
        return min(self.max_factor, max(self.min_factor, math.exp(a + b * load_coordinate(num_inflight))))

    @property
    def factor(self) -> float:
        """The multiplier on an idle host: the machine's drift alone."""
        return self.factor_at(0)

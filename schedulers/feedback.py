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

On top of the host's line, each kind of engine (role) has its own offset r_k (`by_role`): the
engines on one host do not run alike. On runs 91-93, hybrid's prefill-only engine ran its prompts
1.07-1.17x slower than the shared factor predicted (median by length bucket; p90 1.43-1.88x),
while its both-engine, which gives most of the observations, ran 0.91-1.06x. A factor learned
from all prefills priced the prefill engine's queue as the both-engine's. (Live on this CPU host,
runs 94-95, by role and one factor served alike: 3,855 against 3,837 requests within SLO over 24
rounds; by role won 22 rounds of 24 against colocated, one factor 20.) By role, not by worker:
engines of one role on one host run alike, and an offset per worker chased noise (simulated at
GPU scale, the adaptive policy on two alike engines met its SLOs 0.3-1.8 points less often with
one; by role, as often as with none). The offsets are fitted by
backfitting with the same forgetting: r_k is the forgotten mean of role k's residuals off the
line, shrunk toward 0 by `role_prior` observations (so a role seen a few times borrows the host's
factor), and the line is fitted to each observation less its role's offset. An engine's factor
is exp(a + b log(1 + n) + r_k), clamped as above.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Mapping


def load_coordinate(num_inflight: int) -> float:
    """x of the load line: log(1 + requests in flight); measured slowdowns grow about so."""
    return math.log1p(max(0, num_inflight))


def predicted_prefill_s(route: str, predictions: Mapping[str, float]) -> float:
    """The queue wait + compute a decision predicted for its prefilling engine (0 if none)."""
    return predictions.get(f"{route}.queue_s", 0.0) + predictions.get(f"{route}.prefill_s", 0.0)


@dataclass
class _RoleOffset:
    """One role's forgotten sum of residuals off the host's line, and their weight."""
    weight: float = 0.0
    total: float = 0.0

    def value(self, prior: float) -> float:
        return self.total / (self.weight + prior)


@dataclass
class TtftFeedback:
    half_life: float = 20.0  # observations after which an old one weighs half
    warmup: int = 3
    min_factor: float = 0.25
    max_factor: float = 4.0
    ridge: float = 0.2       # in units of weight x x^2: about a dozen observations at n = 1
    by_role: bool = True
    role_prior: float = 3.0  # observations at offset 0 a role's own residuals are weighed with
    num_observed: int = 0
    _w: float = 0.0
    _sx: float = 0.0
    _sy: float = 0.0
    _sxx: float = 0.0
    _sxy: float = 0.0
    _offsets: dict[str, _RoleOffset] = field(default_factory=dict, repr=False)

    def __post_init__(self) -> None:
        if self.half_life <= 0 or not 0 < self.min_factor <= 1 <= self.max_factor or self.ridge < 0:
            raise ValueError("half_life must be > 0, min_factor <= 1 <= max_factor and ridge >= 0")
        if self.role_prior <= 0:
            raise ValueError("role_prior must be > 0")

    def observe(self, raw_predicted_s: float, actual_s: float, num_inflight: int = 0,
                role: str | None = None) -> None:
        """One finished request: its uncorrected prediction, its measured time (seconds), the
        requests in flight on its host when it was decided, and the role of the engine that
        prefilled it."""
        if not (raw_predicted_s > 0 and actual_s > 0):
            return
        decay = 0.5 ** (1.0 / self.half_life)
        x, y = load_coordinate(num_inflight), math.log(actual_s / raw_predicted_s)
        if self.by_role and role is not None:
            offset = self._offsets.setdefault(role, _RoleOffset())
            y_line = y - offset.value(self.role_prior)  # what the host's line is left to explain
            if self.num_observed >= self.warmup:  # until then the line is flat at 0 and knows nothing
                a, b = self.line()
                offset.weight = offset.weight * decay + 1.0
                offset.total = offset.total * decay + (y - a - b * x)
            y = y_line
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

    def offset(self, role: str | None) -> float:
        """Role `role`'s log factor over the host's line (0 for a role not seen)."""
        offset = self._offsets.get(role) if self.by_role and role is not None else None
        return 0.0 if offset is None else offset.value(self.role_prior)

    def factor_at(self, num_inflight: int, role: str | None = None) -> float:
        """The multiplier for the calibrated model's step times on a host with `num_inflight`
        requests in flight, for an engine of role `role` (None: the host's; 1.0 until warmed up)."""
        a, b = self.line()
        log_factor = a + b * load_coordinate(num_inflight) + self.offset(role)
        return min(self.max_factor, max(self.min_factor, math.exp(log_factor)))

    def role_factors(self) -> dict[str, float]:
        """Each role seen: how many times the host's factor its engines' prefills run."""
        return {role: math.exp(self.offset(role)) for role in sorted(self._offsets)}

    @property
    def factor(self) -> float:
        """The multiplier on an idle host: the machine's drift alone."""
        return self.factor_at(0)

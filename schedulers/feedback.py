"""Keep TTFT predictions honest as the machine changes: a multiplicative correction learned
from predicted-versus-actual TTFT.

The step-time model is calibrated once, at start-up; the machine it runs on is shared and its
speed drifts (other processes, thermal limits, a neighbour's batch). Every finished request gives
log(actual / raw prediction) of its prefill's queue wait + compute (the router's choice: the
rest of a TTFT, such as waiting on a decode worker that later arrivals keep busy, is not engine
speed), where the raw prediction is the calibrated model's before any correction; an
exponentially weighted mean of those logs gives the factor the model's step times are scaled
by. The first `warmup` observations only accumulate, so one odd request at start-up does not
swing the model.

    factor = exp( EWMA_k log(actual_k / raw_k) ),  clamped to [min_factor, max_factor]
"""
from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass
class TtftFeedback:
    half_life: float = 20.0  # observations after which an old one weighs half
    warmup: int = 3
    min_factor: float = 0.25
    max_factor: float = 4.0
    num_observed: int = 0
    _log_mean: float = 0.0
    _weight: float = 0.0

    def __post_init__(self) -> None:
        if self.half_life <= 0 or not 0 < self.min_factor <= 1 <= self.max_factor:
            raise ValueError("half_life must be > 0 and min_factor <= 1 <= max_factor")

    def observe(self, raw_predicted_s: float, actual_s: float) -> None:
        """One finished request: its uncorrected prediction and its measured TTFT (seconds)."""
        if not (raw_predicted_s > 0 and actual_s > 0):
            return
        decay = 0.5 ** (1.0 / self.half_life)
        self._weight = self._weight * decay + 1.0
        x = math.log(actual_s / raw_predicted_s)
        self._log_mean += (x - self._log_mean) / self._weight
        self.num_observed += 1

    @property
    def factor(self) -> float:
        """The multiplier for the calibrated model's step times now (1.0 until warmed up)."""
        if self.num_observed < self.warmup:
            return 1.0
        return min(self.max_factor, max(self.min_factor, math.exp(self._log_mean)))

"""How much more delay the requests decoding on a worker can take and still meet their TPOT SLO.

A prefill on a worker that decodes delays every running request's next token by what its
steps add over the decode-only step; over a whole prompt, by the prefill's engine seconds. Each
request's TPOT SLO is on its mean: (E2E - TTFT) / (output tokens - 1) <= SLO. So a request
that has `k` of its `n` tokens at `elapsed` seconds after its first, and decodes at `itl`
seconds a token from here on, can be delayed in all by

    slack = (n - 1) * SLO - elapsed - (n - k) * itl

and still meet it. With `itl` its own mean gap so far (elapsed / (k - 1): the load as it has
been, host effects included), that is (n - 1) * (SLO - its TPOT so far). A request with one
token so far has no gap yet; the worker's predicted decode step stands in.

A worker's slack is the least over the requests that can still meet their SLO; one already
past saving (negative slack) counts for nothing: more delay cannot cost goodput there. No
request at stake: infinite.

This replaces comparing one prefill step's inter-token gap with the TPOT SLO, which charges a
mean's whole budget to one gap: on this project's CPU (2026-12-02) a 300-token prefill's step
beside running decodes took 0.11-0.25 s, "over" the 0.1 s TPOT SLO, while it added 4-8 ms to
the TPOT of each 32-token request beside it.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Iterable


@dataclass(frozen=True)
class DecodeProgress:
    """One request decoding on a worker, as its tokens have come (seconds on one clock)."""

    first_token_s: float
    num_tokens: int
    max_tokens: int
    tpot_slo_s: float

    def slack_s(self, now_s: float, step_s: float) -> float:
        """Seconds of delay it can still take in all and meet its TPOT SLO (negative: it cannot).
        `step_s`: the worker's decode step, used until the request has a gap of its own."""
        if self.max_tokens < 2:
            return math.inf  # no TPOT to keep
        elapsed_s = max(0.0, now_s - self.first_token_s)
        itl_s = elapsed_s / (self.num_tokens - 1) if self.num_tokens >= 2 else step_s
        remaining = max(0, self.max_tokens - self.num_tokens)
        return (self.max_tokens - 1) * self.tpot_slo_s - elapsed_s - remaining * itl_s


def worker_slack_s(progress: Iterable[DecodeProgress], now_s: float, step_s: float) -> float:
    """The least slack among the requests that can still meet their TPOT SLO (inf: none)."""
    return min((s for p in progress if (s := p.slack_s(now_s, step_s)) >= 0), default=math.inf)

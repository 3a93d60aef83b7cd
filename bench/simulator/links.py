"""KV transfers over links that share their bandwidth.

A transfer of b bytes first waits the link's latency `alpha_s` (no bandwidth used), then moves
its bytes; while k transfers move bytes on one link, each moves at bandwidth / k (processor
sharing). Alone, a transfer takes exactly `alpha_s + b / bandwidth`, the scheduler's line.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from bench.simulator.specs import LinkSpec

_DONE_BYTES = 1.0  # a remainder below one byte is rounding, not data


@dataclass(eq=False)
class Transfer:
    """One request's KV moving from `prefill_id` to `decode_id`; `held` and `loading` are the
    engine requests on either end."""

    num_bytes: int
    prefill_id: str
    decode_id: str
    held: Any
    loading: Any
    start_s: float
    remaining_bytes: float = 0.0
    done_s: float | None = None

    def __post_init__(self) -> None:
        self.remaining_bytes = float(self.num_bytes)

    @property
    def duration_s(self) -> float | None:
        return None if self.done_s is None else self.done_s - self.start_s


class SharedLink:
    def __init__(self, spec: LinkSpec) -> None:
        self.spec = spec
        # Transfers past their latency, moving bytes; fills in `add`, empties in `pop_done`.
        self.active: list[Transfer] = []
        self.version = 0  # bumps whenever the predicted completion changes
        self._updated_s = 0.0
        self.bytes_moved = 0

    def add(self, transfer: Transfer, now_s: float) -> None:
        self._advance(now_s)
        self.active.append(transfer)
        self.version += 1

    def next_done_s(self) -> float | None:
        """When the transfer nearest to done finishes if nothing joins or leaves."""
        if not self.active:
            return None
        share = self.spec.bandwidth_bytes_per_s / len(self.active)
        return self._updated_s + min(t.remaining_bytes for t in self.active) / share

    def pop_done(self, now_s: float) -> list[Transfer]:
        """Advance to `now_s` (the time `next_done_s` predicted) and remove the transfers whose
        bytes have all moved: the nearest one by definition, any others within rounding."""
        self._advance(now_s)
        if self.active:
            min(self.active, key=lambda t: t.remaining_bytes).remaining_bytes = 0.0
        done = [t for t in self.active if t.remaining_bytes <= _DONE_BYTES]
        if done:
            self.active = [t for t in self.active if t.remaining_bytes > _DONE_BYTES]
            self.version += 1
            for t in done:
                t.done_s = now_s
                self.bytes_moved += t.num_bytes
        return done

    def _advance(self, now_s: float) -> None:
        if self.active and now_s > self._updated_s:
            moved = (now_s - self._updated_s) * self.spec.bandwidth_bytes_per_s / len(self.active)
            for t in self.active:
                t.remaining_bytes -= moved
        self._updated_s = max(self._updated_s, now_s)

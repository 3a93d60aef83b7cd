"""The simulator's clock: a heap of (time, sequence, kind, payload); ties pop in push order."""
from __future__ import annotations

import heapq
import itertools
from typing import Any

ARRIVAL = "arrival"  # payload: the job
DISPATCH = "dispatch"  # payload: (worker id, engine request) reaching its worker after the path
STEP_DONE = "step_done"  # payload: (worker id, its step number: a re-stretched step's earlier end is stale)
TRANSFER_BYTES = "transfer_bytes"  # payload: transfer whose latency (alpha) has passed
LINK_CHECK = "link_check"  # payload: (link key, link version) of a predicted completion
GIVE_UP_CHECK = "give_up_check"  # payload: (job, when its prompt was sent): take it back from a stalled prefill worker?


class EventQueue:
    def __init__(self) -> None:
        self._heap: list[tuple[float, int, str, Any]] = []
        self._sequence = itertools.count()

    def push(self, time_s: float, kind: str, payload: Any) -> None:
        heapq.heappush(self._heap, (time_s, next(self._sequence), kind, payload))

    def pop(self) -> tuple[float, str, Any]:
        time_s, _, kind, payload = heapq.heappop(self._heap)
        return time_s, kind, payload

    def peek_time_s(self) -> float | None:
        return self._heap[0][0] if self._heap else None

    def __len__(self) -> int:
        return len(self._heap)

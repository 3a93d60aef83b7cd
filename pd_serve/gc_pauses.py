"""Python's cyclic garbage collector in pd-serve's long-lived processes, timed.

A worker actor hosts vLLM's front-end (AsyncLLM) in a process that has imported torch,
transformers and vLLM: millions of tracked objects. A full (generation 2) collection walks all
of them, and nothing else in that process runs meanwhile: no token is streamed, no request is
handed to the engine. That made it a suspect for the 0.4-0.9 s stalls seen on this CPU host, so
every collection is timed from `gc.callbacks` (a worker's `gc_pauses()`, the router's `status()`,
the benchmark client's summary): a stall can then be checked against them. Measured
(2026-12-01, 8 passes of 60 requests at 2 req/s on hybrid): the workers and the router ran 4-18
young collections each and no full one, none over 2 ms; the client, 3 full collections, the
longest 92 ms, during deploy(). vLLM's API server also freezes its start-up heap
(`vllm.utils.gc_utils.freeze_gc_heap`); with no full collection seen, pd-serve does not.
"""
from __future__ import annotations

import collections
import gc
import time
from typing import Any

# Collections at least this long are kept one by one (with when they began), the rest counted.
LONG_PAUSE_S = 0.05
KEEP_LONG = 64


class GcPauses:
    """Every collection of this process from `install()` on: counts and seconds per generation,
    the longest, and the long ones (>= `long_s`) with their wall-clock start."""

    def __init__(self, long_s: float = LONG_PAUSE_S, keep: int = KEEP_LONG) -> None:
        self.long_s = long_s
        self.counts: collections.Counter = collections.Counter()
        self.seconds: collections.Counter = collections.Counter()
        self.long: collections.deque = collections.deque(maxlen=keep)
        self.max_s = 0.0
        self._t0: float | None = None

    def install(self) -> GcPauses:
        if self._on_gc not in gc.callbacks:
            gc.callbacks.append(self._on_gc)
        return self

    def uninstall(self) -> None:
        if self._on_gc in gc.callbacks:
            gc.callbacks.remove(self._on_gc)

    def _on_gc(self, phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            self._t0 = time.perf_counter()
            return
        if self._t0 is None:
            return
        pause_s, self._t0 = time.perf_counter() - self._t0, None
        gen = int(info.get("generation", -1))
        self.counts[gen] += 1
        self.seconds[gen] += pause_s
        self.max_s = max(self.max_s, pause_s)
        if pause_s >= self.long_s:
            self.long.append({"t_start": time.time() - pause_s, "generation": gen, "pause_s": pause_s,
                              "collected": info.get("collected")})

    def summary(self) -> dict[str, Any]:
        """JSON-able: per generation the count and seconds, the longest pause and the long ones."""
        return {"collections": {str(g): {"count": n, "seconds": self.seconds[g]}
                                for g, n in sorted(self.counts.items())},
                "max_pause_s": self.max_s, "long_pause_s": self.long_s, "long": list(self.long)}

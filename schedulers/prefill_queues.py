"""The prompts a router has sent to each worker and not yet seen prefilled, and since when.

The policies read two numbers per worker from it: the queued prompt tokens, and how long ago
the oldest of them was sent. The engine has been working through that queue since then, so the
predicted wait is the queue's predicted steps less that time (route_prediction.queue_s);
counting the whole queue made a request that arrived halfway through a long prefill wait the
full prefill in the prediction (seen here: predicted 430 ms where the request took 315).
"""
from __future__ import annotations

import collections


class PrefillQueues:
    def __init__(self) -> None:
        self._prompts: dict[str, dict[str, tuple[int, float]]] = collections.defaultdict(dict)

    def sent(self, worker_id: str, key: str, num_tokens: int, now_s: float) -> None:
        """A prompt of `num_tokens` to prefill went to `worker_id` at `now_s`."""
        self._prompts[worker_id][key] = (num_tokens, now_s)

    def prefilled(self, worker_id: str, key: str) -> None:
        """Its prefill ended (first token or KV ready) or it failed; a second call does nothing."""
        self._prompts[worker_id].pop(key, None)

    def num_tokens(self, worker_id: str) -> int:
        return sum(n for n, _ in self._prompts[worker_id].values())

    def elapsed_s(self, worker_id: str, now_s: float) -> float:
        """Seconds since the oldest queued prompt was sent (0 when none is queued)."""
        queued = self._prompts[worker_id].values()
        return max(0.0, now_s - min(t for _, t in queued)) if queued else 0.0

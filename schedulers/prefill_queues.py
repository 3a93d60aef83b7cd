"""The prompts a router has sent to each worker and not yet seen prefilled.

Kept by request, so that marking one prefilled twice (its first token, then its stream's end or
failure) cannot count it out twice. The policies read the queued prompt tokens per worker
(WorkerView.num_queued_prefill_tokens), and predict the wait as the whole queue's steps.

Crediting the queue with the time since its oldest prompt was sent (the engine has been working
on it that long) was tried on 2026-12-01 and not kept: in the simulator's 4 x H100 Llama-3-8B
config at 64 req/s it made the adaptive policy's TTFT p90 205 ms against 152 and its goodput
38.4 req/s against 41.3. Under load, decodes take part of each step's token budget, so the
engine works through a queue slower than the prefill-only chunks the credit assumes; counting
the whole queue errs the other way, and routed better.

What the engine has done of the prompt at the head of the queue is credited since stop 59
(`head`, `RoutePredictor.queue_s`): at most that one prompt's own steps, for the time since it
could start (sent, and the prompt before it prefilled). Live, counting it whole put the queue
wait of hybrid's queued colocated prompts at 1.5-1.9x what it was (runs 105-107: the wait 0.52-0.67
of its prediction, the engine time 0.62-0.84 of queue + prefill for prompts up to 512 tokens, the
prefill-only worker's 0.75-0.85): a prompt arrives on average halfway through the one being
prefilled. Side by side live (runs 108-109, docs/MEASUREMENTS.md stop 59) hybrid met both SLOs
2,823 times with the credit against 2,721 without, 12 rounds of 16 won; on the simulated 4 x H100
at 64 req/s it gained or tied.
"""
from __future__ import annotations

import collections


class PrefillQueues:
    def __init__(self) -> None:
        # per worker: request key -> (prompt tokens, when it was sent)
        self._prompts: dict[str, dict[str, tuple[int, float]]] = collections.defaultdict(dict)
        # per worker: when a prompt's prefill on it last ended (the caller's clock)
        self._last_done_s: dict[str, float] = {}

    def sent(self, worker_id: str, key: str, num_tokens: int, sent_s: float = 0.0) -> None:
        """A prompt of `num_tokens` to prefill went to `worker_id` at `sent_s` (the caller's clock)."""
        self._prompts[worker_id][key] = (num_tokens, sent_s)

    def prefilled(self, worker_id: str, key: str, done_s: float | None = None) -> None:
        """Its prefill ended (first token or KV ready) at `done_s`, or it failed (no time: it says
        nothing of the engine's progress); a second call does nothing."""
        if self._prompts[worker_id].pop(key, None) is not None and done_s is not None:
            self._last_done_s[worker_id] = max(done_s, self._last_done_s.get(worker_id, done_s))

    def head(self, worker_id: str, now_s: float) -> tuple[int, float]:
        """(tokens, seconds) of the prompt the engine is working on first, the oldest sent to
        `worker_id` (vLLM serves its prompts first come, first served), and how long it has had:
        since it was sent, or since the prompt before it was prefilled if that was later. (0, 0.0)
        with none queued."""
        oldest = self._oldest(worker_id)
        if oldest is None:
            return 0, 0.0
        num_tokens, sent_s = oldest
        started_s = max(sent_s, self._last_done_s.get(worker_id, sent_s))
        return num_tokens, max(0.0, now_s - started_s)

    def _oldest(self, worker_id: str) -> tuple[int, float] | None:
        """(tokens, sent_s) of the longest-queued prompt on `worker_id`; None with none queued."""
        return min(self._prompts[worker_id].values(), key=lambda p: p[1], default=None)

    def has(self, worker_id: str, key: str) -> bool:
        return key in self._prompts[worker_id]

    def num_tokens(self, worker_id: str) -> int:
        return sum(n for n, _ in self._prompts[worker_id].values())

    def num_prompts(self, worker_id: str) -> int:
        return len(self._prompts[worker_id])

    def longest(self, worker_id: str) -> int:
        """The longest prompt queued on `worker_id` (0: none)."""
        return max((n for n, _ in self._prompts[worker_id].values()), default=0)

    def oldest_sent_s(self, worker_id: str) -> float | None:
        """When the longest-queued prompt on `worker_id` was sent (None: none queued)."""
        oldest = self._oldest(worker_id)
        return None if oldest is None else oldest[1]

    def num_tokens_sent_by(self, worker_id: str, until_s: float) -> int:
        """The tokens of the prompts on `worker_id` sent by `until_s`: those a step that starts
        then can batch with the oldest (vLLM schedules every waiting prompt, first come first
        served, up to its token budget, and gives none back before the step ends)."""
        return sum(n for n, sent_s in self._prompts[worker_id].values() if sent_s <= until_s)

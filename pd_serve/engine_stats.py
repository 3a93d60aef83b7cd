"""What a worker learns from its engine's own statistics, per step.

vLLM calls a stat logger with every batch of engine-core outputs: scheduler state (running and
waiting requests, KV cache usage), the prompt tokens by source (computed here, prefix-cache hit,
loaded over the KV connector), the connector's transfer records (bytes and seconds of each NIXL
READ), and, with `enable_logging_iteration_details`, each step's token counts and elapsed time.
This module keeps those in one collector the worker reads; it imports vLLM only for the base class.
"""
from __future__ import annotations

import collections
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from vllm.v1.metrics.loggers import StatLoggerBase

# A deployment's every step over a benchmark sweep (bench.compare saves them for bench.engine_stalls):
# a rates round of 4 x 240 requests takes up to ~9,000 steps per engine on this host (run 88), each
# record a few hundred bytes: 8 MB at most per worker.
MAX_STEPS_KEPT = 32768
STALE_TRANSFER_S = 600.0  # a transfer nobody claimed for this long belonged to an aborted request


@dataclass
class TransferRecord:
    """One completed KV transfer as the connector measured it (NIXL's telemetry): from posting
    the READ until a check saw it done, of which `post_s` went to posting it."""

    t: float
    num_bytes: int
    duration_s: float
    post_s: float | None = None
    num_descriptors: int | None = None


@dataclass
class StepRecord:
    """One engine iteration: what it computed and how long it took."""

    t: float
    num_prefill_reqs: int
    num_prefill_tokens: int
    num_decode_reqs: int
    num_decode_tokens: int
    elapsed_s: float


@dataclass
class EngineStatsCollector:
    num_running: int = 0
    num_waiting: int = 0
    kv_cache_usage: float = 0.0
    prompt_tokens_computed: int = 0
    prompt_tokens_cached: int = 0
    prompt_tokens_external: int = 0
    num_transfer_failures: int = 0
    transfers: collections.deque = field(default_factory=lambda: collections.deque(maxlen=4096))
    unclaimed: collections.deque = field(default_factory=collections.deque)
    steps: collections.deque = field(default_factory=lambda: collections.deque(maxlen=MAX_STEPS_KEPT))
    lock: threading.Lock = field(default_factory=threading.Lock)

    def observe(self, scheduler_stats: Any, iteration_stats: Any) -> None:
        now = time.time()
        with self.lock:
            if scheduler_stats is not None:
                self.num_running = scheduler_stats.num_running_reqs
                self.num_waiting = scheduler_stats.num_waiting_reqs
                self.kv_cache_usage = float(scheduler_stats.kv_cache_usage)
                self._observe_connector(now, scheduler_stats.kv_connector_stats)
                d = scheduler_stats.iteration_details
                if d is not None and not d.is_dummy:
                    self.steps.append(StepRecord(now, d.num_ctx_requests, d.num_ctx_tokens,
                                                 d.num_generation_requests, d.num_generation_tokens,
                                                 d.elapsed_ms / 1e3))
            if iteration_stats is not None:
                p = iteration_stats.prompt_token_stats
                self.prompt_tokens_computed += p.computed
                self.prompt_tokens_cached += p.local_cache_hit
                self.prompt_tokens_external += p.external_kv_transfer

    def _observe_connector(self, now: float, stats: Any) -> None:
        if not stats:
            return
        data = getattr(stats, "data", stats)
        durations = data.get("transfer_duration", [])
        posts = data.get("post_duration") or [None] * len(durations)
        descriptors = data.get("num_descriptors") or [None] * len(durations)
        for num_bytes, duration, post, count in zip(data.get("bytes_transferred", []), durations, posts,
                                                    descriptors):
            record = TransferRecord(now, int(num_bytes), float(duration),
                                    None if post is None else float(post), None if count is None else int(count))
            self.transfers.append(record)
            self.unclaimed.append(record)
        self.num_transfer_failures += len(data.get("num_failed_transfers", []))

    def claim_transfers(self, t_submit: float, count: int = 1) -> list[TransferRecord]:
        """The transfers that loaded one request's KV: the `count` oldest not yet claimed.

        Loads complete, and first tokens follow, in roughly the order requests were admitted, so
        first come, first claimed; records older than any request still waiting are stale
        (their request was aborted) and dropped."""
        with self.lock:
            while self.unclaimed and self.unclaimed[0].t < t_submit - STALE_TRANSFER_S:
                self.unclaimed.popleft()
            return [self.unclaimed.popleft() for _ in range(min(count, len(self.unclaimed)))]

    def snapshot(self) -> dict[str, Any]:
        with self.lock:
            return {
                "num_running": self.num_running,
                "num_waiting": self.num_waiting,
                "kv_cache_usage": self.kv_cache_usage,
                "prompt_tokens_computed": self.prompt_tokens_computed,
                "prompt_tokens_cached": self.prompt_tokens_cached,
                "prompt_tokens_external": self.prompt_tokens_external,
                "num_transfers": len(self.transfers),
                "num_transfer_failures": self.num_transfer_failures,
                "num_steps": len(self.steps),
            }

    def recent_steps(self, since_t: float = 0.0) -> list[dict[str, Any]]:
        with self.lock:
            return [vars(s).copy() for s in self.steps if s.t >= since_t]

    def recent_transfers(self, since_t: float = 0.0) -> list[dict[str, Any]]:
        """Completed transfers recorded at or after `since_t`, claimed or not."""
        with self.lock:
            return [vars(r).copy() for r in self.transfers if r.t >= since_t]


def stat_logger_factory(collector: EngineStatsCollector):
    """A vLLM StatLoggerFactory feeding `collector` (vLLM calls it with config and engine index)."""

    class _CollectorLogger(StatLoggerBase):
        def __init__(self, vllm_config, engine_index: int = 0):
            self.collector = collector

        def record(self, scheduler_stats, iteration_stats, mm_cache_stats=None, engine_idx=0):
            self.collector.observe(scheduler_stats, iteration_stats)

        def log_engine_initialized(self):
            pass

    return _CollectorLogger

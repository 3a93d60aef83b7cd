"""The records a policy reads and returns, and the policy interface.

The router (a Ray actor) fills `RequestInfo` and `ClusterView` from its own bookkeeping and the
engines' stats, calls `policy.decide(request, view)`, and acts on the `Decision`. All records are
immutable; a policy never mutates them.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterable, Mapping, Protocol

ROLE_PREFILL = "prefill"
ROLE_DECODE = "decode"
ROLE_BOTH = "both"
ROLES = (ROLE_PREFILL, ROLE_DECODE, ROLE_BOTH)

ROUTE_COLOCATED = "colocated"
ROUTE_DISAGGREGATED = "disaggregated"


@dataclass(frozen=True)
class RequestInfo:
    """One request as the router sees it on arrival.

    `num_cached_tokens`: prompt tokens expected to hit the prefix cache (0: none known).
    `ttft_slo_s` / `tpot_slo_s`: seconds; None means "from the SLO table by length bucket".
    """

    request_id: str
    num_prompt_tokens: int
    max_tokens: int
    num_cached_tokens: int = 0
    ttft_slo_s: float | None = None
    tpot_slo_s: float | None = None

    @property
    def num_uncached_tokens(self) -> int:
        """Prompt tokens that must be prefilled: prompt minus cached, never below 0."""
        return max(0, self.num_prompt_tokens - self.num_cached_tokens)


@dataclass(frozen=True)
class WorkerView:
    """One engine's state as last seen by the router.

    `role`: "prefill" | "decode" | "both". Counts are requests unless named `_tokens`;
    `kv_cache_usage` is the engine's used fraction 0..1. `speed_factor`: how many times longer
    than calibrated this engine's steps run now (the router's TTFT feedback at the load on the
    engine's host: schedulers/feedback.py); 1 means as calibrated.
    """

    worker_id: str
    role: str
    is_healthy: bool = True
    num_running: int = 0
    num_waiting: int = 0
    kv_cache_usage: float = 0.0
    num_inflight: int = 0
    num_queued_prefill_tokens: int = 0
    max_model_len: int = 0  # the engine's limit on prompt + output tokens; 0: not known
    speed_factor: float = 1.0
    # The least TPOT slack of the requests decoding here (schedulers/decode_slack.py): seconds of
    # delay they can still take in all; inf when none is at stake; None when the view does not
    # track it (a prefill's longest step is then held against the TPOT SLO instead).
    decode_slack_s: float | None = None
    # Seconds the worker has been silent while requests stream from it or prompts wait on it,
    # beyond the longest it could take (schedulers/stall.py): added to its queue in every prediction.
    stall_s: float = 0.0
    # Seconds until a request sent here now gets one of the engine's running slots
    # (schedulers/decode_slots.py): 0 while a slot is free. A prompt's prefill and a shipped-in
    # request's KV read both start only then.
    slot_wait_s: float = 0.0
    # The prompt at the head of the queue above, and for how long the engine has had it
    # (schedulers/prefill_queues.py: `head`): its part already done comes off the queue's wait.
    queue_head_tokens: int = 0
    queue_head_elapsed_s: float = 0.0

    def __post_init__(self) -> None:
        if self.role not in ROLES:
            raise ValueError(f"worker {self.worker_id!r}: role {self.role!r} is not one of {ROLES}")
        if not self.speed_factor > 0:
            raise ValueError(f"worker {self.worker_id!r}: speed_factor must be > 0, got {self.speed_factor}")
        if not self.stall_s >= 0:
            raise ValueError(f"worker {self.worker_id!r}: stall_s must be >= 0, got {self.stall_s}")
        if not self.slot_wait_s >= 0:
            raise ValueError(f"worker {self.worker_id!r}: slot_wait_s must be >= 0, got {self.slot_wait_s}")
        if not 0 <= self.queue_head_tokens <= self.num_queued_prefill_tokens or not self.queue_head_elapsed_s >= 0:
            raise ValueError(f"worker {self.worker_id!r}: the queue's head ({self.queue_head_tokens} tokens, "
                             f"{self.queue_head_elapsed_s} s) must be within its {self.num_queued_prefill_tokens} "
                             f"queued tokens, its time >= 0")
        if self.decode_slack_s is not None and not self.decode_slack_s >= 0:
            raise ValueError(f"worker {self.worker_id!r}: decode_slack_s must be >= 0 or None, "
                             f"got {self.decode_slack_s}")

    @property
    def is_full(self) -> bool:
        """No free KV block: a request sent here could only wait or preempt running ones."""
        return self.kv_cache_usage >= 1.0

    def fits(self, num_tokens: int) -> bool:
        """Whether `num_tokens` (prompt + tokens to generate here) fit this engine's max_model_len."""
        return self.max_model_len <= 0 or num_tokens <= self.max_model_len

    @property
    def load_key(self) -> tuple[int, int, float, str]:
        """Sort key, least loaded first: router's in-flight count, then the engine's running +
        waiting, then KV usage; the id breaks ties so choices are deterministic."""
        return (self.num_inflight, self.num_waiting + self.num_running, self.kv_cache_usage, self.worker_id)


@dataclass(frozen=True)
class LinkEstimate:
    """A P->D link's fitted transfer time `t(bytes) = alpha_s + bytes / beta_bytes_per_s`."""

    alpha_s: float
    beta_bytes_per_s: float

    def __post_init__(self) -> None:
        if self.alpha_s < 0 or self.beta_bytes_per_s <= 0:
            raise ValueError(f"LinkEstimate needs alpha_s >= 0 and beta_bytes_per_s > 0, got "
                             f"{self.alpha_s}, {self.beta_bytes_per_s}")

    def predict_s(self, num_bytes: int) -> float:
        """Seconds to move `num_bytes` over this link."""
        return self.alpha_s + num_bytes / self.beta_bytes_per_s


@dataclass(frozen=True)
class ClusterView:
    """The workers, the P->D links measured so far, the model's KV bytes per token (0: unknown),
    and per route the seconds a TTFT spends outside the engines (`path_s`, measured; a route
    missing from it: 0)."""

    workers: tuple[WorkerView, ...]
    links: Mapping[tuple[str, str], LinkEstimate] = field(default_factory=dict)
    kv_bytes_per_token: int = 0
    path_s: Mapping[str, float] = field(default_factory=dict)

    def healthy(self, roles: Iterable[str]) -> list[WorkerView]:
        """Healthy workers whose role is in `roles`, in view order."""
        wanted = set(roles)
        return [w for w in self.workers if w.is_healthy and w.role in wanted]

    def link(self, prefill_id: str, decode_id: str) -> LinkEstimate | None:
        return self.links.get((prefill_id, decode_id))


@dataclass(frozen=True)
class Decision:
    """Where a request goes and why.

    `route`: "colocated" | "disaggregated". `decode_worker` decodes (and prefills when colocated);
    `prefill_worker` is None when colocated. `reason`: one sentence with the deciding numbers.
    `predictions`: named predicted quantities (seconds unless named otherwise).
    """

    route: str
    decode_worker: str
    prefill_worker: str | None
    reason: str
    predicted_ttft_s: float | None = None
    predictions: Mapping[str, float] = field(default_factory=dict)


class NoCandidateError(RuntimeError):
    """No healthy worker can serve this route."""


class Policy(Protocol):
    name: str

    def decide(self, request: RequestInfo, view: ClusterView) -> Decision: ...

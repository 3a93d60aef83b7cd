"""What a simulated deployment is made of: engines, workers, the P->D link, the cost model.

Frozen records, checked on construction; `bench.simulator.config` builds them from YAML.
"""
from __future__ import annotations

from dataclasses import dataclass

from bench.simulator.host import HostSpec
from schedulers.candidates import DECODE_ROLES
from schedulers.step_time import StepTimeModel
from schedulers.types import ROLES, LinkEstimate


@dataclass(frozen=True)
class EngineSpec:
    """The vLLM scheduler settings of one simulated engine.

    `max_num_batched_tokens`: the token budget of one step (the chunk size when chunking).
    `enable_chunked_prefill`: False means a prompt is never split; it waits until its whole
    remainder fits a step's budget (so the budget must hold `max_model_len`).
    `long_prefill_token_threshold`: caps one request's chunk per step (0: no cap).
    `num_kv_blocks`: blocks of `block_size` tokens in the KV pool. `watermark`: fraction of the
    pool a newly admitted request must leave free (running requests may use it).
    """

    max_num_batched_tokens: int = 2048
    max_num_seqs: int = 256
    block_size: int = 16
    num_kv_blocks: int = 20000
    enable_chunked_prefill: bool = True
    long_prefill_token_threshold: int = 0
    watermark: float = 0.01
    max_model_len: int = 32768

    def __post_init__(self) -> None:
        for name in ("max_num_batched_tokens", "max_num_seqs", "block_size", "num_kv_blocks",
                     "max_model_len"):
            if getattr(self, name) < 1:
                raise ValueError(f"engine.{name} must be >= 1, got {getattr(self, name)}")
        if self.long_prefill_token_threshold < 0:
            raise ValueError(f"engine.long_prefill_token_threshold must be >= 0, got "
                             f"{self.long_prefill_token_threshold}")
        if not 0 <= self.watermark < 1:
            raise ValueError(f"engine.watermark must be in [0, 1), got {self.watermark}")
        if not self.enable_chunked_prefill and self.max_num_batched_tokens < self.max_model_len:
            raise ValueError(f"engine.max_num_batched_tokens ({self.max_num_batched_tokens}) must be >= "
                             f"max_model_len ({self.max_model_len}) when enable_chunked_prefill is false")
        if self.max_blocks_per_request > self.num_kv_blocks - self.watermark_blocks:
            raise ValueError(f"engine.num_kv_blocks ({self.num_kv_blocks}) cannot hold one request of "
                             f"max_model_len {self.max_model_len} ({self.max_blocks_per_request} blocks) "
                             f"above the watermark ({self.watermark_blocks} blocks)")

    def prefill_cap(self, remaining: int) -> int:
        """The most of a prompt's `remaining` tokens one step gives it before the step's budget:
        all of them unchunked (they wait until they fit), else up to `long_prefill_token_threshold`."""
        threshold = self.long_prefill_token_threshold
        if not self.enable_chunked_prefill or not threshold:
            return remaining
        return min(remaining, threshold)

    @property
    def watermark_blocks(self) -> int:
        return int(self.watermark * self.num_kv_blocks)

    @property
    def max_blocks_per_request(self) -> int:
        return -(-self.max_model_len // self.block_size)


@dataclass(frozen=True)
class LinkSpec:
    """A P->D link: a transfer of b bytes alone takes `alpha_s + b / bandwidth_bytes_per_s`;
    transfers in flight together share the bandwidth equally."""

    alpha_s: float
    bandwidth_bytes_per_s: float
    name: str = ""

    def __post_init__(self) -> None:
        if self.alpha_s < 0 or not self.bandwidth_bytes_per_s > 0:
            raise ValueError(f"link {self.name!r}: need alpha_s >= 0 and bandwidth_bytes_per_s > 0, "
                             f"got {self.alpha_s}, {self.bandwidth_bytes_per_s}")

    def estimate(self) -> LinkEstimate:
        """What the scheduler is told about this link: its uncontended line."""
        return LinkEstimate(self.alpha_s, self.bandwidth_bytes_per_s)


@dataclass(frozen=True)
class RequestPathSpec:
    """Seconds a request spends outside the engines (client, Ray, router), as
    `pd_serve.request_path` measures them live: `colocated_s` per request served by one worker,
    `disaggregated_s` per request that calls a prefill worker, then a decode worker.

    The simulator delays the request's hand-over to its first worker by `colocated_s`, and a
    disaggregated request's hand-over to its decode worker by the rest of `disaggregated_s`, so
    both routes' times to first token carry their measured path. GPU configs leave both 0: their
    path was never measured, and next to GPU-scale prefills it is small."""

    colocated_s: float = 0.0
    disaggregated_s: float = 0.0

    def __post_init__(self) -> None:
        if self.colocated_s < 0 or self.disaggregated_s < 0:
            raise ValueError(f"request path seconds must be >= 0, got {self.colocated_s}, {self.disaggregated_s}")

    @property
    def handover_s(self) -> float:
        """The disaggregated path's second call: what it has beyond a one-worker request's."""
        return max(0.0, self.disaggregated_s - self.colocated_s)


@dataclass(frozen=True)
class WorkerSpec:
    worker_id: str
    role: str
    engine: EngineSpec

    def __post_init__(self) -> None:
        if self.role not in ROLES:
            raise ValueError(f"worker {self.worker_id!r}: role {self.role!r} is not one of {ROLES}")


@dataclass(frozen=True)
class ClusterSpec:
    """Workers, the cost model every engine runs at, and the link between any two workers.

    `shared_link`: True puts every pair's transfers on one link (one switch uplink); False gives
    each (prefill, decode) pair its own link of the same speed. `request_path`: the time requests
    spend outside the engines (none by default). `host`: the CPU host the engines share with the
    request path (`bench.simulator.host`; none by default: GPU engines compute elsewhere).
    """

    workers: tuple[WorkerSpec, ...]
    step_model: StepTimeModel
    link: LinkSpec
    shared_link: bool = False
    request_path: RequestPathSpec = RequestPathSpec()
    host: HostSpec = HostSpec()

    def __post_init__(self) -> None:
        ids = [w.worker_id for w in self.workers]
        if not ids or len(set(ids)) != len(ids):
            raise ValueError(f"workers need distinct ids and at least one worker, got {ids}")
        if not any(w.role in DECODE_ROLES for w in self.workers):
            raise ValueError(f"at least one worker of role {' or '.join(DECODE_ROLES)} is needed")
        for worker in self.workers:
            if worker.engine.block_size != self.step_model.kv.block_size:
                raise ValueError(f"worker {worker.worker_id!r}: block_size {worker.engine.block_size} "
                                 f"differs from the cost model's {self.step_model.kv.block_size}")

    @property
    def chunk_tokens(self) -> int:
        """The prefill chunk that interferes with decodes: the decode-capable engines' smallest
        token budget (the live router's choice for predictions and the adaptive policy)."""
        return min(w.engine.max_num_batched_tokens for w in self.workers if w.role in DECODE_ROLES)

    @classmethod
    def from_roles(cls, step_model: StepTimeModel, roles: dict[str, int], engine: EngineSpec,
                   link: LinkSpec, role_engines: dict[str, EngineSpec] | None = None,
                   shared_link: bool = False,
                   request_path: RequestPathSpec = RequestPathSpec(),
                   host: HostSpec = HostSpec()) -> ClusterSpec:
        """Workers named `<role>-<i>`, e.g. {"prefill": 1, "decode": 1} -> prefill-0, decode-0."""
        role_engines = role_engines or {}
        workers = tuple(WorkerSpec(f"{role}-{i}", role, role_engines.get(role, engine))
                        for role in sorted(roles) for i in range(roles[role]))
        return cls(workers, step_model, link, shared_link, request_path, host)

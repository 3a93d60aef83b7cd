"""Deployment configuration: YAML in, validated frozen records out.

Every key is checked on load; an error names the key's full path and what is allowed
(`workers.prefill.engine.block_size: must be a multiple of 32 on CPU, got 16`). Unknown keys are
errors too: a typo must not silently fall back to a default.
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Literal, Optional

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

ROLES = ("prefill", "decode", "both")
ROUTES = ("auto", "colocated", "disaggregated")
POLICIES = ("colocated", "disaggregated", "length_threshold", "adaptive")
CPU_BLOCK_MULTIPLE = 32  # vLLM's CPU attention backend only takes block sizes of multiples of 32


class ConfigError(ValueError):
    """A configuration file or value that cannot be used, with the key that is wrong."""


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class EngineConfig(_Strict):
    """vLLM engine arguments pd-serve exposes per role (the rest stay at vLLM's defaults)."""

    max_model_len: int = Field(8192, ge=16)
    max_num_batched_tokens: int = Field(2048, ge=16, description="the chunk size of chunked prefill")
    max_num_seqs: int = Field(16, ge=1)
    block_size: int = Field(32, ge=1)
    kv_cache_gib: float = Field(1.0, gt=0, description="KV cache size per worker, GiB")
    dtype: Literal["auto", "float32", "bfloat16", "float16"] = "float32"
    enable_chunked_prefill: bool = True
    long_prefill_token_threshold: int = Field(0, ge=0)
    enable_prefix_caching: bool = True
    enforce_eager: bool = True
    tensor_parallel_size: int = Field(1, ge=1)
    extra: dict[str, Any] = Field(default_factory=dict, description="passed to vLLM as is")

    @model_validator(mode="after")
    def _chunk_fits(self) -> "EngineConfig":
        """Without chunked prefill, a whole prompt must fit one step's token budget."""
        if not self.enable_chunked_prefill and self.max_num_batched_tokens < self.max_model_len:
            raise ValueError(
                f"max_num_batched_tokens ({self.max_num_batched_tokens}) must be >= max_model_len "
                f"({self.max_model_len}) when enable_chunked_prefill is false")
        return self


class ResourcesConfig(_Strict):
    """What Ray reserves for each worker of a role."""

    num_cpus: float = Field(1.0, ge=0)
    num_gpus: float = Field(0.0, ge=0)
    memory_gib: Optional[float] = Field(None, gt=0)


class RoleConfig(_Strict):
    count: int = Field(1, ge=0)
    engine: EngineConfig = Field(default_factory=EngineConfig)
    resources: ResourcesConfig = Field(default_factory=ResourcesConfig)


class TransferConfig(_Strict):
    backend: Literal["nixl", "nccl", "auto"] = "auto"
    abort_timeout_s: int = Field(30, ge=1, description="stranded prefill KV blocks are freed after this")
    handshake_warmup: bool = True
    probe_at_start: bool = Field(True, description="NIXL-probe every prefill->decode link at start-up")
    probe_max_seconds: float = Field(8.0, gt=0, description="time budget of each pair's probe")


class SloConfig(_Strict):
    """TTFT targets by prompt length (the seeds' buckets by default) and one TPOT target."""

    ttft_buckets: list[tuple[Optional[int], float]] = Field(
        default_factory=lambda: [(4096, 0.2), (16384, 1.0), (None, 5.0)],
        description="[max prompt tokens or null, TTFT seconds], ascending, the last bound null")
    tpot_s: float = Field(0.1, gt=0)

    def table(self):
        from schedulers.slo import SloTable
        return SloTable(tuple((b, float(s)) for b, s in self.ttft_buckets), self.tpot_s)

    @model_validator(mode="after")
    def _valid_table(self) -> "SloConfig":
        """The buckets must ascend and end with one unbounded bucket."""
        self.table()
        return self


class SchedulerConfig(_Strict):
    policy: Literal["colocated", "disaggregated", "length_threshold", "adaptive"] = "length_threshold"
    params: dict[str, Any] = Field(default_factory=dict)
    slo: SloConfig = Field(default_factory=SloConfig)
    calibrate: bool = Field(True, description="fit the step-time model on the engines at start-up")
    speed_by_role: bool = Field(True, description="each kind of engine's predictions learn its own speed "
                                                  "over the host's (schedulers/feedback.py); false: one factor")

    @model_validator(mode="after")
    def _policy_params(self) -> "SchedulerConfig":
        """Parameters must be ones the policy takes (checked without building it)."""
        from schedulers.registry import accepted_params
        unknown = sorted(set(self.params) - set(accepted_params(self.policy)))
        if unknown:
            raise ValueError(f"scheduler.params: policy {self.policy!r} does not take {unknown}; "
                             f"it takes {accepted_params(self.policy)}")
        if self.policy == "adaptive" and not self.calibrate:
            raise ValueError("scheduler.calibrate: policy 'adaptive' needs the calibrated step-time model")
        return self


class RouterConfig(_Strict):
    num_cpus: float = Field(0.0, ge=0)
    request_timeout_s: float = Field(300.0, gt=0)


class DiagnosticsConfig(_Strict):
    # When set, every actor's event loop held this long writes every thread's Python stack
    # (faulthandler, pd_serve/loop_stalls.py). Off by default: the dump walks the other threads'
    # stacks without the GIL and once crashed a process beside Ray's and gRPC's threads.
    stack_dump_after_s: Optional[float] = Field(None, gt=0.05)


class DeploymentConfig(_Strict):
    name: str = "pd-serve"
    model: str = Field("default", description="'default' (the generated tiny Llama), an HF dir or name")
    tokenizer: Optional[str] = None
    device: Literal["cpu", "gpu", "auto"] = "auto"
    workers: dict[str, RoleConfig]
    transfer: TransferConfig = Field(default_factory=TransferConfig)
    scheduler: SchedulerConfig = Field(default_factory=SchedulerConfig)
    router: RouterConfig = Field(default_factory=RouterConfig)
    diagnostics: DiagnosticsConfig = Field(default_factory=DiagnosticsConfig)
    engine_start_timeout_s: Optional[float] = Field(
        None, gt=0, description="a worker whose engine has not started by then is restarted once; "
                                "None: 300 s on CPU, 1800 s on GPU (large models load for minutes)")

    @field_validator("workers")
    @classmethod
    def _known_roles(cls, workers: dict[str, RoleConfig]) -> dict[str, RoleConfig]:
        """Roles are prefill, decode and both; at least one worker must be able to decode."""
        unknown = sorted(set(workers) - set(ROLES))
        if unknown:
            raise ValueError(f"unknown role(s) {unknown}; allowed: {list(ROLES)}")
        if not any(workers.get(r) and workers[r].count > 0 for r in ("decode", "both")):
            raise ValueError("at least one worker of role 'decode' or 'both' is needed")
        return workers

    @property
    def resolved_device(self) -> str:
        return resolve_device(self.device)

    @property
    def resolved_engine_start_timeout_s(self) -> float:
        if self.engine_start_timeout_s is not None:
            return self.engine_start_timeout_s
        return 300.0 if self.resolved_device == "cpu" else 1800.0

    def role_counts(self) -> dict[str, int]:
        return {role: rc.count for role, rc in self.workers.items() if rc.count > 0}

    @model_validator(mode="after")
    def _device_rules(self) -> "DeploymentConfig":
        """CPU engines need block sizes of multiples of 32; 'nccl' cannot run (see
        transfer.connector_config.nccl_unavailable_reason)."""
        device = resolve_device(self.device)
        for role, rc in self.workers.items():
            if device == "cpu" and rc.engine.block_size % CPU_BLOCK_MULTIPLE:
                raise ValueError(
                    f"workers.{role}.engine.block_size: must be a multiple of {CPU_BLOCK_MULTIPLE} "
                    f"on CPU (vLLM's CPU attention backend), got {rc.engine.block_size}")
            if device == "cpu" and rc.resources.num_gpus:
                raise ValueError(f"workers.{role}.resources.num_gpus: must be 0 on device 'cpu'")
        if self.transfer.backend == "nccl":
            from transfer.connector_config import nccl_unavailable_reason
            raise ValueError("transfer.backend: " + nccl_unavailable_reason(device))
        return self


def resolve_device(device: str) -> str:
    """'auto' means gpu when torch sees CUDA, else cpu (checked without importing torch if told)."""
    if device != "auto":
        return device
    forced = os.environ.get("PD_SERVE_DEVICE")
    if forced in ("cpu", "gpu"):
        return forced
    try:
        import torch
        return "gpu" if torch.cuda.is_available() else "cpu"
    except Exception:  # torch missing or broken: nothing can run on a GPU here
        return "cpu"


def _format_error(err: ValidationError, source: str) -> str:
    lines = [f"invalid configuration {source}:"]
    for e in err.errors():
        path = ".".join(str(p) for p in e["loc"])
        msg = e["msg"].removeprefix("Value error, ")
        if e["type"] == "extra_forbidden":
            msg = "unknown key"
        elif e["type"] == "literal_error":
            msg = f"{msg}, got {e.get('input')!r}"
        lines.append(f"  {path}: {msg}" if path else f"  {msg}")
    return "\n".join(lines)


def config_from_dict(data: dict[str, Any], source: str = "<dict>") -> DeploymentConfig:
    if not isinstance(data, dict):
        raise ConfigError(f"invalid configuration {source}: the top level must be a mapping")
    try:
        return DeploymentConfig.model_validate(data)
    except ValidationError as err:
        raise ConfigError(_format_error(err, source)) from None


def load_config(path: str | os.PathLike) -> DeploymentConfig:
    """Read and validate a deployment YAML file."""
    p = Path(path)
    if not p.is_file():
        raise ConfigError(f"configuration file not found: {p}")
    try:
        data = yaml.safe_load(p.read_text())
    except yaml.YAMLError as err:
        raise ConfigError(f"invalid YAML in {p}: {err}") from None
    return config_from_dict(data or {}, source=str(p))


def as_config(config: "DeploymentConfig | dict | str | os.PathLike") -> DeploymentConfig:
    if isinstance(config, DeploymentConfig):
        return config
    if isinstance(config, dict):
        return config_from_dict(config)
    return load_config(config)

"""Simulation configs (`configs/sim_*.yaml`): YAML in, validated records out, clusters built.

Every key is checked; unknown keys are errors naming their path (`engine.max_num_batchd_tokens:
unknown key`). Schema (defaults in brackets):

    name: llama3-8b-h100-ib
    model: llama-3-8b                 # schedulers.model_spec table name or a config.json dir
    hardware: h100                    # a100 | h100 | h200 | cpu
    tensor_parallel_size: 1           # GPUs per engine
    gpu_memory_gib: null              # [the hardware's, see presets.GPU_MEMORY_GIB]
    gpu_memory_utilization: 0.9
    engine: {max_num_batched_tokens: 2048, max_num_seqs: 256, block_size: 16,
             enable_chunked_prefill: true, long_prefill_token_threshold: 0, watermark: 0.01,
             max_model_len: 32768, num_kv_blocks: null}   # null: sized from memory
    role_engine: {prefill: {max_num_batched_tokens: 8192}}   # per-role overrides of `engine`
    link: {preset: ib_ndr, alpha_s: null, bandwidth_bytes_per_s: null, shared: false}
    request_path: {colocated_s: 0, disaggregated_s: 0}   # time outside the engines, measured live
    host: {num_cores: 0, cpu_s_per_token: 0, step_excess_1_s: null, step_excess_2_s: null,
           step_excess_alone_s: null, stream_step_s: null, step_excess_batch: [], neighbour: null,
           load_stretch: [], load_stretch_beside: [], decode_beside_prefill: [],
           path_cores: 0}   # CPU hosts, measured live
    # host.neighbour: {overhead_s, s_per_linear_flop, s_per_attention_flop, s_per_kv_byte},
    # the step model calibrated with all engines probed at once
    policies:                         # compared runs: label -> policy on its own workers
      colocated: {workers: {both: 2}}
      disaggregated: {workers: {prefill: 1, decode: 1}}
      length_threshold: {workers: {prefill: 1, both: 1}, params: {threshold_tokens: 1024}}
      adaptive: {workers: {both: 2}}
      adaptive_p1b1: {policy: adaptive, workers: {prefill: 1, both: 1}}   # label != policy
      chunk_512: {policy: colocated, workers: {both: 1}, engine: {max_num_batched_tokens: 512}}
    workload: {name: sharegpt, params: {num_requests: 1000, seed: 0}}
    rates_per_s: [1, 2, 4, 8]
    slo: {ttft_buckets: [[4096, 0.2], [16384, 1.0], [null, 5.0]], tpot_slo_s: 0.1}

The adaptive policy gets the simulated engines' own step-time model, the config's SLOs and the
decode-capable engines' smallest token budget as its chunk size unless its params say otherwise
(as the live router builds it).
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Optional

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from bench.metrics import SloSpec
from bench.simulator.presets import (GPU_MEMORY_GIB, LINK_PRESETS, kv_blocks_from_memory,
                                     scaled_hardware)
from bench.simulator.host import LENGTH_EXCESS, STRETCH_STREAMS, HostSpec
from bench.simulator.specs import ClusterSpec, EngineSpec, LinkSpec, RequestPathSpec
from bench.workloads import WORKLOAD_NAMES, workload_params
from schedulers.hardware import HARDWARE_SPECS
from schedulers.model_spec import load_model_spec
from schedulers.registry import POLICY_NAMES, make_policy
from schedulers.step_time import COEFFICIENTS, StepTimeModel
from schedulers.types import ROLES, Policy


class SimConfigError(ValueError):
    """A simulation config that cannot be used; the message names the key."""


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class EngineConfig(_Strict):
    """`bench.simulator.specs.EngineSpec` fields; `num_kv_blocks` None sizes the pool from memory."""

    max_num_batched_tokens: int = Field(2048, ge=1)
    max_num_seqs: int = Field(256, ge=1)
    block_size: int = Field(16, ge=1)
    enable_chunked_prefill: bool = True
    long_prefill_token_threshold: int = Field(0, ge=0)
    watermark: float = Field(0.01, ge=0, lt=1)
    max_model_len: int = Field(32768, ge=1)
    num_kv_blocks: Optional[int] = Field(None, ge=1)

    @model_validator(mode="after")
    def _chunk_fits(self) -> EngineConfig:
        """Without chunked prefill, a whole prompt must fit one step's token budget."""
        if not self.enable_chunked_prefill and self.max_num_batched_tokens < self.max_model_len:
            raise ValueError(f"max_num_batched_tokens ({self.max_num_batched_tokens}) must be >= "
                             f"max_model_len ({self.max_model_len}) when enable_chunked_prefill is false")
        return self


class LinkConfig(_Strict):
    """A preset, optionally with its alpha or bandwidth overridden, or both numbers given."""

    preset: Optional[str] = None
    alpha_s: Optional[float] = Field(None, ge=0)
    bandwidth_bytes_per_s: Optional[float] = Field(None, gt=0)
    shared: bool = False

    @model_validator(mode="after")
    def _complete(self) -> LinkConfig:
        """A preset must exist; without one, alpha_s and bandwidth_bytes_per_s are both needed."""
        if self.preset is not None and self.preset not in LINK_PRESETS:
            raise ValueError(f"unknown link preset {self.preset!r}; known: {sorted(LINK_PRESETS)}")
        if self.preset is None and (self.alpha_s is None or self.bandwidth_bytes_per_s is None):
            raise ValueError("give a preset, or both alpha_s and bandwidth_bytes_per_s")
        return self

    def spec(self) -> LinkSpec:
        base = LINK_PRESETS[self.preset] if self.preset else None
        alpha_s, bandwidth = self.alpha_s, self.bandwidth_bytes_per_s
        if base is not None:
            alpha_s = base.alpha_s if alpha_s is None else alpha_s
            bandwidth = base.bandwidth_bytes_per_s if bandwidth is None else bandwidth
        return LinkSpec(alpha_s, bandwidth, self.preset or "custom")


class RequestPathConfig(_Strict):
    """`bench.simulator.specs.RequestPathSpec` (see there); `pd_serve.request_path` measures it."""

    colocated_s: float = Field(0.0, ge=0)
    disaggregated_s: float = Field(0.0, ge=0)

    def spec(self) -> RequestPathSpec:
        return RequestPathSpec(self.colocated_s, self.disaggregated_s)


class NeighbourStepConfig(_Strict):
    """The step model's coefficients calibrated with every engine of the host probed at once."""

    overhead_s: float = Field(ge=0)
    s_per_linear_flop: float = Field(ge=0)
    s_per_attention_flop: float
    s_per_kv_byte: float


class HostConfig(_Strict):
    """`bench.simulator.host.HostSpec` (see there); `bench.host_cpu` measures it. No cores: no
    host model."""

    num_cores: int = Field(0, ge=0)
    cpu_s_per_token: float = Field(0.0, ge=0)
    step_excess_1_s: float | None = None  # may be negative: see bench.simulator.host
    step_excess_2_s: float | None = None
    step_excess_alone_s: float | None = None
    stream_step_s: float | None = Field(None, ge=0)  # per stream beyond the first; None: e2 - e1
    step_excess_batch: list[tuple[int, float]] = Field(default_factory=list)  # (streams > 2, excess) points
    neighbour: Optional[NeighbourStepConfig] = None
    load_stretch: list[tuple[int, float]] = Field(default_factory=list)  # (streams, factor) points
    # the same for a prefill on a prefill-only engine, beside the streams of the others
    load_stretch_beside: list[tuple[int, float]] = Field(default_factory=list)
    # (streams, seconds) a streaming step loses while a prefill-only engine prefills
    decode_beside_prefill: list[tuple[int, float]] = Field(default_factory=list)
    # (streams, seconds) a streaming step loses while a request is handed over to its engine
    decode_beside_handover: list[tuple[int, float]] = Field(default_factory=list)
    path_cores: float = Field(0.0, ge=0)  # the cores a request on its request path keeps busy
    # the lone stream's excess with every other engine idle past the spin window / within it
    step_excess_quiet_s: float | None = None
    step_excess_spin_s: float | None = None
    # the lone stream's excess while every other engine at work is in a prefill step (host.py)
    step_excess_beside_prefill_s: float | None = None
    # when a prefill takes the load's factor: streams, prefill-only-busy or decode-neighbour (host.py)
    stretch_rule: str = STRETCH_STREAMS
    # under decode-neighbour: a prefill's factor beside another engine's prefill (host.py)
    stretch_beside_prefill: float = Field(1.0, gt=0)
    # (streams, excess) of decode steps in loops of the workload's mix, from one stream (host.py)
    step_excess_mix: list[tuple[int, float]] = Field(default_factory=list)
    # (streams, seconds) of the colocated route's request path, from none up (host.py)
    path_beside_streams: list[tuple[int, float]] = Field(default_factory=list)
    # (prompt tokens, factor) of a prefill beside streams by its prompt's length, on an engine
    # that streams / on a prefill-only engine, and the load probe's prompt length (host.py)
    length_stretch: list[tuple[int, float]] = Field(default_factory=list)
    length_stretch_beside: list[tuple[int, float]] = Field(default_factory=list)
    length_reference_tokens: int = Field(0, ge=0)
    # how the length points scale a stretched prefill: its excess over 1, or the factor (host.py)
    length_shape: str = LENGTH_EXCESS
    # (prompt tokens, the engine's time alone over its calibrated steps) from the same probe
    length_alone: list[tuple[int, float]] = Field(default_factory=list)
    length_alone_beside: list[tuple[int, float]] = Field(default_factory=list)
    # the load probe's factors one prompt at a time beside streams, sorted (on an engine that
    # streams / on a prefill-only engine), and the seed each prefill step's draw among them comes from
    load_stretch_draws: list[float] = Field(default_factory=list)
    load_stretch_beside_draws: list[float] = Field(default_factory=list)
    draw_seed: int = 0
    # engine stalls as rare events (bench.engine_stalls): a prefill step's chance of one, and the
    # seconds one adds, sorted (drawn uniformly)
    stall_per_prefill_step: float = Field(0.0, ge=0, lt=1)
    stall_excess_s: list[float] = Field(default_factory=list)
    stall_seed: int = 0
    # how a step's time scatters around its modelled time: the probe steps' time over their
    # group's median, sorted, for steps with a prompt's chunk / decode-only (bench.step_scatter),
    # and the seed of each step's draw among them
    step_scatter_prefill: list[float] = Field(default_factory=list)
    step_scatter_decode: list[float] = Field(default_factory=list)
    scatter_seed: int = 0

    def spec(self) -> HostSpec:
        keys = ("load_stretch", "load_stretch_beside", "step_excess_batch", "decode_beside_prefill",
                "decode_beside_handover", "step_excess_mix", "path_beside_streams", "length_stretch",
                "length_stretch_beside", "length_alone", "length_alone_beside")
        draws = ("load_stretch_draws", "load_stretch_beside_draws", "stall_excess_s", "step_scatter_prefill",
                 "step_scatter_decode")
        values = self.model_dump(exclude={"neighbour", *keys, *draws})
        for key in keys:
            values[key] = tuple((int(n), float(f)) for n, f in getattr(self, key))
        for key in draws:
            values[key] = tuple(float(f) for f in getattr(self, key))
        if self.neighbour is not None:
            values["neighbour_coefficients"] = tuple(getattr(self.neighbour, k) for k in COEFFICIENTS)
        return HostSpec(**values)

    @model_validator(mode="after")
    def _valid(self) -> HostConfig:
        """What HostSpec refuses (load_stretch counts not increasing, factors not positive)."""
        self.spec()
        return self


class PolicyRunConfig(_Strict):
    """One compared configuration: a registry policy (default: the entry's key) on its workers."""

    workers: dict[str, int]
    params: dict[str, Any] = Field(default_factory=dict)
    policy: Optional[str] = None
    engine: dict[str, Any] = Field(default_factory=dict, description="overrides for this entry's engines")
    speed_by_role: bool = Field(True, description="the router learns each kind of engine's speed (the live "
                                                  "scheduler.speed_by_role); false: one factor")

    @field_validator("engine")
    @classmethod
    def _engine_keys(cls, engine: dict[str, Any]) -> dict[str, Any]:
        bad = sorted(set(engine) - set(EngineConfig.model_fields))
        if bad:
            raise ValueError(f"unknown engine key(s) {bad}; allowed: {sorted(EngineConfig.model_fields)}")
        return engine

    @field_validator("workers")
    @classmethod
    def _roles(cls, workers: dict[str, int]) -> dict[str, int]:
        """Roles are prefill, decode, both; counts >= 0; at least one decode-capable worker."""
        unknown = sorted(set(workers) - set(ROLES))
        if unknown:
            raise ValueError(f"unknown role(s) {unknown}; allowed: {list(ROLES)}")
        if any(not isinstance(n, int) or n < 0 for n in workers.values()):
            raise ValueError(f"worker counts must be integers >= 0, got {workers}")
        if not workers.get("decode", 0) + workers.get("both", 0):
            raise ValueError("at least one worker of role 'decode' or 'both' is needed")
        return workers


class WorkloadConfig(_Strict):
    name: str = "sharegpt"
    params: dict[str, Any] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _known(self) -> WorkloadConfig:
        """The workload exists and takes these params (the rate comes from `rates_per_s`)."""
        if self.name not in WORKLOAD_NAMES:
            raise ValueError(f"unknown workload {self.name!r}; allowed: {', '.join(WORKLOAD_NAMES)}")
        unknown = sorted(set(self.params) - set(workload_params(self.name)))
        if unknown:
            raise ValueError(f"workload {self.name!r} does not take {unknown}; it takes "
                             f"{workload_params(self.name)}")
        return self


class SloConfig(_Strict):
    ttft_buckets: list[tuple[Optional[int], float]] = Field(
        default_factory=lambda: [(4096, 0.2), (16384, 1.0), (None, 5.0)])
    tpot_slo_s: float = Field(0.1, gt=0)

    def spec(self) -> SloSpec:
        return SloSpec(tuple(self.ttft_buckets), self.tpot_slo_s)

    @model_validator(mode="after")
    def _valid(self) -> SloConfig:
        """Buckets ascend and end with one [null, seconds]; seconds are positive."""
        self.spec()
        return self


class SimConfig(_Strict):
    name: str = "sim"
    model: str = "llama-3-8b"
    hardware: str = "h100"
    tensor_parallel_size: int = Field(1, ge=1)
    gpu_memory_gib: Optional[float] = Field(None, gt=0)
    gpu_memory_utilization: float = Field(0.9, gt=0, le=1)
    engine: EngineConfig = Field(default_factory=EngineConfig)
    role_engine: dict[str, dict[str, Any]] = Field(default_factory=dict)
    link: LinkConfig = Field(default_factory=lambda: LinkConfig(preset="ib_ndr"))
    request_path: RequestPathConfig = Field(default_factory=RequestPathConfig)
    host: HostConfig = Field(default_factory=HostConfig)
    policies: dict[str, PolicyRunConfig]
    workload: WorkloadConfig = Field(default_factory=WorkloadConfig)
    rates_per_s: list[float] = Field(default_factory=lambda: [1.0, 2.0, 4.0, 8.0])
    slo: SloConfig = Field(default_factory=SloConfig)

    @field_validator("model")
    @classmethod
    def _model_known(cls, model: str) -> str:
        """A schedulers.model_spec table name or a directory with config.json."""
        load_model_spec(model)
        return model

    @field_validator("hardware")
    @classmethod
    def _hardware_known(cls, hardware: str) -> str:
        if hardware not in HARDWARE_SPECS:
            raise ValueError(f"unknown hardware {hardware!r}; known: {sorted(HARDWARE_SPECS)}")
        return hardware

    @field_validator("policies")
    @classmethod
    def _policies_known(cls, policies: dict[str, PolicyRunConfig]) -> dict[str, PolicyRunConfig]:
        """Each entry's policy (its `policy`, else its key) is a registry name."""
        if not policies:
            raise ValueError(f"name at least one of {list(POLICY_NAMES)}")
        for label, run in policies.items():
            name = run.policy or label
            if name not in POLICY_NAMES:
                raise ValueError(f"{label}: unknown policy {name!r}; allowed: {', '.join(POLICY_NAMES)} "
                                 f"(set `policy:` to use another label)")
        return policies

    @field_validator("rates_per_s")
    @classmethod
    def _rates_positive(cls, rates: list[float]) -> list[float]:
        if not rates or any(not r > 0 for r in rates):
            raise ValueError(f"rates_per_s must be a non-empty list of numbers > 0, got {rates}")
        return rates

    @field_validator("role_engine")
    @classmethod
    def _role_engine_keys(cls, role_engine: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
        unknown = sorted(set(role_engine) - set(ROLES))
        if unknown:
            raise ValueError(f"unknown role(s) {unknown}; allowed: {list(ROLES)}")
        for role, overrides in role_engine.items():
            bad = sorted(set(overrides) - set(EngineConfig.model_fields))
            if bad:
                raise ValueError(f"{role}: unknown engine key(s) {bad}; "
                                 f"allowed: {sorted(EngineConfig.model_fields)}")
        return role_engine

    @model_validator(mode="after")
    def _buildable(self) -> SimConfig:
        """Every policy's cluster and policy object can be built (memory, block sizes, params)."""
        for name in self.policies:
            try:
                cluster = build_cluster(self, name)
                build_policy(self, name, cluster)
            except (ValueError, TypeError) as error:
                raise ValueError(f"policies.{name}: {error}") from None
        return self

    # ---- derived ------------------------------------------------------------------------------

    @property
    def slo_spec(self) -> SloSpec:
        return self.slo.spec()

    def step_model(self, block_size: int) -> StepTimeModel:
        """Roofline step times of the model on one engine's hardware (all its GPUs)."""
        hw = scaled_hardware(self.hardware, self.tensor_parallel_size)
        return StepTimeModel.from_roofline(load_model_spec(self.model), hw, block_size)

    def engine_spec(self, role: str, overrides: dict[str, Any] | None = None) -> EngineSpec:
        """`engine`, then `role_engine[role]`, then `overrides` (a policy entry's `engine`)."""
        merged = {**self.engine.model_dump(), **self.role_engine.get(role, {}), **(overrides or {})}
        engine = EngineConfig.model_validate(merged)  # re-check the merged values
        values = engine.model_dump()
        if values["num_kv_blocks"] is None:
            spec = load_model_spec(self.model)
            memory_gib = self.gpu_memory_gib or GPU_MEMORY_GIB[self.hardware]
            values["num_kv_blocks"] = kv_blocks_from_memory(
                spec, spec.kv_geometry(engine.block_size), memory_gib, self.tensor_parallel_size,
                self.gpu_memory_utilization)
        return EngineSpec(**values)


def build_cluster(config: SimConfig, label: str, step_model: StepTimeModel | None = None) -> ClusterSpec:
    """The workers `config.policies[label]` runs on, with their engines and link.

    `step_model`: the engines' step times (e.g. a model calibrated on a live engine) instead of
    the roofline of `config.model` on `config.hardware`."""
    run = config.policies[label]
    engines = {role: config.engine_spec(role, run.engine) for role in run.workers}
    block_sizes = {e.block_size for e in engines.values()}
    if len(block_sizes) != 1:
        raise ValueError(f"all roles must share one block_size, got {sorted(block_sizes)}")
    step_model = step_model or config.step_model(block_sizes.pop())
    roles = {role: n for role, n in run.workers.items() if n}
    return ClusterSpec.from_roles(step_model, roles, config.engine_spec("both", run.engine),
                                  config.link.spec(), role_engines=engines, shared_link=config.link.shared,
                                  request_path=config.request_path.spec(), host=config.host.spec())


def build_policy(config: SimConfig, label: str, cluster: ClusterSpec) -> Policy:
    """The real scheduler policy of entry `label`; adaptive gets the cluster's own cost model,
    the config's SLOs and the engine's token budget unless its params say otherwise."""
    run = config.policies[label]
    policy_name = run.policy or label
    params = dict(run.params)
    if policy_name == "adaptive" and not {"step_model", "model", "hardware"} & set(params):
        params["step_model"] = cluster.step_model
        params.setdefault("slo_table", config.slo_spec.as_table())
        params.setdefault("chunk_tokens", cluster.chunk_tokens)
    return make_policy(policy_name, **params)


# ---- loading -------------------------------------------------------------------------------

def _format_error(err: ValidationError, source: str) -> str:
    lines = [f"invalid simulation config {source}:"]
    for e in err.errors():
        path = ".".join(str(p) for p in e["loc"])
        msg = e["msg"].removeprefix("Value error, ")
        if e["type"] == "extra_forbidden":
            msg = "unknown key"
        lines.append(f"  {path}: {msg}" if path else f"  {msg}")
    return "\n".join(lines)


def sim_config_from_dict(data: Any, source: str = "<dict>") -> SimConfig:
    if not isinstance(data, dict):
        raise SimConfigError(f"invalid simulation config {source}: the top level must be a mapping")
    try:
        return SimConfig.model_validate(data)
    except ValidationError as err:
        raise SimConfigError(_format_error(err, source)) from None


def read_sim_config_dict(path: str | os.PathLike) -> dict[str, Any]:
    """The raw YAML mapping of a config file (to apply overrides before validating)."""
    p = Path(path)
    if not p.is_file():
        raise SimConfigError(f"simulation config not found: {p}")
    try:
        data = yaml.safe_load(p.read_text())
    except yaml.YAMLError as err:
        raise SimConfigError(f"invalid YAML in {p}: {err}") from None
    return data if data is not None else {}


def load_sim_config(path: str | os.PathLike, overrides: dict[str, Any] | None = None) -> SimConfig:
    """Read, override (top-level keys, e.g. {"hardware": "h200", "link": {"preset": "eth_25g"}}),
    and validate a simulation config."""
    data = read_sim_config_dict(path)
    if isinstance(data, dict):
        data = {**data, **(overrides or {})}
    return sim_config_from_dict(data, source=str(path))

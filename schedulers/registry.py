"""Build a policy by name: `make_policy("length_threshold", threshold_tokens=2048)`.

| name               | parameters (defaults)                                                        |
|--------------------|------------------------------------------------------------------------------|
| colocated          | none                                                                         |
| disaggregated      | none                                                                         |
| length_threshold   | threshold_tokens (1024), max_prefill_queue (4), max_prefill_queue_tokens (None) |
| adaptive           | step_model, or model (table name or config dir) + hardware (a100/h100/h200/cpu) |
|                    | [+ block_size (16)]; slo_table, chunk_tokens (2048), decode_context_tokens    |
|                    | (1024), default_link (None), violation_tolerance (0.1), lost_ttft_ratio (2), |
|                    | meeting_order ("ttft" or "load"), credit_queue_head (True),                  |
|                    | wait_running_step (False), both_meet ("engine" or "decoder")                 |
"""
from __future__ import annotations

import inspect
from typing import Any, Callable

from schedulers.hardware import get_hardware
from schedulers.model_spec import load_model_spec
from schedulers.policies import (AdaptivePolicy, ColocatedPolicy, DisaggregatedPolicy,
                                 LengthThresholdPolicy)
from schedulers.step_time import StepTimeModel
from schedulers.types import Policy


def _adaptive(model: str | None = None, hardware: str | None = None, block_size: int = 16,
              **params: Any) -> AdaptivePolicy:
    """An AdaptivePolicy from a `step_model`, or from roofline defaults of `model` on `hardware`."""
    if "step_model" not in params:
        if model is None or hardware is None:
            raise ValueError("policy 'adaptive' needs step_model=StepTimeModel(...), or model= "
                             "(table name or config dir) and hardware= (a100, h100, h200, cpu)")
        params["step_model"] = StepTimeModel.from_roofline(load_model_spec(model), get_hardware(hardware),
                                                           block_size)
    elif model is not None or hardware is not None:
        raise ValueError("policy 'adaptive': give step_model or model+hardware, not both")
    return AdaptivePolicy(**params)


_FACTORIES: dict[str, Callable[..., Policy]] = {
    "adaptive": _adaptive,
    "colocated": ColocatedPolicy,
    "disaggregated": DisaggregatedPolicy,
    "length_threshold": LengthThresholdPolicy,
}

POLICY_NAMES: tuple[str, ...] = tuple(sorted(_FACTORIES))


def accepted_params(name: str) -> list[str]:
    """Parameter names `make_policy(name, ...)` accepts."""
    names = set(inspect.signature(_FACTORIES[name]).parameters) - {"name", "params"}
    if name == "adaptive":
        names |= set(inspect.signature(AdaptivePolicy).parameters) - {"name"}
    return sorted(names)


def make_policy(name: str, **params: Any) -> Policy:
    """The policy called `name`, built with `params`; ValueError for unknown names or parameters."""
    if name not in _FACTORIES:
        raise ValueError(f"unknown policy {name!r}; allowed: {', '.join(POLICY_NAMES)}")
    unknown = sorted(set(params) - set(accepted_params(name)))
    if unknown:
        raise ValueError(f"policy {name!r} does not take {unknown}; it takes {accepted_params(name)}")
    return _FACTORIES[name](**params)

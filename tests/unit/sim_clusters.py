"""The simulated cluster the host-model tests run on: Llama-3-8B on A100 roofline step times,
engines with room for every prompt, NVLink, and the host model under test."""
from __future__ import annotations

from dataclasses import replace

from bench.simulator import ClusterSpec, EngineSpec, get_link
from bench.simulator.host import HostSpec
from schedulers.hardware import HARDWARE_SPECS
from schedulers.model_spec import MODEL_SPECS
from schedulers.step_time import StepTimeModel

MODEL = StepTimeModel.from_roofline(MODEL_SPECS["llama-3-8b"], HARDWARE_SPECS["a100"], 16)


def cluster(roles: dict[str, int], host: HostSpec) -> ClusterSpec:
    spec = ClusterSpec.from_roles(MODEL, roles, EngineSpec(num_kv_blocks=20000, max_model_len=8192,
                                                           max_num_batched_tokens=8192),
                                  get_link("nvlink"))
    return replace(spec, host=host)

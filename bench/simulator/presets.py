"""Named links and GPU sizes for simulated deployments, and what follows from them.

Links (per direction; `alpha_s` is the fixed cost of one KV transfer: descriptor setup and the
completion notification, an assumption until a probe measures it):

| preset  | bandwidth              | alpha   | what                                         |
|---------|------------------------|---------|----------------------------------------------|
| nvlink3 | 300 GB/s               | 0.1 ms  | A100 NVLink 3 (600 GB/s both directions)     |
| nvlink4 | 450 GB/s               | 0.1 ms  | H100/H200 NVLink 4 (900 GB/s both directions) |
| nvlink  | = nvlink4              |         |                                              |
| ib_ndr  | 50 GB/s (400 Gb/s)     | 0.3 ms  | InfiniBand NDR, one port per GPU, RDMA        |
| eth_25g | 3.125 GB/s (25 Gb/s)   | 1 ms    | 25 Gb/s Ethernet, TCP                        |

Tensor parallelism is modelled as one faster engine: t GPUs give t x the FLOP/s, bandwidth and
memory of one (optimistic: all-reduce time is ignored).
"""
from __future__ import annotations

from dataclasses import replace

from bench.simulator.specs import LinkSpec
from schedulers.hardware import HardwareSpec, get_hardware
from schedulers.model_spec import ModelSpec
from transfer.kv_geometry import KVGeometry

LINK_PRESETS: dict[str, LinkSpec] = {
    "nvlink3": LinkSpec(1e-4, 300e9, "nvlink3"),
    "nvlink4": LinkSpec(1e-4, 450e9, "nvlink4"),
    "nvlink": LinkSpec(1e-4, 450e9, "nvlink"),
    "ib_ndr": LinkSpec(3e-4, 50e9, "ib_ndr"),
    "eth_25g": LinkSpec(1e-3, 25e9 / 8, "eth_25g"),
}

# HBM per GPU in GiB (what the driver reports, rounded).
GPU_MEMORY_GIB: dict[str, float] = {"a100": 80.0, "h100": 80.0, "h200": 140.0, "cpu": 64.0}

GIB = 1 << 30


def get_link(name: str) -> LinkSpec:
    if name not in LINK_PRESETS:
        raise ValueError(f"unknown link preset {name!r}; known: {sorted(LINK_PRESETS)}")
    return LINK_PRESETS[name]


def scaled_hardware(name: str, tensor_parallel_size: int = 1) -> HardwareSpec:
    """The hardware of one engine spanning `tensor_parallel_size` GPUs of kind `name`."""
    if tensor_parallel_size < 1:
        raise ValueError(f"tensor_parallel_size must be >= 1, got {tensor_parallel_size}")
    hw = get_hardware(name)
    if tensor_parallel_size == 1:
        return hw
    return replace(hw, name=f"{hw.name}x{tensor_parallel_size}",
                   peak_flops=hw.peak_flops * tensor_parallel_size,
                   mem_bw_bytes_per_s=hw.mem_bw_bytes_per_s * tensor_parallel_size)


def kv_blocks_from_memory(spec: ModelSpec, kv: KVGeometry, gpu_memory_gib: float,
                          tensor_parallel_size: int = 1, gpu_memory_utilization: float = 0.9) -> int:
    """Blocks left for KV after the weights, as vLLM sizes its pool: memory x utilization - weights."""
    if not 0 < gpu_memory_utilization <= 1:
        raise ValueError(f"gpu_memory_utilization must be in (0, 1], got {gpu_memory_utilization}")
    usable_bytes = gpu_memory_gib * GIB * tensor_parallel_size * gpu_memory_utilization
    kv_bytes = usable_bytes - spec.num_params * spec.dtype_bytes
    if kv_bytes < kv.bytes_per_block:
        raise ValueError(f"{spec.name}: weights ({spec.num_params * spec.dtype_bytes / GIB:.1f} GiB) leave "
                         f"no room for KV in {tensor_parallel_size} x {gpu_memory_gib} GiB at utilization "
                         f"{gpu_memory_utilization}; raise tensor_parallel_size")
    return int(kv_bytes // kv.bytes_per_block)

"""Accelerator numbers for roofline estimates: peak FLOP/s, memory bandwidth, efficiencies.

The efficiencies say what fraction of a roof an engine reaches: `prefill_efficiency` of the peak
FLOP/s in compute-bound prefill, `decode_efficiency` of the bandwidth in memory-bound decode.
A100's prefill efficiency is the one factor fitted to the seed's measured Llama-3-8B TTFT table
(causal FLOPs, see `tests/unit/test_sched_ttft_fit.py`); the other entries reuse it until they
are measured. Decode efficiencies are assumptions until calibrated.
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class HardwareSpec:
    """One accelerator: `peak_flops` in FLOP/s, `mem_bw_bytes_per_s` in bytes/s, efficiencies 0..1."""

    name: str
    peak_flops: float
    mem_bw_bytes_per_s: float
    prefill_efficiency: float = 1.0
    decode_efficiency: float = 1.0

    def __post_init__(self) -> None:
        if self.peak_flops <= 0 or self.mem_bw_bytes_per_s <= 0:
            raise ValueError(f"{self.name}: peak_flops and mem_bw_bytes_per_s must be positive")
        for field_name in ("prefill_efficiency", "decode_efficiency"):
            value = getattr(self, field_name)
            if not 0 < value <= 1:
                raise ValueError(f"{self.name}: {field_name} must be in (0, 1], got {value}")

    @property
    def achieved_prefill_flops(self) -> float:
        """FLOP/s a compute-bound prefill reaches: peak x prefill efficiency."""
        return self.peak_flops * self.prefill_efficiency

    @property
    def achieved_decode_bytes_per_s(self) -> float:
        """Bytes/s a memory-bound decode step streams: bandwidth x decode efficiency."""
        return self.mem_bw_bytes_per_s * self.decode_efficiency

    @classmethod
    def calibrated(cls, name: str, achieved_flops: float, achieved_bytes_per_s: float) -> HardwareSpec:
        """From throughputs measured on the real engine (FLOP/s and bytes/s): efficiencies are 1."""
        return cls(name, achieved_flops, achieved_bytes_per_s, 1.0, 1.0)


# One factor fitted to the seed's Llama-3-8B A100 TTFT table with causal FLOPs (0.609 -> 0.61).
SEED_FITTED_PREFILL_EFFICIENCY = 0.61
# An assumption for memory-bound decode until calibrated.
DEFAULT_DECODE_EFFICIENCY = 0.8

HARDWARE_SPECS: dict[str, HardwareSpec] = {
    # A100 SXM4: 312 TFLOP/s dense FP16/BF16, 2.04 TB/s HBM2e (the seed's numbers).
    "a100": HardwareSpec("a100", 312e12, 2.04e12, SEED_FITTED_PREFILL_EFFICIENCY, DEFAULT_DECODE_EFFICIENCY),
    # H100 SXM5 as the seed quotes it: 495 TFLOP/s (NVIDIA's dense TF32 figure; dense FP16/BF16
    # is 989) and 3.35 TB/s HBM3. Kept at the seed's value so its roofline threshold 148 holds.
    "h100": HardwareSpec("h100", 495e12, 3.35e12, SEED_FITTED_PREFILL_EFFICIENCY, DEFAULT_DECODE_EFFICIENCY),
    # H200 SXM: 989 TFLOP/s dense BF16 (same die as H100 SXM), 4.8 TB/s HBM3e.
    "h200": HardwareSpec("h200", 989e12, 4.8e12, SEED_FITTED_PREFILL_EFFICIENCY, DEFAULT_DECODE_EFFICIENCY),
    # Placeholder for a few host cores; replace with HardwareSpec.calibrated(...) from measurements.
    "cpu": HardwareSpec("cpu", 2e11, 2e10, 0.5, 0.5),
}


def get_hardware(name: str) -> HardwareSpec:
    """A table entry by name, or ValueError naming the known ones."""
    if name not in HARDWARE_SPECS:
        raise ValueError(f"unknown hardware {name!r}; known: {sorted(HARDWARE_SPECS)}")
    return HARDWARE_SPECS[name]

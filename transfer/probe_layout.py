"""How a probe buffer is cut into NIXL descriptors the way vLLM's NixlConnector cuts the KV cache.

vLLM 0.32's NixlConnector registers one region per layer cache tensor and, inside each region,
one descriptor per block (`_build_fa_local` / `_build_fa_remote`); a READ of N blocks lists the
descriptor ids `region * num_blocks + block` for every region, region-major
(`_compute_desc_ids`). Its attention backends (CPU_ATTN and FLASH_ATTN alike) store a layer as
`[num_blocks, num_kv_heads, block_size, 2 * head_size]`: K and V share one page, so a descriptor
is `bytes_per_block / num_layers` long and a transfer of N blocks over L layers is N * L
descriptors. Older layouts (`[2, num_blocks, ...]`) split K and V into two regions per layer:
`regions_per_layer=2` models those (N * 2L descriptors of half the size).

Pure Python and numpy-free, like `kv_geometry`.
"""
from __future__ import annotations

import logging
import random
from dataclasses import asdict, dataclass
from typing import Any, Mapping

from transfer.kv_geometry import KVGeometry

logger = logging.getLogger(__name__)

DEFAULT_MAX_BUFFER_BYTES = 1 << 30  # per endpoint; larger requests are extrapolated by the fit


@dataclass(frozen=True)
class BlockLayout:
    """A buffer of `num_regions` regions, each `num_blocks` descriptors of `desc_bytes`."""

    num_layers: int
    regions_per_layer: int
    num_blocks: int
    desc_bytes: int

    def __post_init__(self) -> None:
        for name in ("num_layers", "regions_per_layer", "num_blocks", "desc_bytes"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")

    @property
    def num_regions(self) -> int:
        return self.num_layers * self.regions_per_layer

    @property
    def bytes_per_block(self) -> int:
        """All regions' share of one block: what one KV block of the model weighs."""
        return self.num_regions * self.desc_bytes

    @property
    def region_bytes(self) -> int:
        return self.num_blocks * self.desc_bytes

    @property
    def total_bytes(self) -> int:
        return self.num_regions * self.region_bytes

    def num_descs(self, num_blocks: int) -> int:
        return num_blocks * self.num_regions

    def desc_offset_bytes(self, region: int, block: int) -> int:
        return (region * self.num_blocks + block) * self.desc_bytes

    def desc_ids(self, block_ids: list[int]) -> list[int]:
        """Descriptor ids of `block_ids` in every region, region-major (as vLLM orders them)."""
        return [r * self.num_blocks + b for r in range(self.num_regions) for b in block_ids]

    def to_dict(self) -> dict[str, int]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "BlockLayout":
        return cls(int(data["num_layers"]), int(data["regions_per_layer"]),
                   int(data["num_blocks"]), int(data["desc_bytes"]))

    @classmethod
    def from_geometry(cls, geometry: KVGeometry, max_num_tokens: int, regions_per_layer: int = 1,
                      max_buffer_bytes: int = DEFAULT_MAX_BUFFER_BYTES) -> "BlockLayout":
        """Room for the largest KV one request can have (`max_num_tokens`), capped in bytes."""
        num_regions = geometry.num_layers * regions_per_layer
        if geometry.bytes_per_block % num_regions:
            raise ValueError(f"bytes_per_block {geometry.bytes_per_block} does not split into "
                             f"{num_regions} regions")
        wanted_blocks = geometry.num_blocks(max_num_tokens)
        num_blocks = max(1, min(wanted_blocks, max_buffer_bytes // geometry.bytes_per_block))
        if num_blocks < wanted_blocks:
            logger.warning("probe buffer capped at %d of %d blocks (%d bytes); larger transfers "
                           "are extrapolated", num_blocks, wanted_blocks, max_buffer_bytes)
        return cls(geometry.num_layers, regions_per_layer, num_blocks,
                   geometry.bytes_per_block // num_regions)

    @classmethod
    def for_bytes(cls, max_transfer_bytes: int, num_layers: int = 32,
                  block_bytes: int = 32 * 16 * 1024) -> "BlockLayout":
        """A synthetic layout whose full buffer is about `max_transfer_bytes` (benchmarks)."""
        desc_bytes = block_bytes // num_layers
        num_blocks = max(1, max_transfer_bytes // block_bytes)
        return cls(num_layers, 1, num_blocks, desc_bytes)


def plan_sweep_blocks(max_blocks: int, min_blocks: int = 1) -> list[int]:
    """Block counts from `min_blocks` doubling up to `max_blocks`, which is always included."""
    if max_blocks < min_blocks or min_blocks < 1:
        raise ValueError(f"need 1 <= min_blocks <= max_blocks, got {min_blocks}, {max_blocks}")
    sizes = []
    n = min_blocks
    while n < max_blocks:
        sizes.append(n)
        n *= 2
    sizes.append(max_blocks)
    return sizes


BLOCK_ORDERS = ("scattered", "contiguous")


def pick_block_ids(num_blocks: int, capacity_blocks: int, order: str, seed: int) -> list[int]:
    """Which blocks a transfer of `num_blocks` touches.

    "contiguous" (a fresh cache) lets NIXL merge neighbouring descriptors into one;
    "scattered" (a cache that has churned) keeps one descriptor per block per region, the
    costlier case and the one a long-running server sees.
    """
    if not 1 <= num_blocks <= capacity_blocks:
        raise ValueError(f"need 1 <= num_blocks <= {capacity_blocks}, got {num_blocks}")
    if order == "contiguous":
        return list(range(num_blocks))
    if order == "scattered":
        return random.Random(seed).sample(range(capacity_blocks), num_blocks)
    raise ValueError(f"unknown block order {order!r}; known: {BLOCK_ORDERS}")

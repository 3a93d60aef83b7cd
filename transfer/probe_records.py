"""Typed records a link probe passes between processes and writes out, with a version.

Version history:
  1: first version.
"""
from __future__ import annotations

import math
import statistics
from dataclasses import asdict, dataclass, field
from typing import Any, Iterable, Mapping

from transfer.link_model import LinkFit
from transfer.probe_layout import BlockLayout

PROBE_RECORD_VERSION = 1


@dataclass(frozen=True)
class EndpointInfo:
    """What a reader needs to pull from an endpoint: NIXL metadata, where its blocks lie.

    `agent_metadata` is the opaque blob from `nixl_agent.get_agent_metadata()`; the blocks are
    at `base_addr + layout.desc_offset_bytes(region, block)` in `mem_type` memory on `device_id`.
    Blocks hold the pattern of `pattern_seed` (see `probe_buffer.pattern_table`).
    """

    agent_name: str
    agent_metadata: bytes
    mem_type: str  # "DRAM" | "VRAM"
    device_id: int
    base_addr: int
    layout: BlockLayout
    pattern_seed: int
    hostname: str
    pid: int
    version: int = PROBE_RECORD_VERSION


@dataclass(frozen=True)
class ReadSample:
    """One timed READ.

    `seconds` is wall time from building the request to seeing it DONE, as a reader's connector
    would experience it. `nixl_xfer_s` is NIXL's own telemetry of the same transfer (None where
    telemetry is off). `num_descs_posted` is NIXL's count after merging neighbouring descriptors.
    `post_s` is the part spent inside `transfer()` itself, which holds the calling thread: on
    host memory UCX's cma transport copies right there, so a READ stalls the reader's thread
    (a decode engine's step loop, in vLLM) for most of `seconds`.
    """

    num_blocks: int
    num_bytes: int
    num_descs: int
    seconds: float
    nixl_xfer_s: float | None = None
    num_descs_posted: int | None = None
    post_s: float | None = None


def _percentile(sorted_values: list[float], q: float) -> float:
    """Linear-interpolated percentile of an ascending list (numpy's default method)."""
    if len(sorted_values) == 1:
        return sorted_values[0]
    pos = q * (len(sorted_values) - 1)
    lo = math.floor(pos)
    hi = min(lo + 1, len(sorted_values) - 1)
    return sorted_values[lo] + (sorted_values[hi] - sorted_values[lo]) * (pos - lo)


@dataclass(frozen=True)
class SizeStats:
    """Summary of the repetitions at one transfer size."""

    num_bytes: int
    num_reps: int
    median_s: float
    p90_s: float
    num_blocks: int = 0
    num_descs: int = 0
    median_post_s: float | None = None  # READs only: median time blocked inside transfer()

    @property
    def gb_per_s(self) -> float:
        return self.num_bytes / self.median_s / 1e9 if self.median_s > 0 else float("inf")

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "gb_per_s": self.gb_per_s}

    @classmethod
    def from_seconds(cls, num_bytes: int, seconds: Iterable[float], num_blocks: int = 0,
                     num_descs: int = 0, post_seconds: Iterable[float] = ()) -> "SizeStats":
        ordered = sorted(seconds)
        posts = list(post_seconds)
        return cls(num_bytes, len(ordered), statistics.median(ordered), _percentile(ordered, 0.9),
                   num_blocks, num_descs, statistics.median(posts) if posts else None)


def summarize_reads(samples: list[ReadSample]) -> list[SizeStats]:
    by_size: dict[int, list[ReadSample]] = {}
    for s in samples:
        by_size.setdefault(s.num_bytes, []).append(s)
    return [SizeStats.from_seconds(b, [s.seconds for s in ss], ss[0].num_blocks, ss[0].num_descs,
                                   [s.post_s for s in ss if s.post_s is not None])
            for b, ss in sorted(by_size.items())]


def summarize_copies(samples: list[tuple[int, float]]) -> list[SizeStats]:
    by_size: dict[int, list[float]] = {}
    for num_bytes, seconds in samples:
        by_size.setdefault(num_bytes, []).append(seconds)
    return [SizeStats.from_seconds(b, ts) for b, ts in sorted(by_size.items())]


@dataclass(frozen=True)
class PairProbeResult:
    """The probe of one prefill -> decode link: the decode side READs from the prefill side."""

    prefill_id: str
    decode_id: str
    mem_type: str
    layout: BlockLayout
    block_order: str
    fit: LinkFit
    sizes: list[SizeStats]
    samples: list[ReadSample]
    memcpy_sizes: list[SizeStats]
    is_verified: bool
    wall_s: float
    notes: list[str] = field(default_factory=list)
    version: int = PROBE_RECORD_VERSION

    @property
    def memcpy_bytes_per_s(self) -> float:
        """Copy bandwidth at the largest size copied: the same-memory ceiling."""
        if not self.memcpy_sizes:
            return float("nan")
        largest = self.memcpy_sizes[-1]
        return largest.num_bytes / largest.median_s

    def to_dict(self) -> dict[str, Any]:
        return {
            "version": self.version,
            "prefill_id": self.prefill_id,
            "decode_id": self.decode_id,
            "alpha_s": self.fit.alpha_s,
            "beta_bytes_per_s": self.fit.beta_bytes_per_s,
            "memcpy_bytes_per_s": self.memcpy_bytes_per_s,
            "samples": [[s.num_bytes, s.seconds] for s in self.samples],
            "fit": self.fit.to_dict(),
            "sizes": [s.to_dict() for s in self.sizes],
            "memcpy_sizes": [s.to_dict() for s in self.memcpy_sizes],
            "mem_type": self.mem_type,
            "layout": self.layout.to_dict(),
            "block_order": self.block_order,
            "is_verified": self.is_verified,
            "wall_s": self.wall_s,
            "notes": list(self.notes),
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "PairProbeResult":
        def stats(rows: Iterable[Mapping[str, Any]]) -> list[SizeStats]:
            return [SizeStats(int(r["num_bytes"]), int(r["num_reps"]), float(r["median_s"]),
                              float(r["p90_s"]), int(r.get("num_blocks", 0)),
                              int(r.get("num_descs", 0)), r.get("median_post_s")) for r in rows]
        layout = BlockLayout.from_dict(data["layout"])
        return cls(
            prefill_id=data["prefill_id"], decode_id=data["decode_id"], mem_type=data["mem_type"],
            layout=layout, block_order=data["block_order"], fit=LinkFit.from_dict(data["fit"]),
            sizes=stats(data["sizes"]),
            samples=[ReadSample(b // layout.bytes_per_block, int(b),
                                layout.num_descs(b // layout.bytes_per_block), float(t))
                     for b, t in data["samples"]],
            memcpy_sizes=stats(data["memcpy_sizes"]), is_verified=bool(data["is_verified"]),
            wall_s=float(data["wall_s"]), notes=list(data.get("notes", [])),
            version=int(data.get("version", PROBE_RECORD_VERSION)))

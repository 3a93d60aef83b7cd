"""Probe results out: the JSON the router seeds its link models from, and a table for people.

JSON (version 1):
    {"version": 1, "created_unix_s": ..., "hostname": ..., "meta": {...},
     "pairs": [{"prefill_id", "decode_id", "alpha_s", "beta_bytes_per_s", "memcpy_bytes_per_s",
                "samples": [[num_bytes, seconds], ...], "fit": {...}, "sizes": [...], ...}]}
`LinkModelRegistry.load_probe_results` reads it.
"""
from __future__ import annotations

import json
import logging
import os
import socket
import time
from typing import Any, Mapping, Sequence

from transfer.probe_records import PROBE_RECORD_VERSION, PairProbeResult

logger = logging.getLogger(__name__)


def probe_json(results: Sequence[PairProbeResult], meta: Mapping[str, Any] | None = None
               ) -> dict[str, Any]:
    return {"version": PROBE_RECORD_VERSION, "created_unix_s": time.time(),
            "hostname": socket.gethostname(), "meta": dict(meta or {}),
            "pairs": [r.to_dict() for r in results]}


def write_probe_json(path: str, results: Sequence[PairProbeResult],
                     meta: Mapping[str, Any] | None = None) -> None:
    """Write atomically (temp file + rename): a reader never sees half a file."""
    tmp_path = f"{path}.tmp.{os.getpid()}"
    with open(tmp_path, "w") as f:
        json.dump(probe_json(results, meta), f, indent=1)
    os.replace(tmp_path, path)
    logger.info("probe results for %d pairs written to %s", len(results), path)


def load_probe_json(path: str) -> dict[str, Any]:
    with open(path) as f:
        data = json.load(f)
    if data.get("version") != PROBE_RECORD_VERSION:
        raise ValueError(f"{path}: probe JSON version {data.get('version')} is not supported "
                         f"(want {PROBE_RECORD_VERSION})")
    return data


def format_probe_table(result: PairProbeResult) -> str:
    """Per size: median/p90 READ time, time blocked in transfer() ("post"), GB/s, the fit's
    error there, memcpy GB/s and the ratio."""
    copies = {s.num_bytes: s for s in result.memcpy_sizes}
    fit = result.fit
    lines = [
        f"link {result.prefill_id} -> {result.decode_id} ({result.mem_type}, "
        f"{result.layout.num_regions} regions x {result.layout.desc_bytes} B descriptors, "
        f"{result.block_order} blocks)",
        f"{'size':>10} {'blocks':>6} {'descs':>6} {'reps':>4} {'median ms':>10} {'p90 ms':>9} "
        f"{'post ms':>8} {'GB/s':>6} {'fit err':>8} {'memcpy GB/s':>11} {'nixl/memcpy':>11}",
    ]
    for s in result.sizes:
        copy = copies.get(s.num_bytes)
        copy_gbs = copy.gb_per_s if copy else float("nan")
        fit_err = (s.median_s - fit.predict(s.num_bytes)) / s.median_s
        post_ms = s.median_post_s * 1e3 if s.median_post_s is not None else float("nan")
        lines.append(
            f"{_size(s.num_bytes):>10} {s.num_blocks:>6} {s.num_descs:>6} {s.num_reps:>4} "
            f"{s.median_s * 1e3:>10.3f} {s.p90_s * 1e3:>9.3f} {post_ms:>8.3f} {s.gb_per_s:>6.2f} "
            f"{fit_err * 100:>7.1f}% {copy_gbs:>11.2f} {s.gb_per_s / copy_gbs:>11.2f}")
    lines.append(f"fit: alpha={fit.alpha_s * 1e6:.1f} us  beta={fit.beta_bytes_per_s / 1e9:.2f} GB/s"
                 f"  r2={fit.r2:.4f}  max |err|={fit.max_relative_error * 100:.1f}%"
                 f"  memcpy={result.memcpy_bytes_per_s / 1e9:.2f} GB/s"
                 f"  verified={result.is_verified}  wall={result.wall_s:.1f} s")
    lines.extend(f"note: {n}" for n in result.notes)
    return "\n".join(lines)


def _size(num_bytes: int) -> str:
    if num_bytes >= 1 << 20:
        return f"{num_bytes / (1 << 20):.1f} MiB"
    return f"{num_bytes / (1 << 10):.0f} KiB"

"""Probe every prefill -> decode link of a deployment with NIXL, on KV-shaped host (or GPU) memory.

Runs at start-up (bounded by `transfer.probe_max_seconds` per pair) and on demand via
`pd-serve transfer-probe`. The workers host the probe endpoints (transfer.probe_host.ProbeHost),
so the measured link is the one their engines' KV transfers use.
"""
from __future__ import annotations

import logging
from typing import Any

from pd_serve.worker import WorkerInfo
from transfer.kv_geometry import KVGeometry

logger = logging.getLogger(__name__)


def transfer_pairs(infos: dict[str, WorkerInfo]) -> list[tuple[str, str]]:
    """(prefill, decode) worker pairs a request can be disaggregated over."""
    prefills = [w for w, i in infos.items() if i.role in ("prefill", "both")]
    decodes = [w for w, i in infos.items() if i.role in ("decode", "both")]
    return [(p, d) for p in prefills for d in decodes if p != d]


def probe_links(workers: dict[str, Any], infos: dict[str, WorkerInfo], device: str,
                max_seconds: float) -> list:
    """One probe per pair, one pair at a time. Each worker opens its endpoint once, for every
    pair it is in (a child process that imports NIXL, about 1.2 s on this 2-core host: with
    the endpoints closed after each pair, adaptive's two workers opened four and the link-probe
    phase took 5.6 s), and all are closed at the end."""
    import ray

    from transfer.probe import ProbeSettings, run_probe_between
    from transfer.probe_layout import BlockLayout

    info = next(iter(infos.values()))
    geometry = KVGeometry.from_hf_config(info.hf_config, info.block_size, info.kv_dtype)
    layout = BlockLayout.from_geometry(geometry, max_num_tokens=info.max_model_len)
    settings = ProbeSettings(max_seconds=max_seconds, num_reps=5)
    results = []
    pairs = transfer_pairs(infos)
    try:
        for p, d in pairs:
            # probe_open keeps an endpoint whose layout matches; a reader restores its pattern
            # when it disconnects, so it can be the source of the next pair.
            results.append(run_probe_between(workers[p], workers[d], layout, prefill_id=p,
                                             decode_id=d, device="cpu" if device == "cpu" else "cuda",
                                             settings=settings))
            fit = results[-1].fit
            logger.info("link %s->%s: alpha %.3f ms, beta %.2f GB/s (r2 %.2f)", p, d,
                        fit.alpha_s * 1e3, fit.beta_bytes_per_s / 1e9, fit.r2)
    finally:
        probed = sorted({w for pair in pairs for w in pair})
        ray.get([workers[w].probe_close.remote() for w in probed])
    return results

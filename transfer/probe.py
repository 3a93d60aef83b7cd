"""Probe a prefill -> decode link over NIXL and fit `t(bytes) = alpha + bytes / beta` to it.

The decode side READs from the prefill side, as vLLM's NixlConnector does, over a sweep from one
block up to the largest KV one request can have, on the memory kind the KV cache lives in.

Between two Ray actors that host `ProbeHost` (a pd-serve worker, or `ProbeActor`):

    result = run_probe_between(prefill_actor, decode_actor, layout, prefill_id="p0", decode_id="d0")
    write_probe_json("links.json", [result])     # from transfer.probe_report

Between two endpoints in this process (benchmarks): `probe_endpoints(source, reader, ...)`;
between two fresh local processes, no Ray: `transfer.probe_processes.probe_between_processes`.
"""
from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import Any, Callable

from transfer.link_model import fit_link
from transfer.nixl_endpoint import AgentOptions, ProbeEndpoint
from transfer.probe_layout import BlockLayout, plan_sweep_blocks
from transfer.probe_records import (EndpointInfo, PairProbeResult, ReadSample, summarize_copies,
                                    summarize_reads)

__all__ = ["AgentOptions", "ProbeEndpoint", "ProbeSettings", "probe_endpoints",
           "run_probe_between", "run_probe_matrix"]

logger = logging.getLogger(__name__)

# A call into the reader: (ProbeHost method name, *args) -> result, local or over Ray.
SideCall = Callable[..., Any]


@dataclass(frozen=True)
class ProbeSettings:
    """How hard to probe. `max_seconds` bounds the whole probe; 85% of it goes to READs."""

    sizes_blocks: tuple[int, ...] | None = None  # None: 1, 2, 4, ... up to the layout's blocks
    num_reps: int = 7
    num_warmup: int = 1
    max_seconds: float = 20.0
    block_order: str = "scattered"
    poll_interval_s: float = 0.0
    measure_memcpy: bool = True
    fit_weighting: str = "relative"  # see link_model.fit_link

    def sweep(self, layout: BlockLayout) -> list[int]:
        return list(self.sizes_blocks) if self.sizes_blocks else plan_sweep_blocks(layout.num_blocks)

    @property
    def reads_budget_s(self) -> float:
        return self.max_seconds * (0.85 if self.measure_memcpy else 1.0)

    @property
    def copies_budget_s(self) -> float:
        return self.max_seconds * 0.15


def _probe_sides(call_reader: SideCall, source_info: EndpointInfo, prefill_id: str,
                 decode_id: str, settings: ProbeSettings) -> PairProbeResult:
    """The whole probe, driven from the reader's side: the source only has to stay alive."""
    start = time.perf_counter()
    layout = source_info.layout
    remote_agent = call_reader("probe_connect", source_info)
    try:
        sizes = settings.sweep(layout)
        samples, is_verified = call_reader(
            "probe_reads", remote_agent, sizes, settings.num_reps, settings.num_warmup,
            settings.reads_budget_s, settings.block_order, settings.poll_interval_s)
        copies = call_reader("probe_copies", [n * layout.bytes_per_block for n in sizes],
                             settings.num_reps, settings.copies_budget_s) \
            if settings.measure_memcpy else []
    finally:
        call_reader("probe_disconnect", remote_agent)
    if not is_verified:
        raise RuntimeError(f"probe {prefill_id} -> {decode_id}: READ returned wrong bytes")
    return _result(prefill_id, decode_id, source_info, settings, samples, copies, is_verified,
                   time.perf_counter() - start)


def _result(prefill_id: str, decode_id: str, source_info: EndpointInfo, settings: ProbeSettings,
            samples: list[ReadSample], copies: list[tuple[int, float]], is_verified: bool,
            wall_s: float) -> PairProbeResult:
    notes = []
    sizes = summarize_reads(samples)
    is_cut_short = len(sizes) < len(settings.sweep(source_info.layout)) or \
        any(s.num_reps < settings.num_reps for s in sizes)
    if is_cut_short:
        notes.append(f"budget of {settings.max_seconds} s cut the sweep short")
    fit = fit_link([(s.num_bytes, s.seconds) for s in samples], settings.fit_weighting)
    result = PairProbeResult(prefill_id, decode_id, source_info.mem_type, source_info.layout,
                             settings.block_order, fit, sizes, samples, summarize_copies(copies),
                             is_verified, wall_s, notes)
    logger.info("link %s -> %s (%s): alpha=%.1f us beta=%.2f GB/s r2=%.4f memcpy=%.2f GB/s in %.1f s",
                prefill_id, decode_id, result.mem_type, fit.alpha_s * 1e6,
                fit.beta_bytes_per_s / 1e9, fit.r2, result.memcpy_bytes_per_s / 1e9, wall_s)
    return result


def probe_endpoints(source: ProbeEndpoint | EndpointInfo, reader: Any,
                    prefill_id: str = "source", decode_id: str = "reader",
                    settings: ProbeSettings = ProbeSettings()) -> PairProbeResult:
    """Probe from `source` (an endpoint here, or any endpoint's info) into `reader`, held here:
    a `ProbeEndpoint`, or a `transfer.probe_child.ChildEndpoint` whose child does the reads."""
    from transfer.probe_host import ProbeHost

    host = ProbeHost()
    host._probe_endpoint = reader

    def call_reader(method: str, *args: Any) -> Any:
        return getattr(host, method)(*args)

    source_info = source.info() if isinstance(source, ProbeEndpoint) else source
    return _probe_sides(call_reader, source_info, prefill_id, decode_id, settings)


def run_probe_between(prefill_actor: Any, decode_actor: Any, layout: BlockLayout | None = None,
                      *, prefill_id: str = "prefill", decode_id: str = "decode",
                      device: str = "cpu", settings: ProbeSettings = ProbeSettings(),
                      options: AgentOptions | None = None, rpc_slack_s: float = 120.0
                      ) -> PairProbeResult:
    """Probe the link from `prefill_actor` to `decode_actor`, two Ray actors hosting `ProbeHost`.

    With `layout`, (re)opens both endpoints with it on `device` first; without, uses the
    endpoints the actors already opened. The decode actor does the READs and the timing, so no
    Ray round trip is inside any measurement. Ray calls time out after the probe budget plus
    `rpc_slack_s` (endpoint set-up imports nixl and starts UCX: seconds on a busy host).
    """
    import ray

    timeout_s = settings.max_seconds + rpc_slack_s
    if layout is not None:
        source_info, _ = ray.get([
            prefill_actor.probe_open.remote(layout, device, f"probe-{prefill_id}", options),
            decode_actor.probe_open.remote(layout, device, f"probe-{decode_id}", options)],
            timeout=timeout_s)
    else:
        source_info = ray.get(prefill_actor.probe_info.remote(), timeout=timeout_s)

    def call_decode(method: str, *args: Any) -> Any:
        return ray.get(getattr(decode_actor, method).remote(*args), timeout=timeout_s)

    return _probe_sides(call_decode, source_info, prefill_id, decode_id, settings)


def run_probe_matrix(prefill_actors: dict[str, Any], decode_actors: dict[str, Any],
                     layout: BlockLayout, device: str = "cpu",
                     settings: ProbeSettings = ProbeSettings()) -> list[PairProbeResult]:
    """Probe every prefill -> decode pair, one at a time (concurrent probes would share links)."""
    results = []
    for prefill_id, prefill_actor in prefill_actors.items():
        for decode_id, decode_actor in decode_actors.items():
            # probe_open keeps an endpoint whose layout already matches: each opens once.
            results.append(run_probe_between(
                prefill_actor, decode_actor, layout, prefill_id=prefill_id, decode_id=decode_id,
                device=device, settings=settings))
    return results


"""`ProbeHost`: the mixin that lets any actor host one `ProbeEndpoint` and be probed.

A pd-serve worker actor inherits it to gain the `probe_*` methods that
`transfer.probe.run_probe_between` calls; `transfer.probe_actor.ProbeActor` is it and nothing
else. No Ray here: the same methods serve in-process probes.

The methods are synchronous and hold the calling thread for the sweep (`max_seconds`). In an
async actor they would hold its event loop for that long: `AsyncProbeHost` runs each on a
thread instead, for actors that serve while they are probed.
"""
from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING, Sequence

from transfer.probe_layout import BlockLayout
from transfer.probe_records import EndpointInfo, ReadSample

if TYPE_CHECKING:
    from transfer.nixl_endpoint import AgentOptions, ProbeEndpoint
    from transfer.probe_child import ChildEndpoint

logger = logging.getLogger(__name__)


class ProbeHost:
    """Mixin giving an actor one `ProbeEndpoint` and remote-callable probe methods."""

    _probe_endpoint: "ProbeEndpoint | ChildEndpoint | None" = None
    # Host the endpoint in a child process (transfer.probe_child): for actors that serve, so
    # that NIXL, UCX and their threads never load into the serving process.
    probe_in_child: bool = False

    def probe_open(self, layout: BlockLayout, device: str = "cpu", name: str = "probe",
                   options: "AgentOptions | None" = None) -> EndpointInfo:
        """Create (or re-create, if the layout or device changed) the endpoint; return its info."""
        from transfer.nixl_endpoint import AgentOptions, ProbeEndpoint  # NIXL loads with an endpoint

        current = self._probe_endpoint
        if current is not None and current.layout == layout and current.device == device:
            return current.info()
        if current is not None:
            logger.info("re-opening probe endpoint %s for %s on %s; readers of the old one must "
                        "reconnect", current.agent_name, layout, device)
            current.close()
        if self.probe_in_child:
            from transfer.probe_child import ChildEndpoint
            self._probe_endpoint = ChildEndpoint(layout, device, name, options or AgentOptions())
        else:
            self._probe_endpoint = ProbeEndpoint(layout, device, name, options or AgentOptions())
        return self._probe_endpoint.info()

    def _probe(self) -> "ProbeEndpoint | ChildEndpoint":
        if self._probe_endpoint is None:
            raise RuntimeError("no probe endpoint in this actor: call probe_open first")
        return self._probe_endpoint

    def probe_info(self) -> EndpointInfo:
        return self._probe().info()

    def probe_connect(self, remote: EndpointInfo) -> str:
        return self._probe().connect(remote)

    def probe_reads(self, remote_agent: str, sizes_blocks: Sequence[int], num_reps: int = 5,
                    num_warmup: int = 1, max_seconds: float = 10.0,
                    block_order: str = "scattered", poll_interval_s: float = 0.0
                    ) -> tuple[list[ReadSample], bool]:
        """Verify one READ's bytes, then time the sweep; returns (samples, is_verified)."""
        endpoint = self._probe()
        is_verified = endpoint.verify(remote_agent)
        samples = endpoint.time_reads(remote_agent, sizes_blocks, num_reps, num_warmup,
                                      max_seconds, block_order, poll_interval_s)
        return samples, is_verified

    def probe_copies(self, sizes_bytes: Sequence[int], num_reps: int = 5,
                     max_seconds: float = 5.0) -> list[tuple[int, float]]:
        return self._probe().time_copies(sizes_bytes, num_reps, max_seconds)

    def probe_disconnect(self, remote_agent: str) -> None:
        self._probe().disconnect(remote_agent)

    def probe_close(self) -> None:
        if self._probe_endpoint is not None:
            self._probe_endpoint.close()
            self._probe_endpoint = None


class AsyncProbeHost(ProbeHost):
    """`ProbeHost` for async actors: each probe call runs on a thread, one at a time.

    A pd-serve worker's event loop carries every request of its engine. Held by the probe's
    synchronous calls, it stopped for 0.1-2.4 s at each call of the start-up probe (run 47,
    2026-12-03: waiting for the probe's child process), and `pd-serve transfer-probe` on a
    serving deployment would stop it for the whole sweep."""

    async def probe_open(self, *args, **kwargs) -> EndpointInfo:
        return await self._on_thread(ProbeHost.probe_open, *args, **kwargs)

    async def probe_info(self) -> EndpointInfo:
        return await self._on_thread(ProbeHost.probe_info)

    async def probe_connect(self, remote: EndpointInfo) -> str:
        return await self._on_thread(ProbeHost.probe_connect, remote)

    async def probe_reads(self, *args, **kwargs) -> tuple[list[ReadSample], bool]:
        return await self._on_thread(ProbeHost.probe_reads, *args, **kwargs)

    async def probe_copies(self, *args, **kwargs) -> list[tuple[int, float]]:
        return await self._on_thread(ProbeHost.probe_copies, *args, **kwargs)

    async def probe_disconnect(self, remote_agent: str) -> None:
        await self._on_thread(ProbeHost.probe_disconnect, remote_agent)

    async def probe_close(self) -> None:
        await self._on_thread(ProbeHost.probe_close)

    async def _on_thread(self, method, *args, **kwargs):
        lock = self.__dict__.setdefault("_probe_lock", asyncio.Lock())  # one probe call at a time
        async with lock:
            return await asyncio.to_thread(method, self, *args, **kwargs)

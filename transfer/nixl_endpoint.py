"""`ProbeEndpoint`: one NIXL agent with a KV-shaped buffer, able to be read from and to time READs.

Lives inside any process (a pd-serve worker actor, `ProbeActor`, a benchmark). Both ends of a link
make one; the source fills its blocks with a pattern, the reader `connect`s to the source's
`info()` and times READs of N blocks, built descriptor for descriptor as vLLM's NixlConnector
builds them (see `probe_layout`), so the numbers are what the connector will see on this link.
"""
from __future__ import annotations

import logging
import os
import socket
import time
import uuid
from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np

from transfer.probe_buffer import ProbeBuffer
from transfer.probe_layout import BlockLayout, pick_block_ids
from transfer.probe_records import EndpointInfo, ReadSample
from transfer.ucx_env import apply_ucx_defaults

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class AgentOptions:
    """NIXL agent settings; the defaults are those vLLM's NixlConnector uses (vLLM 0.32)."""

    backends: tuple[str, ...] = ("UCX",)
    num_threads: int = 4  # vLLM: kv_transfer_config extra "num_threads", default 4
    capture_telemetry: bool = True
    enable_prog_thread: bool = True


@dataclass
class _Remote:
    info: EndpointInfo
    # Prepared descriptor list of every remote descriptor, made once per remote (as vLLM does).
    dlist: Any


def _desc_ids(layout: BlockLayout, block_ids: Sequence[int]) -> np.ndarray:
    """`layout.desc_ids` in numpy: tens of thousands of ids per READ on big models."""
    regions = np.arange(layout.num_regions, dtype=np.int64)[:, None] * layout.num_blocks
    return (regions + np.asarray(block_ids, dtype=np.int64)[None, :]).ravel().astype(np.int32)


class ProbeEndpoint:
    """A NIXL agent plus a registered `BlockLayout` buffer in DRAM ("cpu") or VRAM ("cuda[:N]")."""

    def __init__(self, layout: BlockLayout, device: str = "cpu", name: str = "probe",
                 options: AgentOptions = AgentOptions(), pattern_seed: int | None = None) -> None:
        apply_ucx_defaults("cuda" if device.startswith("cuda") else "cpu")
        from nixl._api import nixl_agent, nixl_agent_config  # after the env: UCX reads it once

        self.layout = layout
        self.options = options
        self.pattern_seed = pattern_seed if pattern_seed is not None else os.getpid() % 1000
        self.buffer = ProbeBuffer(layout, device)
        self.buffer.fill_pattern(self.pattern_seed)
        self.agent_name = f"{name}-{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:8]}"
        start = time.perf_counter()
        config = nixl_agent_config(
            enable_prog_thread=options.enable_prog_thread, backends=list(options.backends),
            num_threads=options.num_threads, capture_telemetry=options.capture_telemetry)
        self.agent = nixl_agent(self.agent_name, config)
        self._reg_descs = self.agent.register_memory(
            [(self.buffer.base_addr, self.buffer.nbytes, self.buffer.device_id, "")],
            self.buffer.mem_type)
        self.setup_s = time.perf_counter() - start
        self._local_dlist = self.agent.prep_xfer_dlist(
            "NIXL_INIT_AGENT", self._descs(self.buffer.base_addr, layout, self.buffer.device_id),
            self.buffer.mem_type)
        # remote agent name -> its info and prepared descriptors; fills on connect, empties on
        # disconnect/close.
        self._remotes: dict[str, _Remote] = {}
        # Whether reads have overwritten blocks of the pattern: a reader that is a source next
        # (a deployment's workers probe each other both ways) must hand out its pattern again.
        self._is_overwritten = False
        logger.info("probe endpoint %s: %d MiB %s, %d regions x %d blocks x %d B, set up in %.2f s",
                    self.agent_name, self.buffer.nbytes >> 20, self.buffer.mem_type,
                    layout.num_regions, layout.num_blocks, layout.desc_bytes, self.setup_s)

    @property
    def device(self) -> str:
        return self.buffer.device

    @staticmethod
    def _descs(base_addr: int, layout: BlockLayout, device_id: int) -> np.ndarray:
        """Nx3 (addr, len, device) rows, descriptor id = region * num_blocks + block."""
        offsets = np.arange(layout.num_regions * layout.num_blocks, dtype=np.uint64)
        descs = np.empty((offsets.shape[0], 3), dtype=np.uint64)
        descs[:, 0] = base_addr + offsets * layout.desc_bytes
        descs[:, 1] = layout.desc_bytes
        descs[:, 2] = device_id
        return descs

    def info(self) -> EndpointInfo:
        return EndpointInfo(
            agent_name=self.agent_name, agent_metadata=self.agent.get_agent_metadata(),
            mem_type=self.buffer.mem_type, device_id=self.buffer.device_id,
            base_addr=self.buffer.base_addr, layout=self.layout, pattern_seed=self.pattern_seed,
            hostname=socket.gethostname(), pid=os.getpid())

    def connect(self, remote: EndpointInfo) -> str:
        """Load a remote's metadata and prepare its descriptors; returns its agent name."""
        if remote.layout.desc_bytes != self.layout.desc_bytes or \
                remote.layout.num_regions != self.layout.num_regions:
            raise ValueError(f"remote layout {remote.layout} does not match local {self.layout}: "
                             "descriptor size and region count must agree (as vLLM requires)")
        if remote.mem_type != self.buffer.mem_type:
            logger.warning("probe reads %s into %s: not the memory kinds of a real transfer",
                           remote.mem_type, self.buffer.mem_type)
        name = self.agent.add_remote_agent(remote.agent_metadata)
        name = name.decode() if isinstance(name, bytes) else name
        dlist = self.agent.prep_xfer_dlist(
            name, self._descs(remote.base_addr, remote.layout, remote.device_id), remote.mem_type)
        self._remotes[name] = _Remote(remote, dlist)
        return name

    def read(self, remote_agent: str, local_block_ids: Sequence[int],
             remote_block_ids: Sequence[int], timeout_s: float = 30.0,
             poll_interval_s: float = 0.0) -> ReadSample:
        """One READ of whole blocks (every region), timed; raises if it fails or times out.

        `poll_interval_s=0` busy-polls, as a dedicated transfer thread would; a positive value
        sleeps between polls, closer to a connector that checks once per engine step.
        """
        remote = self._remotes[remote_agent]
        local_ids = _desc_ids(self.layout, local_block_ids)
        remote_ids = _desc_ids(remote.info.layout, remote_block_ids)
        self._is_overwritten = True
        start = time.perf_counter()
        handle = self.agent.make_prepped_xfer("READ", self._local_dlist, local_ids,
                                              remote.dlist, remote_ids)
        try:
            state = self.agent.transfer(handle)
            # Host-to-host UCX (cma) copies inside transfer(): this part blocks the caller.
            post_s = time.perf_counter() - start
            deadline = start + timeout_s
            while state == "PROC":
                if poll_interval_s > 0:
                    time.sleep(poll_interval_s)
                if time.perf_counter() > deadline:
                    raise TimeoutError(f"READ of {len(local_ids)} descriptors from {remote_agent} "
                                       f"not done after {timeout_s} s")
                state = self.agent.check_xfer_state(handle)
            seconds = time.perf_counter() - start
            if state != "DONE":
                raise RuntimeError(f"READ from {remote_agent} ended in state {state}")
            nixl_xfer_s, num_posted = self._telemetry(handle)
        finally:
            handle.release()
        num_blocks = len(local_block_ids)
        return ReadSample(num_blocks, num_blocks * self.layout.bytes_per_block, len(local_ids),
                          seconds, nixl_xfer_s, num_posted, post_s)

    def _telemetry(self, handle: Any) -> tuple[float | None, int | None]:
        if not self.options.capture_telemetry:
            return None, None
        telemetry = self.agent.get_xfer_telemetry(handle)
        return telemetry.xferDuration / 1e6, int(telemetry.descCount)

    def time_reads(self, remote_agent: str, sizes_blocks: Sequence[int], num_reps: int = 5,
                   num_warmup: int = 1, max_seconds: float = 10.0, block_order: str = "scattered",
                   poll_interval_s: float = 0.0, seed: int = 0) -> list[ReadSample]:
        """Timed READs over a size sweep, in round-robin passes so drift hits all sizes alike.

        Warm-up passes are dropped (connection set-up, first-touch page faults). Stops starting
        new READs once `max_seconds` have passed, but not before one timed pass over every size
        (a link model needs two sizes; a host stalled through the whole budget once left the
        start-up probe with none, and the deploy failed); a size may have fewer than `num_reps`.
        """
        capacity = min(self.layout.num_blocks, self._remotes[remote_agent].info.layout.num_blocks)
        sizes = [n for n in sizes_blocks if 1 <= n <= capacity]
        if len(sizes) < len(sizes_blocks):
            logger.warning("sizes above %d blocks dropped from the sweep: %s", capacity,
                           [n for n in sizes_blocks if n not in sizes])
        deadline = time.perf_counter() + max_seconds
        samples: list[ReadSample] = []
        for pass_index in range(num_warmup + num_reps):
            for size_index, num_blocks in enumerate(sizes):
                if pass_index > num_warmup and time.perf_counter() > deadline:
                    logger.info("probe budget of %.1f s spent after %d samples", max_seconds,
                                len(samples))
                    return samples
                ids_seed = seed + 7919 * pass_index + size_index
                sample = self.read(remote_agent,
                                   pick_block_ids(num_blocks, capacity, block_order, ids_seed),
                                   pick_block_ids(num_blocks, capacity, block_order, ids_seed + 1),
                                   poll_interval_s=poll_interval_s)
                if pass_index >= num_warmup:
                    samples.append(sample)
        return samples

    def verify(self, remote_agent: str, num_blocks: int = 64, seed: int = 12345) -> bool:
        """READ scattered blocks into zeroed local blocks and check they hold the remote pattern."""
        remote = self._remotes[remote_agent].info
        capacity = min(self.layout.num_blocks, remote.layout.num_blocks)
        n = min(num_blocks, capacity)
        local_ids = pick_block_ids(n, capacity, "scattered", seed)
        remote_ids = pick_block_ids(n, capacity, "scattered", seed + 1)
        self._is_overwritten = True
        self.buffer.zero_blocks(local_ids)
        self.read(remote_agent, local_ids, remote_ids)
        is_ok = self.buffer.blocks_match(local_ids, remote_ids, remote.layout, remote.pattern_seed)
        if not is_ok:
            logger.error("probe READ from %s returned wrong bytes (%d blocks)", remote_agent, n)
        return is_ok

    def time_copies(self, sizes_bytes: Sequence[int], num_reps: int = 5,
                    max_seconds: float = 5.0) -> list[tuple[int, float]]:
        """Copy baseline inside this endpoint's own memory kind (see `ProbeBuffer.time_copies`)."""
        return self.buffer.time_copies(list(sizes_bytes), num_reps, max_seconds)

    def disconnect(self, remote_agent: str) -> None:
        """Forget a remote; the pattern is restored where reads overwrote it, so the endpoint
        can be any other's source next (a fill: tens of ms for a CPU model's whole KV layout)."""
        remote = self._remotes.pop(remote_agent, None)
        if remote is not None:
            remote.dlist.release()
            self.agent.remove_remote_agent(remote_agent)
        if self._is_overwritten and not self._remotes:
            self.buffer.fill_pattern(self.pattern_seed)
            self._is_overwritten = False

    def close(self) -> None:
        """Release NIXL resources; the endpoint is unusable afterwards."""
        for name in list(self._remotes):
            try:
                self.disconnect(name)
            except Exception:  # closing must go on; the agent dies with the process anyway
                logger.warning("disconnect from %s failed during close", name, exc_info=True)
        self._local_dlist.release()
        self.agent.deregister_memory(self._reg_descs)

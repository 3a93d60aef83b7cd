"""Probe a link between two fresh local processes, without Ray.

For a node before any worker exists, and for GPU checks on a lent machine: two child processes
(`transfer.probe_child.ChildEndpoint`) each host a `ProbeEndpoint`, the source on `device` and
the reader on `reader_device`, and this process drives the reader's sweep through its pipe (the
timing is the reader's own, inside its process). Each child gets `env` before NIXL starts (UCX
reads its environment once per process), so transport choices can be compared run against run.
"""
from __future__ import annotations

from typing import Mapping

from transfer.nixl_endpoint import AgentOptions
from transfer.probe import ProbeSettings, probe_endpoints
from transfer.probe_child import START_TIMEOUT_S, ChildEndpoint
from transfer.probe_layout import BlockLayout
from transfer.probe_records import PairProbeResult


def probe_between_processes(layout: BlockLayout, device: str = "cpu",
                            reader_device: str | None = None,
                            settings: ProbeSettings = ProbeSettings(),
                            options: AgentOptions = AgentOptions(),
                            env: Mapping[str, str | None] | None = None,
                            startup_timeout_s: float = START_TIMEOUT_S,
                            prefill_id: str = "source", decode_id: str = "reader"
                            ) -> PairProbeResult:
    """Probe from a source process on `device` to a reader process on `reader_device`.

    `env` entries are set (None: unset) in both processes before NIXL starts. A process that
    does not start within `startup_timeout_s`, or does not answer a call, is killed and the
    probe raises; both end with the probe (the source last: its memory is what the reader reads).
    """
    source = ChildEndpoint(layout, device, "probe-source", options, env, startup_timeout_s)
    try:
        reader = ChildEndpoint(layout, reader_device or device, "probe-reader", options, env, startup_timeout_s)
        try:
            return probe_endpoints(source.info(), reader, prefill_id, decode_id, settings)
        finally:
            reader.close()
    finally:
        source.close()

"""`ProbeActor`: a Ray actor that only hosts a probe endpoint (see `transfer.probe_host`).

For tests, benchmarks and probing a node before any engine starts; pd-serve workers inherit
`ProbeHost` instead and are probed the same way.
"""
from __future__ import annotations

import ray

from transfer.probe_host import ProbeHost

__all__ = ["ProbeActor", "ProbeHost"]


@ray.remote(num_cpus=0)
class ProbeActor(ProbeHost):
    """Takes no CPU slot: it idles between probe calls, and the READs it times are short."""

    def ping(self) -> bool:
        return True

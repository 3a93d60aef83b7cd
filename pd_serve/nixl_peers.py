"""A vLLM worker extension (`worker_extension_cls`) that names the engines this engine's NIXL
connector has handshaken with.

Whether a NIXL handshake is still owed is state inside the engine's worker process, out of reach
of the actor that drives the engine: a request that pays one only looks slow, and so does a host
stall (up to ~1.8 s on these shared machines). With this, `Worker.nixl_peers()` asks the engine
itself (`AsyncLLM.collective_rpc`), and a test can check that deploy()'s warm-up left no handshake
for a user request to pay, whatever the host does to the timings.
"""
from __future__ import annotations

QUALNAME = "pd_serve.nixl_peers.NixlPeers"


class NixlPeers:
    """Mixed into vLLM's worker class by vLLM (`ParallelConfig.worker_extension_cls`)."""

    def nixl_peer_engines(self) -> list[str]:
        """The remote engine ids whose NIXL agents this worker has loaded (a handshake done), sorted."""
        from vllm.distributed.kv_transfer import get_kv_transfer_group, has_kv_transfer_group

        if not has_kv_transfer_group():
            return []
        worker = getattr(get_kv_transfer_group(), "connector_worker", None)
        agents = getattr(worker, "_remote_agents", None)
        if agents is None:  # vLLM moved it: say so rather than report "no peers"
            raise RuntimeError("this vLLM's KV connector keeps no NIXL remote agents "
                               "(connector_worker._remote_agents); pd_serve.nixl_peers needs updating")
        with worker._handshake_lock:  # the handshake thread writes it under this lock
            # vLLM's map is a defaultdict: a lookup can leave an empty entry, which is no handshake.
            return sorted(eid for eid, ranks in agents.items() if ranks)

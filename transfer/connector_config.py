"""Each worker's KV-connector settings: the only module that builds vLLM connector configs.

A backend turns (backend name, device, worker identity) into two things the worker applies before
its engine starts: the `kv_transfer_config` dict for vLLM and the environment variables the
connector reads (side-channel host and port, UCX transport choice). Ports are allocated on the
worker's own node at start-up, never hard-coded, so that several prefill and decode workers on one
node do not collide.
"""
from __future__ import annotations

import logging
import random
import socket
from dataclasses import dataclass, field
from typing import Any

logger = logging.getLogger(__name__)

BACKENDS = ("nixl", "nccl", "auto")
NCCL_CONNECTOR = "P2pNcclConnector"


class BackendUnavailableError(ValueError):
    """The chosen transfer backend cannot run on this hardware."""


@dataclass(frozen=True)
class ConnectorSettings:
    """What one worker needs to join KV transfer: vLLM's config dict and its environment."""

    backend: str
    kv_transfer_config: dict[str, Any]
    env: dict[str, str] = field(default_factory=dict)
    side_channel_host: str = ""
    side_channel_port: int = 0


def vllm_has_connector(name: str) -> bool:
    """Whether the installed vLLM registers the KV connector `name`."""
    from vllm.distributed.kv_transfer.kv_connector.factory import KVConnectorFactory
    return name in KVConnectorFactory._registry


def nccl_unavailable_reason(device: str) -> str:
    """Why 'nccl' cannot run here. It never can today: NCCL needs GPUs, and on GPUs the connector
    it names, vLLM's P2pNcclConnector, was removed from vLLM (vllm-project/vllm#44854, June 2026)
    before the vLLM this project runs on. NIXL is vLLM's maintained path on GPUs too."""
    if device != "gpu":
        return ("'nccl' (vLLM's P2pNcclConnector) needs GPUs and this deployment runs on CPU; "
                "use 'nixl' (NIXL over host memory) or 'auto'")
    import vllm
    if not vllm_has_connector(NCCL_CONNECTOR):
        return (f"'nccl' needs vLLM's {NCCL_CONNECTOR}, which vLLM {vllm.__version__} no longer ships "
                f"(removed in vllm-project/vllm#44854); use 'nixl' or 'auto': NIXL moves the KV "
                f"cache over NVLink or RDMA on GPUs")
    return (f"'nccl': this vLLM ({vllm.__version__}) still has {NCCL_CONNECTOR}, but pd-serve's router "
            f"drives NIXL's pull protocol only; use 'nixl' or 'auto'")


def resolve_backend(backend: str, device: str) -> str:
    """'auto' is NIXL everywhere (UCX picks RDMA/NVLink on GPUs, shared memory/TCP on hosts)."""
    if backend not in BACKENDS:
        raise ValueError(f"transfer.backend: unknown backend {backend!r}; allowed: {list(BACKENDS)}")
    if backend == "nccl":
        raise BackendUnavailableError("transfer.backend " + nccl_unavailable_reason(device))
    return "nixl" if backend == "auto" else backend


# Side-channel ports come from above Ray's worker ports (10002-19999 by default) and below the
# kernel's ephemeral range. The port is only reserved until vLLM binds it, 15-30 s later, and an
# ephemeral port is what every outgoing connection on the node takes meanwhile: a clean clone's
# tests saw vLLM's handshake listener fail with "Address already in use" on one (35163,
# 2026-12-02), and vLLM then waited for it forever.
PORT_RANGE_LOW = 20000
DEFAULT_EPHEMERAL_LOW = 32768
PORT_TRIES = 64


def ephemeral_low(path: str = "/proc/sys/net/ipv4/ip_local_port_range") -> int:
    """The lowest port the kernel hands to outgoing connections (Linux; else the IANA default)."""
    try:
        with open(path) as f:
            return int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        return DEFAULT_EPHEMERAL_LOW


def _is_free(host: str, port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        try:
            s.bind((host, port))
        except OSError:
            return False
        return True


def allocate_port(host: str = "127.0.0.1", rng: random.Random | None = None) -> int:
    """A port that is free on this node now, outside the ephemeral range (see above); drawn at
    random, so workers starting together differ. Where none is free there, one the OS picks."""
    rng = rng or random.SystemRandom()
    high = ephemeral_low()
    if high - PORT_RANGE_LOW > PORT_TRIES:
        for port in rng.sample(range(PORT_RANGE_LOW, high), PORT_TRIES):
            if _is_free(host, port):
                return port
    logger.warning("no free port in %d-%d on %s; taking one the OS picks (it may be taken again "
                   "before vLLM binds it)", PORT_RANGE_LOW, high - 1, host)
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def connector_settings(backend: str, device: str, engine_id: str, node_ip: str,
                       abort_timeout_s: int, single_node: bool) -> ConnectorSettings:
    """Settings for one worker; call on the worker's node (the port is allocated there)."""
    resolve_backend(backend, device)  # raises for a backend that cannot run here
    return _nixl_settings(device, engine_id, node_ip, abort_timeout_s, single_node)


def _nixl_settings(device: str, engine_id: str, node_ip: str, abort_timeout_s: int,
                   single_node: bool) -> ConnectorSettings:
    port = allocate_port(node_ip)
    cfg = {
        "kv_connector": "NixlConnector",
        "kv_role": "kv_both",
        "engine_id": engine_id,
        # On CPU the KV cache already lives in host memory; on GPU NIXL reads device memory.
        "kv_buffer_device": "cpu" if device == "cpu" else "cuda",
        # A failed or partial load is recomputed on the decode worker, never served as garbage.
        "kv_load_failure_policy": "recompute",
        # Prefill blocks whose decode never comes are released after this (vLLM's KV lease).
        "kv_connector_extra_config": {"kv_lease_duration": int(abort_timeout_s)},
    }
    env = {"VLLM_NIXL_SIDE_CHANNEL_HOST": node_ip, "VLLM_NIXL_SIDE_CHANNEL_PORT": str(port)}
    if device == "cpu" and single_node:
        env["UCX_NET_DEVICES"] = "lo"  # keep host-memory transfers on loopback
    return ConnectorSettings("nixl", cfg, env, node_ip, port)

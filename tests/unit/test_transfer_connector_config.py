"""Each worker's KV-connector settings, and why 'nccl' cannot be chosen."""
from __future__ import annotations

import random
import socket

import pytest

from transfer.connector_config import (NCCL_CONNECTOR, PORT_RANGE_LOW, BackendUnavailableError,
                                       allocate_port, connector_settings, ephemeral_low, resolve_backend,
                                       vllm_has_connector)


def test_auto_is_nixl_on_every_device():
    assert resolve_backend("auto", "cpu") == resolve_backend("auto", "gpu") == "nixl"


def test_an_unknown_backend_names_the_allowed_ones():
    with pytest.raises(ValueError, match=r"unknown backend 'rdma'; allowed: \['nixl', 'nccl', 'auto'\]"):
        resolve_backend("rdma", "cpu")


def test_nixl_on_cpu_reads_host_memory_over_loopback_with_its_own_port():
    a = connector_settings("auto", "cpu", "engine-a", "127.0.0.1", 30, single_node=True)
    b = connector_settings("nixl", "cpu", "engine-b", "127.0.0.1", 30, single_node=True)
    cfg = a.kv_transfer_config
    assert (cfg["kv_connector"], cfg["kv_role"], cfg["engine_id"]) == ("NixlConnector", "kv_both", "engine-a")
    assert cfg["kv_buffer_device"] == "cpu" and cfg["kv_load_failure_policy"] == "recompute"
    assert cfg["kv_connector_extra_config"] == {"kv_lease_duration": 30}
    assert a.env["UCX_NET_DEVICES"] == "lo" and a.env["VLLM_NIXL_SIDE_CHANNEL_HOST"] == "127.0.0.1"
    assert a.side_channel_port != b.side_channel_port
    assert a.env["VLLM_NIXL_SIDE_CHANNEL_PORT"] == str(a.side_channel_port)


def test_nixl_across_nodes_or_on_gpus_leaves_the_nics_to_ucx():
    gpu = connector_settings("nixl", "gpu", "engine-g", "127.0.0.1", 30, single_node=True)
    assert gpu.kv_transfer_config["kv_buffer_device"] == "cuda" and "UCX_NET_DEVICES" not in gpu.env
    multi = connector_settings("nixl", "cpu", "engine-m", "127.0.0.1", 30, single_node=False)
    assert "UCX_NET_DEVICES" not in multi.env


def test_nccl_on_cpu_says_it_needs_gpus_and_what_to_use():
    with pytest.raises(BackendUnavailableError, match="needs GPUs.*use 'nixl'"):
        connector_settings("nccl", "cpu", "e", "127.0.0.1", 30, single_node=True)


def test_nccl_on_gpus_says_the_installed_vllm_no_longer_ships_its_connector():
    # The check is real: the connector NIXL needs is registered, the NCCL one is not.
    assert vllm_has_connector("NixlConnector") and not vllm_has_connector(NCCL_CONNECTOR)
    with pytest.raises(BackendUnavailableError, match=r"no longer ships.*#44854.*use 'nixl' or 'auto'"):
        resolve_backend("nccl", "gpu")


def test_side_channel_ports_come_from_outside_the_ephemeral_range_and_skip_taken_ones():
    high = ephemeral_low()
    ports = {allocate_port() for _ in range(20)}
    assert all(PORT_RANGE_LOW <= p < high for p in ports), (ports, high)
    assert len(ports) > 1  # drawn at random: workers starting together differ

    # The first port drawn is taken: the next one is given.
    first = random.Random(7).sample(range(PORT_RANGE_LOW, high), 1)[0]
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as held:
        held.bind(("127.0.0.1", first))
        held.listen()
        port = allocate_port(rng=random.Random(7))
    assert port != first and PORT_RANGE_LOW <= port < high


def test_the_ephemeral_range_is_read_from_the_kernel_else_the_default(tmp_path):
    f = tmp_path / "ip_local_port_range"
    f.write_text("40000\t60999\n")
    assert ephemeral_low(str(f)) == 40000
    assert ephemeral_low(str(tmp_path / "missing")) == 32768

"""The vLLM plugin gives NIXL's progress thread a sleep instead of a busy spin."""
from __future__ import annotations

import sys

import pytest

pytest.importorskip("nixl")


def test_agents_get_the_progress_delay(monkeypatch):
    from nixl._api import nixl_agent

    from pd_serve import vllm_plugin

    monkeypatch.setenv(vllm_plugin.DELAY_ENV, "250")
    bind = sys.modules[nixl_agent.__module__].nixlBind
    monkeypatch.setattr(bind, "nixlAgent", bind.nixlAgent)  # restored after the test
    vllm_plugin.register()
    vllm_plugin.register()  # vLLM may load plugins more than once in a process
    config = bind.nixlAgentConfig()
    config.useProgThread = True
    config.pthrDelay = 0
    agent = bind.nixlAgent("pd-serve-plugin-test", config)
    assert config.pthrDelay == 250 and agent is not None


@pytest.mark.parametrize("bind, cores", [("1", [1]), ("0-3", [0, 1, 2, 3]), ("0,2-3", [0, 2, 3]),
                                         ("auto", None), ("nobind", None), ("0|1", None), (None, None)])
def test_bound_cores_reads_vllm_binding_values(bind, cores):
    from pd_serve.vllm_plugin import bound_cores
    assert bound_cores(bind) == cores


def test_kv_transfer_core_reservation_stays_on_the_engine_core(monkeypatch):
    """vLLM's NIXL worker pins its calling thread (the engine's compute thread) to
    `max(node)` for each node discover_numa_topology returns: that must be this engine's core."""
    cpu = pytest.importorskip("vllm.platforms.cpu")
    from pd_serve import vllm_plugin

    monkeypatch.setattr(cpu.CpuPlatform, "discover_numa_topology",
                        cpu.CpuPlatform.__dict__["discover_numa_topology"])  # restored after
    monkeypatch.setenv(vllm_plugin.BIND_ENV, "0")
    vllm_plugin.register()
    vllm_plugin.register()
    assert [max(node) for node in cpu.CpuPlatform.discover_numa_topology()] == [0]

"""The vLLM plugin gives NIXL's progress thread a sleep instead of a busy spin, keeps the
KV-transfer core on the engine's own, and keeps tqdm from making a named semaphore."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from pd_serve import vllm_plugin

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


TQDM_IN_A_FRESH_PROCESS = """
import glob, json
from pd_serve import vllm_plugin
from tqdm import tqdm
from tqdm.std import TqdmDefaultWriteLock
before = set(glob.glob('/dev/shm/sem.mp-*'))
vllm_plugin._no_tqdm_semaphore()
for _ in tqdm(range(3), disable=False):  # the bar an engine's model loader draws
    pass
print(json.dumps({"mp_lock": TqdmDefaultWriteLock.mp_lock is not None,
                  "new_semaphores": sorted(set(glob.glob('/dev/shm/sem.mp-*')) - before)}))
"""


@pytest.mark.parametrize("keep", [False, True])
def test_an_engines_progress_bar_makes_no_named_semaphore_unless_asked(keep):
    # In a fresh interpreter: tqdm's lock is made once per process, by its first bar.
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    env.pop(vllm_plugin.TQDM_MP_LOCK_ENV, None)
    if keep:
        env[vllm_plugin.TQDM_MP_LOCK_ENV] = "1"
    done = subprocess.run([sys.executable, "-c", TQDM_IN_A_FRESH_PROCESS], capture_output=True, text=True,
                          env=env, timeout=60, check=True)
    out = json.loads(done.stdout.strip().splitlines()[-1])
    assert out["mp_lock"] is keep
    if not keep:
        assert out["new_semaphores"] == []

"""A vLLM general plugin (loaded by vLLM in every engine and worker process): two fixes for
NIXL's place on the CPU.

1. NIXL progress thread with a sleep instead of a busy spin. NIXL's Python API hard-codes
   `pthrDelay = 0`, so with vLLM's NixlConnector every engine keeps one thread spinning at 100%
   of a core even when idle (measured here: 299 of 300 ticks in 3 s). On a GPU node that is one
   host core per engine; on a CPU node it is the very core the engine computes on, and two
   engines on two cores starve everything else. With a delay of
   `PD_SERVE_NIXL_PROGRESS_DELAY_US` (default 100 us) between progress passes the thread
   sleeps; transfers still progress, at most that much later. Set it to 0 for NIXL's own
   behaviour.

2. The engine's compute thread stays on its own cores. On CPU, vLLM's NIXL worker "reserves"
   the last core of each NUMA node for KV transfer by calling `sched_setaffinity(0, ...)` from
   the engine's main thread, which is the thread that runs the model: every engine on a node
   ends up computing on that one core (seen here: both engines of a 2-core deployment on core 1,
   core 0 idle; real KV transfers slowed 2-5x as the two engines collided). When
   pd-serve pins an engine (`VLLM_CPU_OMP_THREADS_BIND`), the reserved cores are that engine's
   own, so the call keeps the thread where the binding put it. `PD_SERVE_KEEP_ENGINE_CORES=0`
   leaves vLLM's behaviour (for side-by-side measurements).

3. No named semaphore for tqdm's progress bars. vLLM's model loader draws a tqdm bar in each
   engine's worker process, and tqdm's first bar in a process makes a `multiprocessing.RLock`:
   a named semaphore in /dev/shm (sem.mp-*), registered with the resource tracker of the
   engine's actor, which removes it when the actor stops. A killed actor's tracker dies with it
   and the semaphore stays, one per killed worker (2026-12-03: one per run of the serving-core
   tests, whose last tests kill a worker). The lock only keeps bars of several processes from
   interleaving on one terminal; an engine's bars go to its log. Without it tqdm keeps its
   thread lock. `PD_SERVE_TQDM_MP_LOCK=1` leaves tqdm's behaviour.
"""
from __future__ import annotations

import logging
import os
import sys

logger = logging.getLogger(__name__)
DELAY_ENV = "PD_SERVE_NIXL_PROGRESS_DELAY_US"
DEFAULT_DELAY_US = 100
BIND_ENV = "VLLM_CPU_OMP_THREADS_BIND"
KEEP_CORES_ENV = "PD_SERVE_KEEP_ENGINE_CORES"
TQDM_MP_LOCK_ENV = "PD_SERVE_TQDM_MP_LOCK"


def register() -> None:
    """vLLM calls this in each of its processes; patching twice is harmless."""
    _patch_progress_delay()
    _keep_kv_transfer_on_engine_cores()
    _no_tqdm_semaphore()


def _no_tqdm_semaphore() -> None:
    if os.environ.get(TQDM_MP_LOCK_ENV) == "1":
        return
    try:
        from tqdm.std import TqdmDefaultWriteLock
    except ImportError:
        return
    if not hasattr(TqdmDefaultWriteLock, "mp_lock"):  # tqdm makes it only where it is missing
        TqdmDefaultWriteLock.mp_lock = None


def bound_cores(bind: str | None) -> list[int] | None:
    """The cores of a `VLLM_CPU_OMP_THREADS_BIND` value ("3", "0-3", "0,2-3"); None where it
    binds nothing we can read ("auto", "nobind", one list per rank split by "|")."""
    if not bind or bind in ("auto", "nobind") or "|" in bind:
        return None
    cores: list[int] = []
    for part in bind.split(","):
        lo, _, hi = part.partition("-")
        cores.extend(range(int(lo), int(hi or lo) + 1))
    return cores


def _keep_kv_transfer_on_engine_cores() -> None:
    if os.environ.get(KEEP_CORES_ENV, "1") == "0":
        return
    cores = bound_cores(os.environ.get(BIND_ENV))
    if cores is None:
        return
    try:
        from vllm.platforms.cpu import CpuPlatform
    except ImportError:  # not vLLM's CPU build: nothing to patch
        return
    if getattr(CpuPlatform.discover_numa_topology, "_pd_serve_patched", False):
        return

    def engine_cores_only(cls) -> list[list[int]]:
        return [cores]  # one "node" whose last core is one of this engine's own

    engine_cores_only._pd_serve_patched = True
    CpuPlatform.discover_numa_topology = classmethod(engine_cores_only)
    logger.debug("NIXL KV-transfer core kept on the engine's cores %s", cores)


def _patch_progress_delay() -> None:
    delay_us = int(os.environ.get(DELAY_ENV, DEFAULT_DELAY_US))
    if delay_us <= 0:
        return
    try:
        from nixl._api import nixl_agent
    except ImportError:  # no NIXL here: nothing to patch
        return
    bind = getattr(sys.modules[nixl_agent.__module__], "nixlBind", None)
    if bind is None or getattr(bind.nixlAgent, "_pd_serve_patched", False):
        return
    original = bind.nixlAgent

    def agent_with_progress_delay(name, config, *args, **kwargs):
        if getattr(config, "useProgThread", False) and not getattr(config, "pthrDelay", 1):
            config.pthrDelay = delay_us
        return original(name, config, *args, **kwargs)

    agent_with_progress_delay._pd_serve_patched = True
    bind.nixlAgent = agent_with_progress_delay
    logger.debug("NIXL progress thread delay set to %d us", delay_us)

"""Probe a link between two fresh local processes, without Ray.

For a node before any worker exists, and for GPU checks on a lent machine: the source process
hosts a `ProbeEndpoint` and waits; the reader process runs the probe against it and returns the
result. Each process gets `env` before NIXL starts (UCX reads its environment once per process),
so transport choices can be compared run against run.
"""
from __future__ import annotations

import logging
import multiprocessing as mp
import os
import traceback
from typing import Any, Mapping

from transfer.nixl_endpoint import AgentOptions
from transfer.probe import ProbeSettings
from transfer.probe_layout import BlockLayout
from transfer.probe_records import PairProbeResult

logger = logging.getLogger(__name__)


def _apply_env(env: Mapping[str, str | None]) -> None:
    for key, value in env.items():
        if value is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = value


def _serve_source(conn: Any, layout: BlockLayout, device: str, options: AgentOptions,
                  env: Mapping[str, str | None]) -> None:
    try:
        _apply_env(env)
        from transfer.nixl_endpoint import ProbeEndpoint

        endpoint = ProbeEndpoint(layout, device, "probe-source", options)
        conn.send(("ok", endpoint.info()))
    except Exception:
        conn.send(("error", traceback.format_exc()))
        return
    # Stay alive (and, without a NIXL progress thread, make progress) until the reader is done:
    # closing earlier would pull the memory from under its READs.
    while not conn.poll(0.0 if not options.enable_prog_thread else 1.0):
        if not options.enable_prog_thread:
            endpoint.agent.get_new_notifs()
    endpoint.close()


def _run_reader(conn: Any, layout: BlockLayout, device: str, options: AgentOptions,
                env: Mapping[str, str | None], source_info: Any, settings: ProbeSettings,
                prefill_id: str, decode_id: str) -> None:
    try:
        _apply_env(env)
        from transfer.nixl_endpoint import ProbeEndpoint
        from transfer.probe import probe_endpoints

        reader = ProbeEndpoint(layout, device, "probe-reader", options)
        result = probe_endpoints(source_info, reader, prefill_id, decode_id, settings)
        conn.send(("ok", result))
    except Exception:
        conn.send(("error", traceback.format_exc()))


def probe_between_processes(layout: BlockLayout, device: str = "cpu",
                            reader_device: str | None = None,
                            settings: ProbeSettings = ProbeSettings(),
                            options: AgentOptions = AgentOptions(),
                            env: Mapping[str, str | None] | None = None,
                            startup_timeout_s: float = 120.0,
                            prefill_id: str = "source", decode_id: str = "reader"
                            ) -> PairProbeResult:
    """Probe from a source process on `device` to a reader process on `reader_device`.

    `env` entries are set (None: unset) in both processes before NIXL starts. Both processes
    are killed if they overrun `startup_timeout_s` plus the probe budget.
    """
    env = dict(env or {})
    ctx = mp.get_context("spawn")  # fresh interpreters: no inherited UCX or CUDA state
    source_conn, source_child = ctx.Pipe()
    reader_conn, reader_child = ctx.Pipe()
    source = ctx.Process(target=_serve_source, daemon=True,
                         args=(source_child, layout, device, options, env))
    processes = [source]
    source.start()
    try:
        source_info = _receive(source_conn, startup_timeout_s, "source")
        reader = ctx.Process(target=_run_reader, daemon=True, args=(
            reader_child, layout, reader_device or device, options, env, source_info, settings,
            prefill_id, decode_id))
        processes.append(reader)
        reader.start()
        return _receive(reader_conn, startup_timeout_s + settings.max_seconds, "reader")
    finally:
        source_conn.send("done")
        for process in processes:
            process.join(10)
            if process.is_alive():
                logger.warning("probe process %s did not exit; killing it", process.pid)
                process.kill()


def _receive(conn: Any, timeout_s: float, side: str) -> Any:
    if not conn.poll(timeout_s):
        raise TimeoutError(f"probe {side} process gave no answer within {timeout_s:.0f} s")
    status, payload = conn.recv()
    if status != "ok":
        raise RuntimeError(f"probe {side} process failed:\n{payload}")
    return payload

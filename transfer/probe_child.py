"""`ChildEndpoint`: a `ProbeEndpoint` run in a child process of its host, driven over a pipe.

A pd-serve worker actor is the process that serves: its event loop carries every request and
token of its engine. Hosting the link probe's NIXL agent there left NIXL's UCX backend and UCX
itself mapped in it for good after start-up, `libucm` among them, the library with which UCX
hooks a process's mmap, munmap, brk and the like (seen in /proc/<pid>/maps of hybrid's workers,
2026-12-03; without the probe, only NIXL's core library, which vLLM's front-end loads). In the
rate sweeps of runs 37-46 (20 rounds), the workers of the two deployments that probe their links
at start-up, adaptive and hybrid, had 10 held stalls of 0.5-2.5 s while serving (the process
asleep, its threads waiting in the kernel in mmap, munmap, mprotect or brk; docs/MEASUREMENTS.md,
"What holds a worker's process"); the workers of colocated and disaggregated, the same engines
and KV connector without the start-up probe, had none in as many rounds. That UCX's hooks cause
the stalls is not proven; that they do not belong in the serving process is enough. So the
probe runs in a child process, on the same node with the same devices (it inherits the actor's
environment, CUDA_VISIBLE_DEVICES included), which ends with `close()`.

The child is started with `spawn` (a fresh interpreter: no fork of a process holding Ray's and
vLLM's threads). Every call is answered or times out; a child that dies or hangs is killed and
the call raises. It may be given environment variables to set before NIXL starts (UCX reads its
environment once per process): `transfer.probe_processes` compares UCX transports that way.
"""
from __future__ import annotations

import logging
import multiprocessing as mp
import os
import traceback
from typing import Any, Mapping

from transfer.probe_layout import BlockLayout
from transfer.probe_records import EndpointInfo

logger = logging.getLogger(__name__)

START_TIMEOUT_S = 120.0  # a fresh interpreter importing NIXL (and torch) on a busy 2-core host
CALL_TIMEOUT_S = 300.0   # longer than any probe sweep's own budget (tens of seconds)
CLOSE_TIMEOUT_S = 10.0
# The ProbeEndpoint methods a host may call through the pipe (`info` is answered at start-up).
METHODS = frozenset({"connect", "disconnect", "verify", "time_reads", "time_copies"})


class ChildEndpointError(RuntimeError):
    """The child failed, hung, or raised; the message carries its traceback."""


def _apply_env(env: Mapping[str, str | None]) -> None:
    for key, value in env.items():
        if value is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = value


def _serve(conn: Any, layout: BlockLayout, device: str, name: str, options: Any,
           env: Mapping[str, str | None]) -> None:
    """The child: make the endpoint, then answer (method, args, kwargs) until ("close",)."""
    try:
        _apply_env(env)
        from transfer.nixl_endpoint import ProbeEndpoint

        endpoint = ProbeEndpoint(layout, device, name, options)
        conn.send(("ok", endpoint.info()))
    except BaseException:
        conn.send(("error", traceback.format_exc()))
        return
    try:
        while True:
            # An agent without a progress thread progresses only when called: between calls,
            # keep it going, or a reader's READ from it may never complete.
            while not options.enable_prog_thread and not conn.poll(0.0):
                endpoint.agent.get_new_notifs()
            message = conn.recv()
            if message[0] == "close":
                break
            method, args, kwargs = message
            try:
                conn.send(("ok", getattr(endpoint, method)(*args, **kwargs)))
            except BaseException:
                conn.send(("error", traceback.format_exc()))
    except EOFError:  # the host went away: close and end
        pass
    finally:
        endpoint.close()


class ChildEndpoint:
    """The `ProbeEndpoint` API (info, connect, disconnect, verify, time_reads, time_copies,
    close), each call run by the child."""

    def __init__(self, layout: BlockLayout, device: str = "cpu", name: str = "probe",
                 options: Any = None, env: Mapping[str, str | None] | None = None,
                 start_timeout_s: float = START_TIMEOUT_S) -> None:
        """`env`: set in the child (None: unset) before NIXL starts; otherwise it inherits ours."""
        from transfer.nixl_endpoint import AgentOptions  # NIXL itself loads only with an endpoint

        ctx = mp.get_context("spawn")
        self._conn, child_conn = ctx.Pipe()
        self._proc = ctx.Process(target=_serve, name=f"pd-serve-{name}", daemon=True,
                                 args=(child_conn, layout, device, name, options or AgentOptions(),
                                       dict(env or {})))
        self._proc.start()
        child_conn.close()  # the child's end lives in the child only: EOF here if it dies
        self.layout = layout
        self.device = device
        self._closed = False
        self._info: EndpointInfo = self._answer("start", start_timeout_s)
        self.agent_name = self._info.agent_name
        logger.info("probe endpoint %s runs in child process %d", self.agent_name, self._proc.pid)

    @property
    def pid(self) -> int | None:
        return self._proc.pid

    def _answer(self, what: str, timeout_s: float) -> Any:
        try:
            ready = self._conn.poll(timeout_s)
            status, payload = self._conn.recv() if ready else ("timeout", None)
        except (EOFError, OSError):
            status, payload = "died", None
        if status == "ok":
            return payload
        self._kill()
        if status == "error":
            raise ChildEndpointError(f"probe child {what} failed:\n{payload}")
        raise ChildEndpointError(f"probe child {what}: "
                                 + (f"no answer in {timeout_s:.0f} s" if status == "timeout"
                                    else f"the child died (exit code {self._proc.exitcode})"))

    def _call(self, method: str, *args: Any, **kwargs: Any) -> Any:
        if method not in METHODS:
            raise AttributeError(f"a probe endpoint has no method {method!r}")
        if self._closed:
            raise ChildEndpointError(f"probe endpoint {self.agent_name} is closed")
        try:
            self._conn.send((method, args, kwargs))
        except (BrokenPipeError, OSError) as error:
            self._kill()
            raise ChildEndpointError(f"probe child {method}: the child is gone ({error})") from None
        return self._answer(method, CALL_TIMEOUT_S)

    def info(self) -> EndpointInfo:
        return self._info

    def connect(self, remote: EndpointInfo) -> str:
        return self._call("connect", remote)

    def disconnect(self, remote_agent: str) -> None:
        self._call("disconnect", remote_agent)

    def verify(self, remote_agent: str, *args: Any, **kwargs: Any) -> bool:
        return self._call("verify", remote_agent, *args, **kwargs)

    def time_reads(self, remote_agent: str, *args: Any, **kwargs: Any) -> list:
        return self._call("time_reads", remote_agent, *args, **kwargs)

    def time_copies(self, *args: Any, **kwargs: Any) -> list:
        return self._call("time_copies", *args, **kwargs)

    def close(self) -> None:
        """Close the endpoint in the child and end the child (killed if it does not end)."""
        if self._closed:
            return
        self._closed = True
        try:
            self._conn.send(("close",))
        except (BrokenPipeError, OSError):
            pass
        self._proc.join(CLOSE_TIMEOUT_S)
        self._kill()

    def _kill(self) -> None:
        self._closed = True
        if self._proc.is_alive():
            self._proc.kill()
            self._proc.join(CLOSE_TIMEOUT_S)
        self._conn.close()

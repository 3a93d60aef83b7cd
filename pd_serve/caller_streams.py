"""A caller's end of the router's one stream per caller, for callers on the Ray driver.

The router sends each caller (a frontend actor, a `Deployment` in a driver process) the items
of all its requests on one Ray stream, a batch per turn of its loop (output_streams.py: Ray's
CPU is per stream item). A frontend actor reads it on its own event loop (`OutputStreams`). A
`Deployment` serves plain threads (the benchmarks' client sends each request from a thread of
its own), so this runs the same reader on an event loop in a daemon thread and hands each
request's items to its thread through a queue.
"""
from __future__ import annotations

import asyncio
import os
import queue
import threading
import uuid
from typing import Any, AsyncIterator, Iterator

from pd_serve.output_streams import OutputStreams
from pd_serve.request import GenerateRequest

ROUTER = "router"  # the one stream OutputStreams reads here


def is_last_item(item: dict) -> bool:
    """A request's last item on the router's stream: its result."""
    return item.get("type") == "result"


def router_streams(router: Any, caller: str) -> OutputStreams:
    """`OutputStreams` over `router`'s stream for `caller`; a request left early is cancelled."""

    async def open_stream(_: str) -> AsyncIterator[list]:
        async for ref in router.outputs.options(num_returns="streaming").remote(caller):
            yield await ref

    return OutputStreams(open_stream, lambda _, rid: router.cancel.remote(rid), is_last=is_last_item)


def new_caller_id(kind: str) -> str:
    return f"{kind}-{os.getpid()}-{uuid.uuid4().hex[:8]}"


class CallerStreams:
    """Requests to `router` from any thread: `stream(req)` yields the request's items."""

    def __init__(self, router: Any):
        self.router = router
        self.caller = new_caller_id("driver")
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="pd-serve-router-stream",
                                        daemon=True)
        self._thread.start()
        self._streams = router_streams(router, self.caller)

    def stream(self, req: GenerateRequest, timeout_s: float | None = None) -> Iterator[dict]:
        """The router's items for `req` (`request_id` set) as they come. Raises what the request
        raised, TimeoutError when no item came for `timeout_s`. Leaving early cancels it."""
        items: queue.Queue = queue.Queue()

        async def read() -> None:
            try:
                async for item in self._streams.stream(ROUTER, req.request_id,
                                                       lambda: self.router.submit.remote(self.caller, req)):
                    items.put((True, item))
                items.put((True, None))
            except BaseException as err:  # its thread raises it; a cancel here is the thread leaving
                items.put((False, err))
                if isinstance(err, asyncio.CancelledError):
                    raise

        reader = asyncio.run_coroutine_threadsafe(read(), self._loop)
        try:
            while True:
                try:
                    ok, item = items.get(timeout=timeout_s)
                except queue.Empty:
                    raise TimeoutError(f"request {req.request_id}: no output for {timeout_s} s") from None
                if not ok:
                    raise item
                if item is None:
                    return
                yield item
        finally:
            reader.cancel()  # done already, or the caller left: the router cancels it

    def close(self, timeout_s: float = 5.0) -> None:
        """Stop reading, then the loop and its thread (nothing left pending at exit)."""
        if not self._loop.is_running():
            return
        try:
            asyncio.run_coroutine_threadsafe(self._streams.aclose(), self._loop).result(timeout_s)
        finally:
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(timeout_s)

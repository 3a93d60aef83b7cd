"""Many requests' items over one Ray stream: from a worker to the router, from the router to a caller.

A Ray streaming generator costs CPU for every item it carries, whatever the item holds.
Measured here (`python -m bench.ray_stream_cost`, Ray 2.60, this 2-core host, 2026-12-02; every
stream woken by the same 5 ms tick): with a stream per request, 4 and 8 requests cost 0.32 and
0.25 ms of CPU per token to send and 0.47 and 0.39 ms to read; one stream carrying all of them,
4 and 8 tokens an item, 0.12 and 0.07 ms to send and 0.18 and 0.10 ms to read. A GPU engine
stepping 64 requests every 30 ms streams 2,000 tokens a second: a core's worth of Ray per hop
with a stream per request, a few percent of one with a stream per worker.

So a worker puts each request's outputs in its `Outbox` and sends them to the router on one
stream, a list per turn of its event loop: vLLM's front-end hands out a whole engine step's
outputs at once, so a list holds one output of every request the step advanced. The router
reads that stream once per worker (`OutputStreams`) and gives each request its own items.
The router does the same for its callers (a frontend actor, a `Deployment` in a driver): one
stream per caller carries the items of all its requests (`Router.submit` / `Router.outputs`,
caller_streams.py).

On the CPU deployments the batches are small (2.9 outputs on average on the disaggregated
decode worker at 7 req/s), and the request path's CPU per token did not change beyond the
noise of this host (`bench.cpu_contention`, before and after, side by side: router 0.95 and
0.82 ms, decode worker's actor 0.69 and 0.72 ms per token at 7 req/s).

What outlives the call that starts it (a worker's stream pump, a submitted request, an abort
sent while a request unwinds) runs in a context of its own (`detached`). Ray makes a remote call
the child of the actor call whose asyncio context it is made in, and a recursive `ray.cancel`
(Ray's default) cancels the children too: a pump opened by one request would end with it, and
the abort a cancelled request sends its worker would itself be cancelled, leaving the request
running there (2 of 4 runs of the leaving test, 2026-12-02).
"""
from __future__ import annotations

import asyncio
import contextvars
from typing import Any, AsyncIterator, Awaitable, Callable

Batch = list[tuple[str, dict]]  # (request id, output item), in the order they were put


def detached(coro) -> asyncio.Task:
    """`coro` as a task of no caller's: Ray makes its remote calls children of none."""
    return asyncio.get_running_loop().create_task(coro, context=contextvars.Context())


class WorkerRequestError(RuntimeError):
    """A request failed inside its worker (the worker itself lives on)."""


class GaveUp(Exception):
    """The reader stopped waiting for a request's items (`OutputStreams.stream`'s `give_up`
    said why); the request was aborted on its worker."""


class Outbox:
    """The worker's end: outputs waiting for its one stream to the router."""

    def __init__(self) -> None:
        self._items: Batch = []
        self._ready = asyncio.Event()
        self._reader: object | None = None
        self.num_items = 0  # put, and sent in `num_batches` batches
        self.num_batches = 0

    def put(self, request_id: str, item: dict) -> None:
        self._items.append((request_id, item))
        self._ready.set()

    @property
    def is_read(self) -> bool:
        """A reader is taking the batches."""
        return self._reader is not None

    async def batches(self) -> AsyncIterator[Batch]:
        """What was put since the last batch, as it comes; forever. A newer reader takes over
        (a router that opens the stream again) and this one ends, so no output is split
        between two readers."""
        self._reader = me = object()
        try:
            while True:
                await self._ready.wait()
                # The requests of the same engine step are woken one after another in this turn
                # of the loop: one more turn lets all of them put their outputs in this batch.
                await asyncio.sleep(0)
                if self._reader is not me:
                    return
                self._ready.clear()
                batch, self._items = self._items, []
                if batch:
                    self.num_items += len(batch)
                    self.num_batches += 1
                    yield batch
        finally:
            if self._reader is me:
                self._reader = None


class Running:
    """The sending end's requests, each a task putting its items in an `Outbox`: a worker's
    submitted requests, the router's for its callers. A request that fails puts
    `failure_item(request_id, error)` last; one cancelled (its reader left) puts nothing."""

    def __init__(self, failure_item: Callable[[str, Exception], dict]):
        self._failure_item = failure_item
        self._tasks: dict[str, tuple[Any, asyncio.Task]] = {}  # request id -> (owner, task)

    def __contains__(self, request_id: str) -> bool:
        return request_id in self._tasks

    def __len__(self) -> int:
        return len(self._tasks)

    def start(self, request_id: str, items: AsyncIterator[dict], outbox: Outbox, owner: Any = None) -> None:
        """Run `items` (the request's, not yet started) into `outbox`; the caller has checked
        that `request_id` is not running already."""
        assert request_id not in self._tasks, request_id
        task = detached(self._run(request_id, items, outbox))  # it outlives the submitting call
        self._tasks[request_id] = (owner, task)

    async def _run(self, request_id: str, items: AsyncIterator[dict], outbox: Outbox) -> None:
        try:
            async for item in items:
                outbox.put(request_id, item)
        except asyncio.CancelledError:  # its reader left: nobody waits for its items
            raise
        except Exception as err:
            outbox.put(request_id, self._failure_item(request_id, err))
        finally:
            self._tasks.pop(request_id, None)

    def cancel(self, request_id: str) -> bool:
        """Cancel it if it runs (False: it does not)."""
        if request_id not in self._tasks:
            return False
        self._tasks[request_id][1].cancel()
        return True

    def cancel_owned_by(self, owner: Any) -> None:
        for who, task in list(self._tasks.values()):
            if who == owner:
                task.cancel()


class OutputStreams:
    """The router's end: one pump per worker reading its stream, a queue per request.

    `open_stream(worker_id)`: the worker's batches (an async iterator; opening it again takes the
    stream over). `abort(worker_id, request_id)`: stop a request the caller left, without
    waiting (fire and forget). `is_last(item)`: the item that ends a request (a worker's
    `finished` output by default). An item {"error": e} ends it too and raises e where e is an
    exception (as the router sends them), else a WorkerRequestError saying e."""

    def __init__(self, open_stream: Callable[[str], AsyncIterator[Batch]],
                 abort: Callable[[str, str], Any],
                 is_last: Callable[[dict], bool] = lambda item: bool(item.get("finished"))):
        self._open = open_stream
        self._abort = abort
        self._is_last = is_last
        self._queues: dict[tuple[str, str], asyncio.Queue] = {}
        self._pumps: dict[str, asyncio.Task] = {}

    def num_streaming(self, worker_id: str | None = None) -> int:
        """Requests waiting for outputs (from `worker_id`, else from any worker)."""
        return sum(1 for w, _ in self._queues if worker_id is None or w == worker_id)

    async def stream(self, worker_id: str, request_id: str, submit: Callable[[], Awaitable[Any]],
                     give_up: Callable[[], str | None] | None = None,
                     check_s: float = 0.05) -> AsyncIterator[dict]:
        """Start the request (`submit()`, the worker's submit call) and yield its items up to the
        one that finishes it. A request the caller leaves before then is aborted on the worker;
        a worker whose stream fails raises that failure in each of its requests. `give_up`,
        asked every `check_s` while an item is awaited: a reason to stop waiting (the request
        is aborted on the worker and GaveUp(reason) raised), else None."""
        key = (worker_id, request_id)
        if key in self._queues:
            raise ValueError(f"request {request_id} is already running on {worker_id}")
        queue: asyncio.Queue = asyncio.Queue()
        self._queues[key] = queue
        self._ensure_pump(worker_id)
        submitted = finished = False
        try:
            try:
                await submit()
            except asyncio.CancelledError:
                submitted = True  # the call may have reached the worker: abort it there too
                raise
            submitted = True
            while True:
                item = await (queue.get() if give_up is None else self._get_unless(queue, give_up, check_s))
                if isinstance(item, BaseException):
                    submitted = False  # the worker's stream failed: nothing there to abort
                    raise item
                if "error" in item:
                    finished = True  # it ended where it ran
                    err = item["error"]
                    if isinstance(err, BaseException):
                        raise err
                    raise WorkerRequestError(f"request {request_id} on {worker_id}: {err}")
                finished = self._is_last(item)
                yield item
                if finished:
                    return
        finally:
            del self._queues[key]
            if submitted and not finished:
                contextvars.Context().run(self._abort, worker_id, request_id)  # not cancelled with us

    @staticmethod
    async def _get_unless(queue: asyncio.Queue, give_up: Callable[[], str | None], check_s: float) -> Any:
        """The queue's next item, unless `give_up` gives a reason first (GaveUp). One getter
        waits throughout: cancelling a get on each check could drop an item that came meanwhile."""
        getter = asyncio.ensure_future(queue.get())
        try:
            while True:
                done, _ = await asyncio.wait({getter}, timeout=check_s)
                if done:
                    return getter.result()
                if (reason := give_up()) is not None:
                    raise GaveUp(reason)
        finally:
            if not getter.done():
                getter.cancel()

    def _ensure_pump(self, worker_id: str) -> None:
        task = self._pumps.get(worker_id)
        if task is None or task.done():
            self._pumps[worker_id] = detached(self._pump(worker_id))  # the worker's, not this request's

    async def _pump(self, worker_id: str) -> None:
        failure: BaseException
        try:
            async for batch in self._open(worker_id):
                for request_id, item in batch:
                    queue = self._queues.get((worker_id, request_id))
                    if queue is not None:  # else the caller has left it
                        queue.put_nowait(item)
            failure = ConnectionError(f"worker {worker_id}'s output stream ended")
        except asyncio.CancelledError:
            failure = ConnectionError(f"worker {worker_id}'s output stream was cancelled")
        except Exception as err:  # the worker died: each of its requests raises it
            failure = err
        for (w, _), queue in list(self._queues.items()):
            if w == worker_id:
                queue.put_nowait(failure)

    async def aclose(self) -> None:
        """Stop reading every stream, and wait until each reader has stopped."""
        tasks = list(self._pumps.values())
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

"""One stream per worker under Ray's own cancellation (pd_serve/output_streams.py), with actors
that stand in for a worker and the router: no engine, so it runs in seconds.

Ray makes a remote call the child of the actor call whose asyncio context it is made in, and
`ray.cancel(ref)` (recursive by default) cancels the children too. The worker's stream is opened
by whichever request comes first, and the abort is sent while a cancelled request unwinds: both
must be nobody's children, or one caller's cancel ends every request on that worker's stream and
leaves its own request running on the worker."""
from __future__ import annotations

import asyncio
import time

import pytest
import ray

from pd_serve.output_streams import Outbox, OutputStreams, Running

pytestmark = pytest.mark.integration

TOKENS = 40
TOKEN_S = 0.05  # a request streams for 2 s


@ray.remote
class TokenWorker:
    """Streams TOKENS numbered items per submitted request, all on one stream."""

    def __init__(self) -> None:
        self.outbox = Outbox()
        self.running = Running(lambda rid, err: {"error": str(err)})
        self.aborted: list[str] = []

    async def _tokens(self, rid: str):
        for n in range(TOKENS):
            await asyncio.sleep(TOKEN_S)
            yield {"n": n, "finished": n == TOKENS - 1}

    async def submit(self, rid: str) -> None:
        self.running.start(rid, self._tokens(rid), self.outbox)

    async def outputs(self):
        async for batch in self.outbox.batches():
            yield batch

    async def abort(self, rid: str) -> None:
        self.aborted.append(rid)
        self.running.cancel(rid)

    async def state(self) -> dict:
        return {"running": len(self.running), "aborted": self.aborted}


@ray.remote
class Relay:
    """The router's part: each call streams one request's items from the worker."""

    def __init__(self, worker) -> None:
        self.worker = worker
        self.streams = OutputStreams(self._open, self._abort)

    async def _open(self, wid: str):
        async for ref in self.worker.outputs.options(num_returns="streaming").remote():
            yield await ref

    def _abort(self, wid: str, rid: str) -> None:
        self.worker.abort.remote(rid)

    async def generate(self, rid: str):
        async for item in self.streams.stream("w0", rid, lambda: self.worker.submit.remote(rid)):
            yield item


@pytest.fixture(scope="module")
def ray_cluster():
    ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield
    ray.shutdown()


@pytest.mark.timeout(120)
def test_a_recursive_cancel_stops_its_own_request_only(ray_cluster):
    worker = TokenWorker.remote()
    relay = Relay.remote(worker)
    # "first" opens the worker's stream (the first request on it); "other" shares that stream.
    first = relay.generate.options(num_returns="streaming").remote("first")
    assert ray.get(next(first))["n"] == 0
    other = relay.generate.options(num_returns="streaming").remote("other")
    assert ray.get(next(other))["n"] in (0, 1)
    ray.cancel(first)  # Ray's default: recursive

    # The other request streams on to its end: the shared stream was not cancelled with "first".
    rest = [ray.get(ref)["n"] for ref in other]
    assert rest[-1] == TOKENS - 1, rest
    # And "first" was aborted on the worker: nothing is left running there.
    deadline = time.time() + 10
    while (state := ray.get(worker.state.remote()))["running"] and time.time() < deadline:
        time.sleep(0.1)
    assert state == {"running": 0, "aborted": ["first"]}, state

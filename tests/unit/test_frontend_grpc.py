"""The gRPC front door and the SDK against a fake deployment over a real loopback socket (no
Ray): results as the in-process API gives them, INVALID_ARGUMENT / UNAUTHENTICATED /
RESOURCE_EXHAUSTED as named exceptions, deadlines, cancellation, retries on UNAVAILABLE."""
from __future__ import annotations

import asyncio
import random
import socket
import threading
import time

import grpc
import pytest

import pd_serve
from pd_serve.client import RetryPolicy
from pd_serve.frontend.grpc_server import GrpcServer
from pd_serve.request import InvalidRequestError

from .frontend_fakes import OUTPUT_IDS, FakeBackend

TOKEN = "s3cret"


class LoopThread:
    """An event loop in a thread: where the server lives while the test thread is the client."""

    def __init__(self):
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()

    def run(self, coro, timeout_s: float = 10.0):
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout_s)

    def close(self):
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(5)


@pytest.fixture(scope="module")
def loop():
    lt = LoopThread()
    yield lt
    lt.close()


@pytest.fixture
def backend():
    return FakeBackend()


@pytest.fixture
def address(loop, backend):
    server = GrpcServer(backend, "127.0.0.1", 0, token=TOKEN)
    port = loop.run(server.start())
    yield f"127.0.0.1:{port}"
    loop.run(server.stop())


@pytest.fixture
def client(address):
    with pd_serve.Client(address, token=TOKEN) as c:
        yield c


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait_for(predicate, timeout_s: float = 5.0) -> bool:
    deadline = time.time() + timeout_s
    while time.time() < deadline:
        if predicate():
            return True
        time.sleep(0.02)
    return predicate()


def test_generate_returns_the_result_record(client, backend):
    r = client.generate(prompt_token_ids=[1, 2, 3], max_tokens=5, route="colocated", seed=3)
    assert isinstance(r, pd_serve.GenerateResult)
    assert r.token_ids == OUTPUT_IDS[:5] and r.finish_reason == "length"
    assert r.prefill_worker is None and r.kv_transfer_s is None and r.predicted_ttft_s == 0.01
    req = backend.requests[-1]
    assert req.prompt_token_ids == (1, 2, 3) and req.route == "colocated" and req.seed == 3


def test_stream_yields_the_in_process_items(client):
    items = list(client.stream(prompt="hi", max_tokens=4))
    assert [i["type"] for i in items] == ["token"] * 4 + ["result"]
    assert [t for i in items[:-1] for t in i["token_ids"]] == items[-1]["result"].token_ids
    assert all(isinstance(i["t"], float) for i in items[:-1])
    assert items[-2]["finish_reason"] == "length" and items[0]["finish_reason"] is None


@pytest.mark.parametrize("kwargs, message", [
    ({"prompt": ""}, "prompt is empty"),
    ({"prompt": "hi", "max_tokens": 0}, "max_tokens must be an integer >= 1, got 0"),
    ({"prompt": "hi", "route": "sideways"}, "unknown route 'sideways'"),
    ({"prompt": "hi", "temperature": -1.0}, "temperature must be a number >= 0"),
    ({"prompt_token_ids": [1, 2, 1000]}, "token id 1000 is outside the vocabulary"),
    ({"prompt_token_ids": list(range(100))}, "max_model_len"),
    ({}, "exactly one of prompt"),
])
def test_bad_input_is_invalid_argument_and_service_continues(client, kwargs, message):
    with pytest.raises(pd_serve.InvalidArgumentError, match=message) as info:
        client.generate(**kwargs)
    assert info.value.code == "INVALID_ARGUMENT"
    assert isinstance(info.value, InvalidRequestError)  # as the in-process API raises
    assert len(client.generate(prompt="still there?", max_tokens=2).token_ids) == 2


def test_wrong_types_fail_in_the_client_without_a_call(client, backend):
    with pytest.raises(pd_serve.InvalidArgumentError, match="max_tokens has the wrong type"):
        client.generate(prompt="x", max_tokens="5")
    assert backend.requests == []


@pytest.mark.parametrize("token", [None, "wrong"])
def test_a_missing_or_wrong_token_is_unauthenticated_on_every_method(address, token, monkeypatch):
    monkeypatch.delenv("PD_SERVE_TOKEN", raising=False)
    with pd_serve.Client(address, token=token) as c:
        for call in (lambda: c.generate(prompt="x"), c.health, c.status):
            with pytest.raises(pd_serve.UnauthenticatedError):
                call()


def test_the_token_can_come_from_the_environment(address, monkeypatch):
    monkeypatch.setenv("PD_SERVE_TOKEN", TOKEN)
    with pd_serve.Client(address) as c:
        assert c.health()["is_healthy"]


def test_health_and_status(client):
    assert client.health() == {"is_healthy": True, "num_healthy_workers": 1,
                               "detail": "1/1 workers healthy"}
    st = client.status()
    assert st["workers"]["both-0"]["load"]["num_waiting"] == 2 and st["policy"] == "length_threshold"
    assert st["model"] == {"id": "fake-model", "max_model_len": 64, "vocab_size": 300}


def test_overload_is_resource_exhausted(client, backend):
    backend.max_inflight_requests = 0
    with pytest.raises(pd_serve.ResourceExhaustedError):
        client.generate(prompt="x")


def test_a_deadline_ends_the_call_and_the_servers_work(client, backend):
    backend.delay_s = 0.2
    t0 = time.time()
    with pytest.raises(pd_serve.DeadlineExceededError):
        client.generate(prompt="x", max_tokens=8, timeout_s=0.3)
    assert time.time() - t0 < 1.5
    assert _wait_for(lambda: backend.num_cancelled == 1 and backend.num_inflight == 0)


def test_leaving_a_stream_early_cancels_it_on_the_server(client, backend):
    backend.delay_s = 0.05
    for i, _ in enumerate(client.stream(prompt="x", max_tokens=9)):
        if i == 1:
            break
    assert _wait_for(lambda: backend.num_cancelled == 1 and backend.num_inflight == 0)


def test_unavailable_is_retried_until_the_server_is_up(loop, backend):
    port = _free_port()
    server = GrpcServer(backend, "127.0.0.1", port, token=TOKEN)

    async def start_late():
        await asyncio.sleep(0.5)
        await server.start()

    late = asyncio.run_coroutine_threadsafe(start_late(), loop.loop)
    policy = RetryPolicy(max_attempts=20, initial_backoff_s=0.05, max_backoff_s=0.2)
    with pd_serve.Client(f"127.0.0.1:{port}", token=TOKEN, retry=policy, timeout_s=10) as c:
        assert len(c.generate(prompt="x", max_tokens=2).token_ids) == 2
    late.result(5)
    loop.run(server.stop())


def test_unavailable_gives_up_after_its_attempts():
    policy = RetryPolicy(max_attempts=3, initial_backoff_s=0.1, max_backoff_s=0.1)
    t0 = time.time()
    with pd_serve.Client(f"127.0.0.1:{_free_port()}", retry=policy) as c:
        with pytest.raises(pd_serve.UnavailableError):
            c.health()
    assert time.time() - t0 >= 2 * 0.05  # two backoffs of at least half their base


def test_async_client(address, backend):
    async def main():
        async with pd_serve.AsyncClient(address, token=TOKEN) as c:
            r = await c.generate(prompt="hi", max_tokens=3)
            items = [i async for i in c.stream(prompt_token_ids=[5], max_tokens=2)]
            with pytest.raises(pd_serve.InvalidArgumentError, match="prompt is empty"):
                await c.generate(prompt="")
            health = await c.health()
            return r, items, health

    r, items, health = asyncio.run(main())
    assert r.token_ids == OUTPUT_IDS[:3] and items[-1]["result"].token_ids == OUTPUT_IDS[:2]
    assert health["is_healthy"]


@pytest.mark.parametrize("attempt, base_s", [(0, 0.1), (1, 0.2), (3, 0.8), (10, 2.0)])
def test_backoff_grows_exponentially_to_its_cap_with_jitter(attempt, base_s):
    policy = RetryPolicy(initial_backoff_s=0.1, multiplier=2.0, max_backoff_s=2.0)
    rng = random.Random(0)
    waits = [policy.backoff_s(attempt, rng) for _ in range(200)]
    assert all(base_s * 0.5 <= w <= base_s for w in waits)


def test_only_unavailable_before_any_message_is_retried():
    p = RetryPolicy(max_attempts=3)
    assert p.can_retry(grpc.StatusCode.UNAVAILABLE, 0, has_received=False)
    assert not p.can_retry(grpc.StatusCode.UNAVAILABLE, 0, has_received=True)  # tokens went out
    assert not p.can_retry(grpc.StatusCode.UNAVAILABLE, 2, has_received=False)  # 3rd was the last
    assert not p.can_retry(grpc.StatusCode.INVALID_ARGUMENT, 0, has_received=False)

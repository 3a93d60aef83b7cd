"""The Python SDK: `Client` (blocking) and `AsyncClient` (asyncio) over pd-serve's gRPC API.

Both mirror the in-process `Deployment`: `generate(...)` returns a GenerateResult and
`stream(...)` yields `{"type": "token", "token_ids": [...], "t": ...}` items, then one
`{"type": "result", "result": GenerateResult}`; so code moves between the two unchanged.

    with pd_serve.Client("127.0.0.1:50051", token="...") as client:
        r = client.generate(prompt="Hello", max_tokens=16, route="auto")

Every call has a deadline (`timeout_s`, per call or the client's default; None: none). A call
that finds the server UNAVAILABLE (not started yet, restarting, a dropped connection) is retried
with exponential backoff inside that deadline; a stream only until its first message arrived,
so no token is ever delivered twice. Failures are raised as the PdServeError subclasses below.
"""
from __future__ import annotations

import asyncio
import random
import time
from dataclasses import dataclass
from typing import Any, AsyncIterator, Iterator, Sequence

import grpc

from pd_serve.frontend.auth import bearer_header
from pd_serve.frontend.settings import token_from_env
from pd_serve.proto import convert
from pd_serve.proto import pd_serve_pb2 as pb
from pd_serve.proto import pd_serve_pb2_grpc as pb_grpc
from pd_serve.request import GenerateResult, InvalidRequestError

DEFAULT_TIMEOUT_S = 300.0
_UNSET: Any = object()  # "use the client's default timeout" (None means no deadline)


# ---- errors --------------------------------------------------------------------------------
class PdServeError(Exception):
    """A call to a pd-serve server failed; `code` is the gRPC status name (None: client side)."""

    code: str | None = None

    def __init__(self, message: str, code: str | None = None):
        super().__init__(message)
        if code is not None:
            self.code = code


class InvalidArgumentError(PdServeError, InvalidRequestError):
    """The server (or the encoding) rejected the request; the message says which field and why.
    Also an InvalidRequestError, as the in-process API raises for the same inputs."""

    code = "INVALID_ARGUMENT"


class UnauthenticatedError(PdServeError):
    """The token was missing or wrong."""

    code = "UNAUTHENTICATED"


class ResourceExhaustedError(PdServeError):
    """The server is at its limit of requests in flight; retry later."""

    code = "RESOURCE_EXHAUSTED"


class UnavailableError(PdServeError):
    """The server, its router or every worker able to serve stayed unreachable."""

    code = "UNAVAILABLE"


class DeadlineExceededError(PdServeError, TimeoutError):
    """The call's deadline passed."""

    code = "DEADLINE_EXCEEDED"


_ERRORS: dict[grpc.StatusCode, type[PdServeError]] = {
    grpc.StatusCode.INVALID_ARGUMENT: InvalidArgumentError,
    grpc.StatusCode.UNAUTHENTICATED: UnauthenticatedError,
    grpc.StatusCode.RESOURCE_EXHAUSTED: ResourceExhaustedError,
    grpc.StatusCode.UNAVAILABLE: UnavailableError,
    grpc.StatusCode.DEADLINE_EXCEEDED: DeadlineExceededError,
}


def error_from_rpc(err: grpc.RpcError) -> PdServeError:
    code = err.code() if hasattr(err, "code") else grpc.StatusCode.UNKNOWN
    details = (err.details() if hasattr(err, "details") else None) or str(err)
    cls = _ERRORS.get(code, PdServeError)
    return cls(details, code.name) if cls is PdServeError else cls(details)


# ---- retries and deadlines -----------------------------------------------------------------
@dataclass(frozen=True)
class RetryPolicy:
    """Retries of UNAVAILABLE: attempt k (from 0) waits min(max, initial * multiplier**k) seconds,
    scaled by a random factor in [0.5, 1] so that many clients do not retry in lockstep."""

    max_attempts: int = 5
    initial_backoff_s: float = 0.1
    max_backoff_s: float = 2.0
    multiplier: float = 2.0

    def backoff_s(self, attempt: int, rng: random.Random | None = None) -> float:
        base = min(self.max_backoff_s, self.initial_backoff_s * self.multiplier ** attempt)
        return base * (0.5 + 0.5 * (rng or random).random())

    def can_retry(self, code: grpc.StatusCode, attempt: int, has_received: bool) -> bool:
        """Retry UNAVAILABLE before anything arrived, while attempts are left."""
        return code == grpc.StatusCode.UNAVAILABLE and not has_received and attempt + 1 < self.max_attempts


class _Deadline:
    def __init__(self, timeout_s: float | None):
        self.at = None if timeout_s is None else time.monotonic() + timeout_s

    def remaining_s(self) -> float | None:
        """Seconds left (None: no deadline); DeadlineExceededError once none are."""
        if self.at is None:
            return None
        left = self.at - time.monotonic()
        if left <= 0:
            raise DeadlineExceededError("deadline exceeded")
        return left

    def allows_sleep(self, seconds: float) -> bool:
        return self.at is None or time.monotonic() + seconds < self.at


def _request(prompt: str | None, prompt_token_ids: Sequence[int] | None, max_tokens: int,
             temperature: float, ignore_eos: bool, route: str, top_p: float, seed: int | None,
             request_id: str | None) -> pb.GenerateRequest:
    try:
        return convert.request_to_proto(prompt, prompt_token_ids, max_tokens, temperature,
                                        ignore_eos, route, top_p, seed, request_id)
    except InvalidRequestError as err:
        raise InvalidArgumentError(str(err)) from None


def _channel_options() -> list[tuple[str, Any]]:
    return [("grpc.max_receive_message_length", 64 * 2**20)]


def _result_of(items: list[dict]) -> GenerateResult:
    for item in reversed(items):
        if item["type"] == "result":
            return item["result"]
    raise PdServeError("the server ended the stream without a result")


# ---- blocking client -----------------------------------------------------------------------
class Client:
    """Blocking client. `address`: "host:port" of the gRPC server. `token`: the shared token
    (default: $PD_SERVE_TOKEN, if set). `timeout_s`: each call's default deadline."""

    def __init__(self, address: str, token: str | None = None,
                 timeout_s: float | None = DEFAULT_TIMEOUT_S, retry: RetryPolicy | None = None):
        self.address = address
        self.timeout_s = timeout_s
        self.retry = retry or RetryPolicy()
        token = token_from_env(token)
        self._metadata = (("authorization", bearer_header(token)),) if token else ()
        self._channel = grpc.insecure_channel(address, options=_channel_options())
        self._stub = pb_grpc.PdServeStub(self._channel)

    def stream(self, prompt: str | None = None, prompt_token_ids: Sequence[int] | None = None,
               max_tokens: int = 16, temperature: float = 0.0, ignore_eos: bool = False,
               route: str = "auto", *, top_p: float = 1.0, seed: int | None = None,
               request_id: str | None = None, timeout_s: float | None = _UNSET) -> Iterator[dict]:
        """Token items as they come, then the result (the in-process `Deployment.stream` items)."""
        msg = _request(prompt, prompt_token_ids, max_tokens, temperature, ignore_eos, route, top_p,
                       seed, request_id)
        deadline = _Deadline(self.timeout_s if timeout_s is _UNSET else timeout_s)
        attempt = 0
        while True:
            has_received = False
            call = self._stub.Generate(msg, timeout=deadline.remaining_s(), metadata=self._metadata)
            try:
                for resp in call:
                    has_received = True
                    yield convert.item_from_proto(resp)
                return
            except grpc.RpcError as err:
                backoff_s = self.retry.backoff_s(attempt)
                if not (self.retry.can_retry(err.code(), attempt, has_received)
                        and deadline.allows_sleep(backoff_s)):
                    raise error_from_rpc(err) from None
            finally:
                call.cancel()  # the caller stopped early: tell the server (no-op when done)
            time.sleep(backoff_s)
            attempt += 1

    def generate(self, prompt: str | None = None, prompt_token_ids: Sequence[int] | None = None,
                 max_tokens: int = 16, temperature: float = 0.0, ignore_eos: bool = False,
                 route: str = "auto", **kw: Any) -> GenerateResult:
        """Run one request to completion; keyword arguments as `stream`."""
        return _result_of(list(self.stream(prompt, prompt_token_ids, max_tokens, temperature,
                                           ignore_eos, route, **kw)))

    def health(self, timeout_s: float | None = _UNSET) -> dict:
        """`{"is_healthy", "num_healthy_workers", "detail"}`."""
        return convert.health_from_proto(self._unary(self._stub.Health, pb.HealthRequest(), timeout_s))

    def status(self, timeout_s: float | None = _UNSET) -> dict:
        """Shaped like `Deployment.status()`, plus `links` and `model`."""
        return convert.status_from_proto(self._unary(self._stub.Status, pb.StatusRequest(), timeout_s))

    def _unary(self, method: Any, request: Any, timeout_s: float | None) -> Any:
        deadline = _Deadline(self.timeout_s if timeout_s is _UNSET else timeout_s)
        attempt = 0
        while True:
            try:
                return method(request, timeout=deadline.remaining_s(), metadata=self._metadata)
            except grpc.RpcError as err:
                backoff_s = self.retry.backoff_s(attempt)
                if not (self.retry.can_retry(err.code(), attempt, False)
                        and deadline.allows_sleep(backoff_s)):
                    raise error_from_rpc(err) from None
            time.sleep(backoff_s)
            attempt += 1

    def close(self) -> None:
        self._channel.close()

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


# ---- asyncio client ------------------------------------------------------------------------
class AsyncClient:
    """The asyncio twin of Client: `await generate(...)`, `async for item in stream(...)`.
    Create it inside the event loop that uses it."""

    def __init__(self, address: str, token: str | None = None,
                 timeout_s: float | None = DEFAULT_TIMEOUT_S, retry: RetryPolicy | None = None):
        self.address = address
        self.timeout_s = timeout_s
        self.retry = retry or RetryPolicy()
        token = token_from_env(token)
        self._metadata = (("authorization", bearer_header(token)),) if token else ()
        self._channel = grpc.aio.insecure_channel(address, options=_channel_options())
        self._stub = pb_grpc.PdServeStub(self._channel)

    async def stream(self, prompt: str | None = None, prompt_token_ids: Sequence[int] | None = None,
                     max_tokens: int = 16, temperature: float = 0.0, ignore_eos: bool = False,
                     route: str = "auto", *, top_p: float = 1.0, seed: int | None = None,
                     request_id: str | None = None,
                     timeout_s: float | None = _UNSET) -> AsyncIterator[dict]:
        msg = _request(prompt, prompt_token_ids, max_tokens, temperature, ignore_eos, route, top_p,
                       seed, request_id)
        deadline = _Deadline(self.timeout_s if timeout_s is _UNSET else timeout_s)
        attempt = 0
        while True:
            has_received = False
            call = self._stub.Generate(msg, timeout=deadline.remaining_s(), metadata=self._metadata)
            try:
                async for resp in call:
                    has_received = True
                    yield convert.item_from_proto(resp)
                return
            except grpc.RpcError as err:
                backoff_s = self.retry.backoff_s(attempt)
                if not (self.retry.can_retry(err.code(), attempt, has_received)
                        and deadline.allows_sleep(backoff_s)):
                    raise error_from_rpc(err) from None
            finally:
                call.cancel()
            await asyncio.sleep(backoff_s)
            attempt += 1

    async def generate(self, prompt: str | None = None, prompt_token_ids: Sequence[int] | None = None,
                       max_tokens: int = 16, temperature: float = 0.0, ignore_eos: bool = False,
                       route: str = "auto", **kw: Any) -> GenerateResult:
        items = [item async for item in self.stream(prompt, prompt_token_ids, max_tokens,
                                                    temperature, ignore_eos, route, **kw)]
        return _result_of(items)

    async def health(self, timeout_s: float | None = _UNSET) -> dict:
        return convert.health_from_proto(await self._unary(self._stub.Health, pb.HealthRequest(),
                                                           timeout_s))

    async def status(self, timeout_s: float | None = _UNSET) -> dict:
        return convert.status_from_proto(await self._unary(self._stub.Status, pb.StatusRequest(),
                                                           timeout_s))

    async def _unary(self, method: Any, request: Any, timeout_s: float | None) -> Any:
        deadline = _Deadline(self.timeout_s if timeout_s is _UNSET else timeout_s)
        attempt = 0
        while True:
            try:
                return await method(request, timeout=deadline.remaining_s(), metadata=self._metadata)
            except grpc.RpcError as err:
                backoff_s = self.retry.backoff_s(attempt)
                if not (self.retry.can_retry(err.code(), attempt, False)
                        and deadline.allows_sleep(backoff_s)):
                    raise error_from_rpc(err) from None
            await asyncio.sleep(backoff_s)
            attempt += 1

    async def close(self) -> None:
        await self._channel.close()

    async def __aenter__(self) -> "AsyncClient":
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.close()

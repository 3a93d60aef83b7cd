"""The OpenAI-compatible HTTP front door: `/v1/completions` (whole or as server-sent events),
`/v1/models`, `/health`, `/metrics`; a FastAPI app served by uvicorn on the caller's event loop.
"""
from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
import time
import uuid
from typing import Any, AsyncIterator

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, PlainTextResponse, Response, StreamingResponse
from starlette.datastructures import Headers

from pd_serve.frontend import openai_format as fmt
from pd_serve.frontend.auth import denial_message, is_authorized
from pd_serve.frontend.backend import Backend
from pd_serve.frontend.detokenizer import IncrementalDetokenizer, Tokenizer
from pd_serve.frontend.errors import UNAUTHENTICATED, error_message, error_status
from pd_serve.frontend.openai_request import (CompletionCall, completion_call_from_json,
                                              parse_json_object)
from pd_serve.request import InvalidRequestError, make_request

logger = logging.getLogger(__name__)

METRICS_CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
SERVER_START_TIMEOUT_S = 30.0
SHUTDOWN_GRACE_S = 5


class BearerTokenMiddleware:
    """ASGI middleware: every HTTP call needs the token (plain ASGI, so streams pass untouched)."""

    def __init__(self, app: Any, token: str | None):
        self.app = app
        self.token = token

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] == "http" and self.token is not None:
            header = Headers(scope=scope).get("authorization")
            if not is_authorized(header, self.token):
                response = _error_response(denial_message(header), UNAUTHENTICATED.openai_type, 401,
                                           headers={"WWW-Authenticate": "Bearer"})
                await response(scope, receive, send)
                return
        await self.app(scope, receive, send)


def _error_response(message: str, error_type: str, status: int,
                    headers: dict[str, str] | None = None) -> JSONResponse:
    return JSONResponse(fmt.error_body(message, error_type, status), status_code=status,
                        headers=headers)


def _failure_response(err: BaseException) -> JSONResponse:
    st = error_status(err)
    return _error_response(error_message(err), st.openai_type, st.http_status)


def build_app(backend: Backend, tokenizer: Tokenizer, token: str | None = None) -> FastAPI:
    """The app; `tokenizer` turns streamed token ids into text deltas."""
    app = FastAPI(title="pd-serve", docs_url=None, redoc_url=None, openapi_url=None)
    app.add_middleware(BearerTokenMiddleware, token=token)
    created = int(time.time())

    @app.get("/health")
    async def health() -> Response:
        h = await backend.health()
        return JSONResponse(h, status_code=200 if h["is_healthy"] else 503)

    @app.get("/metrics")
    async def metrics() -> Response:
        try:
            return PlainTextResponse(await backend.metrics_text(), media_type=METRICS_CONTENT_TYPE)
        except Exception as err:
            return _failure_response(err)

    @app.get("/v1/models")
    async def models() -> Response:
        return JSONResponse(fmt.model_list(backend.model, created))

    @app.post("/v1/completions")
    async def completions(request: Request) -> Response:
        try:
            call = completion_call_from_json(parse_json_object(await request.body()))
            req = make_request(**call.request_kwargs)
        except InvalidRequestError as err:
            logger.info("bad completions request: %s", err)
            return _failure_response(err)
        if call.ignored_fields:
            logger.warning("ignoring unknown fields in a completions request: %s",
                           ", ".join(call.ignored_fields))
        session = _Completion(backend, tokenizer, call, call.model or backend.model.id)
        try:
            # The first item is awaited before answering, so that errors the router finds
            # (token ids outside the vocabulary, too long, overload) are HTTP errors, not 200.
            first = await session.start(req)
            if not call.is_stream:
                return JSONResponse(await session.whole(first))
        except Exception as err:
            await session.close()
            _log_failure(err)
            return _failure_response(err)
        return StreamingResponse(session.events(first), media_type="text/event-stream",
                                 headers={"Cache-Control": "no-cache"})

    return app


def _log_failure(err: BaseException) -> None:
    if isinstance(err, InvalidRequestError):
        logger.info("completions request rejected: %s", err)
    else:
        logger.warning("completions request failed: %s: %s", type(err).__name__, err)


class _Completion:
    """One completions request: its backend stream and how it is written out."""

    def __init__(self, backend: Backend, tokenizer: Tokenizer, call: CompletionCall, model: str):
        self.backend = backend
        self.call = call
        self.model = model
        self.id = f"cmpl-{uuid.uuid4().hex}"
        self.created = int(time.time())
        self.detokenizer = IncrementalDetokenizer(tokenizer)
        self._items: AsyncIterator[dict] | None = None

    async def start(self, req: Any) -> dict:
        self._items = self.backend.stream(req).__aiter__()
        return await self._items.__anext__()

    async def close(self) -> None:
        if self._items is not None:
            with contextlib.suppress(Exception):
                await self._items.aclose()  # type: ignore[attr-defined]

    async def whole(self, first: dict) -> dict:
        item = first
        async for item in self._items:
            pass
        assert item["type"] == "result", "the stream ended without a result"
        return fmt.completion_response(self.id, self.created, self.model, item["result"])

    async def events(self, first: dict) -> AsyncIterator[str]:
        """Server-sent events: a chunk per token batch as it arrives; the last token's chunk is
        held until the result (microseconds later) so it carries finish_reason and the summary,
        as vLLM's last chunk carries finish_reason; then usage if asked, then [DONE]."""
        pending: dict | None = None
        try:
            item = first
            while True:
                if item["type"] == "token":
                    text = self.detokenizer.add(item["token_ids"])
                    if item.get("finish_reason"):
                        pending = {"text": text, "token_ids": item["token_ids"]}
                    else:
                        yield fmt.sse_event(self._chunk(text, item["token_ids"]))
                else:
                    for event in self._closing_events(item["result"], pending):
                        yield event
                    return
                item = await self._items.__anext__()
        except StopAsyncIteration:
            logger.error("completion %s: stream ended without a result", self.id)
            yield fmt.sse_event(fmt.error_body("stream ended without a result", "internal_error", 500))
            yield fmt.SSE_DONE
        except Exception as err:  # the client already has a 200: the error goes in the stream
            _log_failure(err)
            st = error_status(err)
            yield fmt.sse_event(fmt.error_body(error_message(err), st.openai_type, st.http_status))
            yield fmt.SSE_DONE
        finally:
            await self.close()

    def _closing_events(self, result: dict, pending: dict | None) -> list[str]:
        last = pending or {"text": "", "token_ids": []}
        text = last["text"] + self.detokenizer.finish(result["text"])
        events = [fmt.sse_event(fmt.completion_chunk(
            self.id, self.created, self.model, text, last["token_ids"], result["finish_reason"],
            fmt.pd_serve_summary(result)))]
        if self.call.include_usage:
            events.append(fmt.sse_event(fmt.usage_chunk(self.id, self.created, self.model, result)))
        events.append(fmt.SSE_DONE)
        return events

    def _chunk(self, text: str, token_ids: list[int]) -> dict:
        return fmt.completion_chunk(self.id, self.created, self.model, text, token_ids)


# ---- serving -------------------------------------------------------------------------------
def bind_socket(host: str, port: int) -> socket.socket:
    """A listening socket; port 0 takes a free one. Binding here (not in uvicorn) lets the caller
    learn the port before the server runs and fail at once on a port in use."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError:
        sock.close()
        raise
    sock.listen(2048)
    sock.setblocking(False)
    return sock


class HttpServer:
    """uvicorn on the running event loop; `start()` returns the bound port."""

    def __init__(self, app: FastAPI, host: str, port: int):
        import uvicorn

        class _Server(uvicorn.Server):
            @contextlib.contextmanager
            def capture_signals(self):  # the hosting process's lifecycle is Ray's, not signals'
                yield

        self.host, self.port = host, port
        self._server = _Server(uvicorn.Config(app, log_level="warning", access_log=False,
                                              lifespan="off",
                                              timeout_graceful_shutdown=SHUTDOWN_GRACE_S))
        self._task: asyncio.Task | None = None

    async def start(self) -> int:
        sock = bind_socket(self.host, self.port)
        bound = sock.getsockname()[1]
        self._task = asyncio.get_running_loop().create_task(self._server.serve(sockets=[sock]))
        deadline = time.monotonic() + SERVER_START_TIMEOUT_S
        while not self._server.started:
            if self._task.done():
                self._task.result()  # raises the start-up failure
                raise RuntimeError("HTTP server exited during start-up")
            if time.monotonic() > deadline:
                raise TimeoutError(f"HTTP server did not start within {SERVER_START_TIMEOUT_S}s")
            await asyncio.sleep(0.01)
        return bound

    async def stop(self) -> None:
        if self._task is not None and not self._task.done():
            self._server.should_exit = True
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._task, SHUTDOWN_GRACE_S + 5)

"""The gRPC front door (pd_serve/proto/pd_serve.proto): Generate, Health, Status on grpc.aio,
with the shared-token rule as a server interceptor."""
from __future__ import annotations

import logging
from dataclasses import asdict
from typing import Any, AsyncIterator, Awaitable, Callable

import grpc

from pd_serve.frontend.auth import denial_message, is_authorized
from pd_serve.frontend.backend import Backend
from pd_serve.frontend.errors import error_message, error_status
from pd_serve.proto import convert
from pd_serve.proto import pd_serve_pb2 as pb
from pd_serve.proto import pd_serve_pb2_grpc as pb_grpc
from pd_serve.request import InvalidRequestError, make_request

logger = logging.getLogger(__name__)

AUTH_METADATA_KEY = "authorization"
SHUTDOWN_GRACE_S = 5.0


async def _abort(context: grpc.aio.ServicerContext, err: BaseException) -> None:
    st = error_status(err)
    if isinstance(err, InvalidRequestError):
        logger.info("gRPC request rejected: %s", err)
    else:
        logger.warning("gRPC request failed: %s: %s", type(err).__name__, err)
    await context.abort(getattr(grpc.StatusCode, st.grpc_code), error_message(err))


class PdServeServicer(pb_grpc.PdServeServicer):
    def __init__(self, backend: Backend):
        self.backend = backend

    async def Generate(self, request: pb.GenerateRequest,
                       context: grpc.aio.ServicerContext) -> AsyncIterator[pb.GenerateResponse]:
        failure: BaseException | None = None
        try:
            req = make_request(**convert.request_kwargs_from_proto(request))
            async for item in self.backend.stream(req):
                if item["type"] == "token":
                    yield convert.token_item_to_proto(item)
                else:
                    yield convert.result_to_proto(item["result"])
        except Exception as err:  # cancellation (BaseException) passes through untouched
            failure = err
        if failure is not None:
            await _abort(context, failure)

    async def Health(self, request: pb.HealthRequest,
                     context: grpc.aio.ServicerContext) -> pb.HealthResponse:
        return convert.health_to_proto(await self.backend.health())

    async def Status(self, request: pb.StatusRequest,
                     context: grpc.aio.ServicerContext) -> pb.StatusResponse:
        try:
            status = await self.backend.status()
        except Exception as err:
            await _abort(context, err)
        return convert.status_to_proto(status, asdict(self.backend.model))


class BearerTokenInterceptor(grpc.aio.ServerInterceptor):
    """Refuses every call without `authorization: Bearer <token>` with UNAUTHENTICATED."""

    def __init__(self, token: str):
        self.token = token

    async def intercept_service(
            self, continuation: Callable[[grpc.HandlerCallDetails], Awaitable[grpc.RpcMethodHandler]],
            details: grpc.HandlerCallDetails) -> grpc.RpcMethodHandler:
        header = dict(details.invocation_metadata or ()).get(AUTH_METADATA_KEY)
        handler = await continuation(details)
        if handler is None or is_authorized(header, self.token):
            return handler
        return _denying_handler(handler, denial_message(header))


def _denying_handler(handler: grpc.RpcMethodHandler, message: str) -> grpc.RpcMethodHandler:
    """A handler of the same kind as `handler` that aborts with UNAUTHENTICATED."""
    async def deny_unary(request: Any, context: grpc.aio.ServicerContext) -> Any:
        await context.abort(grpc.StatusCode.UNAUTHENTICATED, message)

    async def deny_stream(request: Any, context: grpc.aio.ServicerContext) -> AsyncIterator[Any]:
        await context.abort(grpc.StatusCode.UNAUTHENTICATED, message)
        yield  # unreachable; makes this an async generator like the handler it stands in for

    ser = dict(request_deserializer=handler.request_deserializer,
               response_serializer=handler.response_serializer)
    if handler.unary_stream:
        return grpc.unary_stream_rpc_method_handler(deny_stream, **ser)
    if handler.unary_unary:
        return grpc.unary_unary_rpc_method_handler(deny_unary, **ser)
    raise NotImplementedError("pd-serve has no client-streaming methods")


def _host_port(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


class GrpcServer:
    """grpc.aio server on the running event loop; `start()` returns the bound port."""

    def __init__(self, backend: Backend, host: str, port: int, token: str | None = None):
        self.backend, self.host, self.port, self.token = backend, host, port, token
        self._server: grpc.aio.Server | None = None

    async def start(self) -> int:
        # Created here, not in __init__: a grpc.aio server belongs to the loop it is created on.
        interceptors = [BearerTokenInterceptor(self.token)] if self.token else []
        # so_reuseport off: a second server on a port in use must fail, not share it silently.
        self._server = grpc.aio.server(interceptors=interceptors, options=[("grpc.so_reuseport", 0)])
        pb_grpc.add_PdServeServicer_to_server(PdServeServicer(self.backend), self._server)
        address = _host_port(self.host, self.port)
        try:
            bound = self._server.add_insecure_port(address)
        except RuntimeError as err:  # newer grpcio raises where older ones returned 0
            raise OSError(f"gRPC server could not bind {address}: {err}") from None
        if bound == 0:
            raise OSError(f"gRPC server could not bind {address}")
        await self._server.start()
        return bound

    async def stop(self) -> None:
        if self._server is not None:
            await self._server.stop(SHUTDOWN_GRACE_S)

"""The frontend actor: the gRPC and HTTP servers inside one Ray actor next to the router.

Inside an actor the servers outlive the process that deployed (a detached deployment keeps
serving after `ray job submit ... pd-serve up --detach` returns), and a request is one hop from
the server to the router. The actor takes no CPU from Ray's accounting (num_cpus=0): its work
is I/O, and the engines keep their cores.
"""
from __future__ import annotations

import logging
from typing import Any

from pd_serve.frontend.settings import FrontendAddresses, FrontendSettings, ModelInfo

logger = logging.getLogger(__name__)

START_TIMEOUT_S = 120.0


class Frontend:
    """Ray actor class; create with `start_frontend`."""

    def __init__(self, router: Any, model: ModelInfo, settings: FrontendSettings):
        self.router = router
        self.model = model
        self.settings = settings
        self._servers: list[Any] = []
        self.addresses: FrontendAddresses | None = None

    async def start(self) -> FrontendAddresses:
        """Bind and start the configured servers; on any failure stop what started and raise."""
        from pd_serve.frontend.backend import RouterBackend

        s = self.settings
        backend = RouterBackend(self.router, self.model, s.max_inflight_requests)
        grpc_addr = http_addr = None
        try:
            if s.grpc_port is not None:
                from pd_serve.frontend.grpc_server import GrpcServer

                server = GrpcServer(backend, s.host, s.grpc_port, s.token)
                grpc_addr = _address(s.host, await server.start())
                self._servers.append(server)
            if s.http_port is not None:
                from pd_serve.frontend.http_server import HttpServer, build_app

                app = build_app(backend, _load_tokenizer(self.model.tokenizer), s.token)
                server = HttpServer(app, s.host, s.http_port)
                http_addr = _address(s.host, await server.start())
                self._servers.append(server)
        except BaseException:
            await self.stop()
            raise
        self.addresses = FrontendAddresses(grpc=grpc_addr, http=http_addr)
        logger.info("frontend serving gRPC at %s, HTTP at %s (auth %s)", grpc_addr, http_addr,
                    "on" if s.token else "off")
        return self.addresses

    async def stop(self) -> None:
        servers, self._servers = self._servers, []
        for server in reversed(servers):
            try:
                await server.stop()
            except Exception as err:  # stopping the rest matters more than this one's error
                logger.warning("stopping %s failed: %s", type(server).__name__, err)

    def get_addresses(self) -> FrontendAddresses | None:
        return self.addresses


def _address(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def _load_tokenizer(path: str) -> Any:
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(path)


def start_frontend(router: Any, model: ModelInfo, settings: FrontendSettings,
                   name: str | None = None) -> tuple[Any, FrontendAddresses]:
    """Start the frontend actor and its servers; returns (actor handle, addresses).

    `name`: a detached, named actor (it outlives the caller, like the router it fronts).
    """
    import ray

    opts: dict[str, Any] = {"num_cpus": 0, "max_concurrency": 10000}
    if name:
        opts.update(name=name, lifetime="detached")
    actor = ray.remote(Frontend).options(**opts).remote(router, model, settings)
    try:
        addresses = ray.get(actor.start.remote(), timeout=START_TIMEOUT_S)
    except BaseException:
        stop_frontend(actor)
        raise
    return actor, addresses


def stop_frontend(actor: Any, timeout_s: float = 15.0) -> None:
    """Stop the servers (in-flight requests get a short grace), then the actor."""
    import ray

    try:
        ray.get(actor.stop.remote(), timeout=timeout_s)
    except Exception as err:
        logger.info("frontend did not stop cleanly: %s", type(err).__name__)
    try:
        ray.kill(actor)
    except Exception:
        pass

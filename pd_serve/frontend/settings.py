"""Typed records the deployment hands the frontend actor and gets back from it."""
from __future__ import annotations

import os
from dataclasses import dataclass

DEFAULT_HOST = "127.0.0.1"  # loopback unless the operator says otherwise
DEFAULT_GRPC_PORT = 50051
DEFAULT_HTTP_PORT = 8000
DEFAULT_MAX_INFLIGHT_REQUESTS = 4096
TOKEN_ENV = "PD_SERVE_TOKEN"


@dataclass(frozen=True)
class FrontendSettings:
    """Which servers to run and how.

    `grpc_port` / `http_port`: None runs no such server; 0 binds a free port (reported back in
    FrontendAddresses). `token`: when set, every call must carry `authorization: Bearer <token>`.
    `max_inflight_requests`: requests beyond it are refused (RESOURCE_EXHAUSTED / HTTP 429)
    rather than queued without bound.
    """

    host: str = DEFAULT_HOST
    grpc_port: int | None = None
    http_port: int | None = None
    token: str | None = None
    max_inflight_requests: int = DEFAULT_MAX_INFLIGHT_REQUESTS

    def __post_init__(self) -> None:
        for name in ("grpc_port", "http_port"):
            port = getattr(self, name)
            if port is not None and not 0 <= port <= 65535:
                raise ValueError(f"{name} must be in 0..65535 (0: any free port) or None, got {port}")
        if self.max_inflight_requests < 1:
            raise ValueError(f"max_inflight_requests must be >= 1, got {self.max_inflight_requests}")
        if self.token is not None and not self.token:
            raise ValueError("token must be a non-empty string or None")

    @property
    def is_enabled(self) -> bool:
        return self.grpc_port is not None or self.http_port is not None


@dataclass(frozen=True)
class ModelInfo:
    """The served model as the front doors describe it (`/v1/models`, gRPC Status)."""

    id: str                 # the name clients put in `model`
    root: str               # where the weights and tokenizer live (vLLM's `root`)
    tokenizer: str          # path or name the HTTP server detokenizes streamed text with
    max_model_len: int
    vocab_size: int


@dataclass(frozen=True)
class FrontendAddresses:
    """Where the started servers listen (`host:port`), None for a server not running."""

    grpc: str | None
    http: str | None

    @property
    def http_url(self) -> str | None:
        return f"http://{self.http}" if self.http else None


def token_from_env(token: str | None = None) -> str | None:
    """The token to use: `token` if given ("" means explicitly none), else $PD_SERVE_TOKEN
    (an empty variable counts as unset), else None."""
    if token is not None:
        return token or None
    return os.environ.get(TOKEN_ENV) or None

"""What can go wrong behind a front door, and what each door answers.

| error                          | gRPC status        | HTTP | OpenAI error type      |
|--------------------------------|--------------------|------|------------------------|
| InvalidRequestError            | INVALID_ARGUMENT   | 400  | invalid_request_error  |
| (token rule, auth.py)          | UNAUTHENTICATED    | 401  | authentication_error   |
| OverloadedError                | RESOURCE_EXHAUSTED | 429  | rate_limit_error       |
| UnavailableError               | UNAVAILABLE        | 503  | service_unavailable    |
| anything else                  | INTERNAL           | 500  | internal_error         |
"""
from __future__ import annotations

from dataclasses import dataclass

from pd_serve.request import InvalidRequestError


class OverloadedError(RuntimeError):
    """The frontend already has its maximum of requests in flight; retry later."""


class UnavailableError(RuntimeError):
    """No worker (or no router) can serve the request right now."""


@dataclass(frozen=True)
class ErrorStatus:
    grpc_code: str          # the grpc.StatusCode member's name
    http_status: int
    openai_type: str


INVALID = ErrorStatus("INVALID_ARGUMENT", 400, "invalid_request_error")
UNAUTHENTICATED = ErrorStatus("UNAUTHENTICATED", 401, "authentication_error")
OVERLOADED = ErrorStatus("RESOURCE_EXHAUSTED", 429, "rate_limit_error")
UNAVAILABLE = ErrorStatus("UNAVAILABLE", 503, "service_unavailable")
INTERNAL = ErrorStatus("INTERNAL", 500, "internal_error")


def error_status(err: BaseException) -> ErrorStatus:
    if isinstance(err, InvalidRequestError):
        return INVALID
    if isinstance(err, OverloadedError):
        return OVERLOADED
    if isinstance(err, UnavailableError):
        return UNAVAILABLE
    return INTERNAL


def error_message(err: BaseException) -> str:
    """The message a client sees: the error's own for errors we raise, the type name otherwise
    (an internal trace stays in the server's log)."""
    if error_status(err) is INTERNAL:
        return f"internal error ({type(err).__name__}); see the server log"
    return str(err)

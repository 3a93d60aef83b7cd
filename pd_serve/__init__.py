"""pd-serve: LLM serving on Ray with prefill and decode colocated or disaggregated per request."""
from __future__ import annotations

from typing import Any

# [frontdoors] the gRPC SDK (pd_serve/client.py)
_CLIENT_NAMES = ("Client", "AsyncClient", "PdServeError", "InvalidArgumentError",
                 "UnauthenticatedError", "ResourceExhaustedError", "UnavailableError",
                 "DeadlineExceededError")
__all__ = ["deploy", "Deployment", "GenerateResult", "InvalidRequestError", "ConfigError",
           *_CLIENT_NAMES]


def __getattr__(name: str) -> Any:
    # Lazy: `import pd_serve` stays fast; Ray and vLLM load only when a deployment starts.
    if name in ("deploy", "Deployment"):
        from pd_serve import deployment
        return getattr(deployment, name)
    if name in ("GenerateResult", "InvalidRequestError"):
        from pd_serve import request
        return getattr(request, name)
    if name in _CLIENT_NAMES:  # [frontdoors]
        from pd_serve import client
        return getattr(client, name)
    if name == "ConfigError":
        from pd_serve.config import ConfigError
        return ConfigError
    raise AttributeError(name)

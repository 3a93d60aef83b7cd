"""pd-serve's front doors: gRPC (grpc_server.py) and OpenAI-compatible HTTP (http_server.py),
served from one Ray actor next to the router (actor.py), under one token rule (auth.py).

| module            | one idea                                                            |
|-------------------|---------------------------------------------------------------------|
| settings          | typed records: FrontendSettings, ModelInfo, FrontendAddresses       |
| auth              | the bearer-token rule                                               |
| errors            | error -> gRPC status / HTTP status / OpenAI error type              |
| backend           | what servers need from a deployment; RouterBackend over Ray         |
| openai_request    | OpenAI completions JSON -> make_request arguments                   |
| openai_format     | OpenAI responses, stream chunks, SSE, errors, model list            |
| detokenizer       | token ids -> stable text deltas for streaming                       |
| grpc_server       | the gRPC service and the token interceptor                          |
| http_server       | the FastAPI app and uvicorn on the actor's loop                     |
| actor             | the Ray actor hosting both; start_frontend / stop_frontend          |
"""
from __future__ import annotations

from pd_serve.frontend.settings import FrontendAddresses, FrontendSettings, ModelInfo

__all__ = ["FrontendAddresses", "FrontendSettings", "ModelInfo", "start_frontend", "stop_frontend"]


def __getattr__(name: str):
    # Lazy: the settings records import nothing heavy; the actor helpers pull in Ray.
    if name in ("start_frontend", "stop_frontend"):
        from pd_serve.frontend import actor
        return getattr(actor, name)
    raise AttributeError(name)

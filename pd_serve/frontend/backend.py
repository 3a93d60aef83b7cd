"""What both servers need from a deployment, and its implementation over Ray: the frontend actor's
requests go to the router actor, and their items come back on one stream (caller_streams.py).

Servers depend on the `Backend` protocol only, so their unit tests run against a fake without Ray.
"""
from __future__ import annotations

import asyncio
import dataclasses
import logging
import uuid
from typing import Any, AsyncIterator, Protocol

from pd_serve.frontend.errors import OverloadedError, UnavailableError
from pd_serve.frontend.settings import ModelInfo
from pd_serve.request import GenerateRequest, InvalidRequestError

logger = logging.getLogger(__name__)

STATUS_TIMEOUT_S = 10.0
DECODE_ROLES = ("decode", "both")


class Backend(Protocol):
    model: ModelInfo

    def stream(self, req: GenerateRequest) -> AsyncIterator[dict]:
        """`{"type": "token", "token_ids", "t", "finish_reason"}` items, then one
        `{"type": "result", "result": <GenerateResult as dict>}`. Raises InvalidRequestError,
        OverloadedError, UnavailableError, or anything else as an internal error."""
        ...

    async def status(self) -> dict: ...

    async def health(self) -> dict: ...

    async def metrics_text(self) -> str: ...


def health_from_status(status: dict) -> dict:
    """Healthy when at least one worker that can decode is up (the router answered)."""
    workers = status.get("workers", {})
    healthy = [w for w in workers.values() if w.get("healthy")]
    can_decode = [w for w in healthy if w.get("role") in DECODE_ROLES]
    detail = (f"{len(healthy)}/{len(workers)} workers healthy" if can_decode
              else f"no healthy decode-capable worker ({len(healthy)}/{len(workers)} workers healthy)")
    return {"is_healthy": bool(can_decode), "num_healthy_workers": len(healthy), "detail": detail}


def links_from_registry(data: dict) -> list[dict]:
    """`LinkModelRegistry.to_dict()` -> one flat record per P->D pair (what Status reports)."""
    return [{"prefill_worker": m["prefill_id"], "decode_worker": m["decode_id"],
             "alpha_s": m["model"]["alpha_s"], "beta_bytes_per_s": m["model"]["beta_bytes_per_s"],
             "num_updates": m["model"].get("num_updates", 0)} for m in data.get("models", [])]


class RouterBackend:
    """The deployment's router actor, seen from inside the frontend actor's event loop."""

    def __init__(self, router: Any, model: ModelInfo, max_inflight_requests: int):
        from pd_serve.caller_streams import new_caller_id, router_streams

        self.router = router
        self.model = model
        self.max_inflight_requests = max_inflight_requests
        self.num_inflight = 0
        # Every request's items come from the router on one stream for this actor
        # (output_streams.py); a request whose client leaves is cancelled on the router.
        self.caller = new_caller_id("frontend")
        self.streams = router_streams(router, self.caller)

    async def stream(self, req: GenerateRequest) -> AsyncIterator[dict]:
        if self.num_inflight >= self.max_inflight_requests:
            raise OverloadedError(f"{self.num_inflight} requests in flight, the limit is "
                                  f"{self.max_inflight_requests}; retry later")
        self.num_inflight += 1
        if not req.request_id:
            req = dataclasses.replace(req, request_id=uuid.uuid4().hex)
        try:
            async for item in self.streams.stream("router", req.request_id,
                                                  lambda: self.router.submit.remote(self.caller, req)):
                yield item
        except (InvalidRequestError, OverloadedError, UnavailableError):
            raise
        except Exception as err:
            raise _translate(err) from None
        finally:
            self.num_inflight -= 1

    async def status(self) -> dict:
        """The router's status plus its P->D link models (`links`)."""
        try:
            status, links = await asyncio.wait_for(asyncio.gather(
                _await(self.router.status.remote()), _await(self.router.link_models.remote())),
                STATUS_TIMEOUT_S)
            return {**status, "links": links_from_registry(links)}
        except asyncio.TimeoutError:
            raise UnavailableError(f"router did not answer within {STATUS_TIMEOUT_S:.0f}s") from None
        except Exception as err:
            raise _translate(err) from None

    async def health(self) -> dict:
        try:
            return health_from_status(await self.status())
        except Exception as err:  # health reports, it does not raise
            return {"is_healthy": False, "num_healthy_workers": 0,
                    "detail": f"router unreachable: {err}"}

    async def metrics_text(self) -> str:
        try:
            return await _await(self.router.metrics_text.remote())
        except Exception as err:
            raise _translate(err) from None


async def _await(ref: Any) -> Any:
    return await ref


def _translate(err: BaseException) -> BaseException:
    """Ray's wrapping of the router's errors -> the errors the front doors know how to answer."""
    import ray.exceptions as rex

    from pd_serve.router import NoWorkerAvailableError

    # The router's call failed (Ray wraps its error), or a request failed in the router (its
    # error came on the stream as itself).
    cause = getattr(err, "cause", None) if isinstance(err, rex.RayTaskError) else err
    if isinstance(cause, InvalidRequestError):
        return InvalidRequestError(str(cause))
    if isinstance(cause, NoWorkerAvailableError):
        return UnavailableError(str(cause))
    if isinstance(err, (rex.RayActorError, rex.ActorUnavailableError)):
        # the router's stream failed, or a worker died under a request
        return UnavailableError(f"the router or a worker is not reachable ({type(err).__name__})")
    logger.error("request failed behind the router: %r", err)
    return err


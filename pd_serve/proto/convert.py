"""Proto messages <-> the serving core's records, shared by the gRPC server and the SDK.

The SDK yields the same items as `Deployment.stream` (`{"type": "token", ...}` dicts, then a
GenerateResult), so code written against the in-process API runs unchanged over gRPC.
"""
from __future__ import annotations

import math
from typing import Any

from pd_serve.proto import pd_serve_pb2 as pb
from pd_serve.request import GenerateResult, InvalidRequestError

# Summary fields that are `optional` in the proto: unset on the wire means None in the record.
_OPTIONAL_RESULT_FIELDS = ("prefill_worker", "kv_transfer_s", "finish_reason", "predicted_ttft_s",
                           "fallback")


# ---- requests ------------------------------------------------------------------------------
def request_to_proto(prompt: str | None = None, prompt_token_ids: Any = None, max_tokens: int = 16,
                     temperature: float = 0.0, ignore_eos: bool = False, route: str = "auto",
                     top_p: float = 1.0, seed: int | None = None,
                     request_id: str | None = None) -> pb.GenerateRequest:
    """Client side: build the message; a value protobuf cannot carry is an InvalidRequestError.
    Range checks (empty prompt, max_tokens < 1, ...) are the server's, so they stay in one place."""
    msg = pb.GenerateRequest()
    fields = {"prompt": prompt, "max_tokens": max_tokens, "temperature": temperature,
              "top_p": top_p, "seed": seed, "ignore_eos": ignore_eos, "route": route or "auto",
              "request_id": request_id or ""}
    for name, value in fields.items():
        if value is not None:
            _set_field(msg, name, value)
    if prompt_token_ids is not None:
        if isinstance(prompt_token_ids, (str, bytes)):
            raise InvalidRequestError("prompt_token_ids must be a list of integers")
        try:
            msg.prompt_token_ids.extend(prompt_token_ids)
        except (TypeError, ValueError) as err:
            raise InvalidRequestError(f"prompt_token_ids must be a list of integers: {err}") from None
    return msg


def _set_field(msg: pb.GenerateRequest, name: str, value: Any) -> None:
    try:
        setattr(msg, name, value)
    except (TypeError, ValueError) as err:
        raise InvalidRequestError(f"{name} has the wrong type ({type(value).__name__}): {err}") from None


def request_kwargs_from_proto(msg: pb.GenerateRequest) -> dict[str, Any]:
    """Server side: the message as `make_request` keyword arguments ("not given" -> default)."""
    kw: dict[str, Any] = {
        "prompt": msg.prompt if msg.HasField("prompt") else None,
        "prompt_token_ids": list(msg.prompt_token_ids) if msg.prompt_token_ids else None,
        "ignore_eos": msg.ignore_eos,
        "route": msg.route or "auto",
        "request_id": msg.request_id or None,
    }
    if msg.HasField("max_tokens"):
        kw["max_tokens"] = msg.max_tokens
    for name in ("temperature", "top_p"):
        if msg.HasField(name):
            value = getattr(msg, name)
            if not math.isfinite(value):  # make_request's range checks let inf (and nan) through
                raise InvalidRequestError(f"{name} must be a finite number, got {value!r}")
            kw[name] = value
    if msg.HasField("seed"):
        kw["seed"] = msg.seed
    return kw


# ---- responses -----------------------------------------------------------------------------
def token_item_to_proto(item: dict) -> pb.GenerateResponse:
    return pb.GenerateResponse(tokens=pb.TokenChunk(token_ids=item["token_ids"], t=item["t"],
                                                    finish_reason=item.get("finish_reason")))


def result_to_proto(result: GenerateResult | dict) -> pb.GenerateResponse:
    d = result.to_dict() if isinstance(result, GenerateResult) else dict(result)
    for name in _OPTIONAL_RESULT_FIELDS:
        if d.get(name) is None:
            d.pop(name, None)
    return pb.GenerateResponse(summary=pb.Summary(**d))


def item_from_proto(msg: pb.GenerateResponse) -> dict:
    """One streamed message as the in-process API's item."""
    if msg.WhichOneof("item") == "tokens":
        t = msg.tokens
        return {"type": "token", "token_ids": list(t.token_ids), "t": t.t,
                "finish_reason": t.finish_reason if t.HasField("finish_reason") else None}
    return {"type": "result", "result": result_from_proto(msg.summary)}


def result_from_proto(s: pb.Summary) -> GenerateResult:
    optional = {name: getattr(s, name) if s.HasField(name) else None
                for name in _OPTIONAL_RESULT_FIELDS}
    return GenerateResult(
        request_id=s.request_id, token_ids=list(s.token_ids), text=s.text, route=s.route,
        ttft_s=s.ttft_s, e2e_s=s.e2e_s, itl_s=list(s.itl_s), decode_worker=s.decode_worker,
        kv_transfer_bytes=s.kv_transfer_bytes, num_prompt_tokens=s.num_prompt_tokens,
        decision_reason=s.decision_reason, token_times=list(s.token_times), version=s.version,
        **optional)


# ---- health and status ---------------------------------------------------------------------
def status_to_proto(status: dict, model: dict) -> pb.StatusResponse:
    """`Router.status()` (plus the model's id and limits) as a StatusResponse."""
    msg = pb.StatusResponse(policy=status.get("policy", ""),
                            model=pb.ModelInfo(**{k: model[k] for k in ("id", "max_model_len",
                                                                         "vocab_size")}))
    for wid, w in status.get("workers", {}).items():
        load = w.get("load") or {}
        msg.workers.append(pb.WorkerStatus(
            worker_id=wid, role=w.get("role", ""), healthy=bool(w.get("healthy")),
            engine_id=w.get("engine_id", ""), node_ip=w.get("node_ip", ""),
            num_running=int(load.get("num_running", 0)), num_waiting=int(load.get("num_waiting", 0)),
            kv_cache_usage=float(load.get("kv_cache_usage", 0.0)),
            num_inflight=int(w.get("inflight", 0)),
            num_queued_prefill_tokens=int(load.get("num_queued_prefill_tokens", 0))))
    for key, value in status.get("counters", {}).items():
        msg.counters[key] = int(value)
    for link in status.get("links", []):
        msg.links.append(pb.LinkModel(**link))
    return msg


def status_from_proto(msg: pb.StatusResponse) -> dict:
    """The StatusResponse shaped like `Deployment.status()`, plus `links` and `model`."""
    workers = {w.worker_id: {
        "role": w.role, "healthy": w.healthy, "engine_id": w.engine_id, "node_ip": w.node_ip,
        "inflight": w.num_inflight,
        "load": {"num_running": w.num_running, "num_waiting": w.num_waiting,
                 "kv_cache_usage": w.kv_cache_usage,
                 "num_queued_prefill_tokens": w.num_queued_prefill_tokens}} for w in msg.workers}
    links = [{"prefill_worker": l.prefill_worker, "decode_worker": l.decode_worker,
              "alpha_s": l.alpha_s, "beta_bytes_per_s": l.beta_bytes_per_s,
              "num_updates": l.num_updates} for l in msg.links]
    model = {"id": msg.model.id, "max_model_len": msg.model.max_model_len,
             "vocab_size": msg.model.vocab_size}
    return {"workers": workers, "policy": msg.policy, "counters": dict(msg.counters),
            "links": links, "model": model}


def health_to_proto(health: dict) -> pb.HealthResponse:
    return pb.HealthResponse(is_healthy=health["is_healthy"],
                             num_healthy_workers=health["num_healthy_workers"],
                             detail=health.get("detail", ""))


def health_from_proto(msg: pb.HealthResponse) -> dict:
    return {"is_healthy": msg.is_healthy, "num_healthy_workers": msg.num_healthy_workers,
            "detail": msg.detail}

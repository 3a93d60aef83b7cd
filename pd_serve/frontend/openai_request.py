"""An OpenAI `/v1/completions` request body -> `make_request` keyword arguments.

Types are checked here and values by `make_request`, so HTTP rejects exactly what gRPC and the
in-process API reject, with the same messages. Parameters OpenAI or vLLM define that pd-serve
cannot honour are refused when they would change the output (`n: 2`, `stop: ["\\n"]`), and
accepted at their neutral value, which is what clients send by default. Fields nobody defines
are ignored and reported back, so the server can log them as vLLM's server does.
"""
from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import Any

from pd_serve.request import InvalidRequestError

OPENAI_DEFAULT_MAX_TOKENS = 16
OPENAI_DEFAULT_TEMPERATURE = 1.0

# Known fields pd-serve cannot honour, each with the values that mean "off".
_NEUTRAL_VALUES: dict[str, tuple[Any, ...]] = {
    "n": (None, 1), "best_of": (None, 1), "echo": (None, False), "logprobs": (None,),
    "stop": (None, "", []), "stop_token_ids": (None, []), "suffix": (None, ""),
    "presence_penalty": (None, 0, 0.0), "frequency_penalty": (None, 0, 0.0),
    "repetition_penalty": (None, 1, 1.0), "logit_bias": (None, {}), "top_k": (None, -1, 0),
    "min_p": (None, 0, 0.0), "min_tokens": (None, 0),
}
# Known fields accepted and without effect here.
_NO_EFFECT = frozenset({"user"})
_HANDLED = frozenset({"model", "prompt", "max_tokens", "temperature", "top_p", "seed", "stream",
                      "stream_options", "ignore_eos", "route"})


@dataclass(frozen=True)
class CompletionCall:
    """One parsed completions request."""

    request_kwargs: dict[str, Any]     # for make_request
    model: str | None
    is_stream: bool
    include_usage: bool                # stream_options.include_usage: a final usage chunk
    ignored_fields: tuple[str, ...]    # unknown fields, ignored (the server logs them)


def parse_json_object(body: bytes) -> dict[str, Any]:
    """The body as a JSON object; InvalidRequestError for malformed JSON or another JSON type."""
    def reject_constant(name: str) -> Any:
        raise InvalidRequestError(f"invalid JSON: {name} is not a JSON number")

    try:
        data = json.loads(body, parse_constant=reject_constant)
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise InvalidRequestError(f"invalid JSON in the request body: {err}") from None
    if not isinstance(data, dict):
        raise InvalidRequestError(f"the request body must be a JSON object, got {type(data).__name__}")
    return data


def completion_call_from_json(body: dict[str, Any]) -> CompletionCall:
    for name, neutral in _NEUTRAL_VALUES.items():
        if name in body and not _is_neutral(body[name], neutral):
            raise InvalidRequestError(f"{name}={body[name]!r} is not supported by pd-serve "
                                      f"(allowed: {' or '.join(repr(v) for v in neutral)})")
    kwargs = _prompt_kwargs(body.get("prompt"))
    kwargs["max_tokens"] = _or_default(body, "max_tokens", OPENAI_DEFAULT_MAX_TOKENS)
    kwargs["temperature"] = _finite(body, "temperature", OPENAI_DEFAULT_TEMPERATURE)
    kwargs["top_p"] = _finite(body, "top_p", 1.0)
    kwargs["seed"] = body.get("seed")
    kwargs["ignore_eos"] = _or_default(body, "ignore_eos", False)
    kwargs["route"] = _or_default(body, "route", "auto")
    model = _typed(body, "model", str, "a string")
    is_stream = bool(_typed(body, "stream", bool, "a boolean"))
    options = _typed(body, "stream_options", dict, "an object") or {}
    include_usage = bool(_typed(options, "stream_options.include_usage", bool, "a boolean",
                                key="include_usage"))
    known = _HANDLED | _NO_EFFECT | set(_NEUTRAL_VALUES)
    ignored = tuple(sorted(k for k in body if k not in known))
    return CompletionCall(kwargs, model, is_stream, include_usage, ignored)


def _prompt_kwargs(prompt: Any) -> dict[str, Any]:
    """OpenAI's prompt forms: a string, token ids, or a one-element list of either."""
    if prompt is None:
        raise InvalidRequestError("prompt is required (a string or a list of token ids)")
    if isinstance(prompt, str):
        return {"prompt": prompt}
    if not isinstance(prompt, list):
        raise InvalidRequestError(f"prompt must be a string or a list of token ids, got "
                                  f"{type(prompt).__name__}")
    if not prompt:
        raise InvalidRequestError("prompt is empty")
    if all(isinstance(p, (str, list)) for p in prompt):
        if len(prompt) > 1:
            raise InvalidRequestError(f"batched prompts are not supported: got {len(prompt)} "
                                      "prompts, send one per request")
        return _prompt_kwargs(prompt[0]) if isinstance(prompt[0], str) else {"prompt_token_ids": prompt[0]}
    return {"prompt_token_ids": prompt}  # make_request names a non-integer element


def _is_neutral(value: Any, neutral: tuple[Any, ...]) -> bool:
    # Booleans are ints in Python: `n: true` must not pass as `n: 1`, nor `echo: 0` as false.
    if isinstance(value, bool):
        return any(v is value for v in neutral)
    return any(value == v and not isinstance(v, bool) for v in neutral)


def _or_default(body: dict[str, Any], name: str, default: Any) -> Any:
    value = body.get(name)
    return default if value is None else value


def _finite(body: dict[str, Any], name: str, default: float) -> Any:
    value = _or_default(body, name, default)
    if isinstance(value, float) and not math.isfinite(value):
        raise InvalidRequestError(f"{name} must be a finite number, got {value!r}")
    return value  # other types: make_request says what it must be


def _typed(body: dict[str, Any], name: str, kind: type, what: str, key: str | None = None) -> Any:
    value = body.get(key or name)
    if value is not None and not isinstance(value, kind):
        raise InvalidRequestError(f"{name} must be {what}, got {type(value).__name__} {value!r}")
    return value

"""A generate request and its result: the typed records every front door shares.

`validate_request` is the one place that decides what a bad request is (empty prompt, too long,
max_tokens < 1, unknown route, negative temperature, token ids outside the vocabulary), so the
in-process API, gRPC and HTTP reject the same inputs with the same messages.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Sequence

ROUTES = ("auto", "colocated", "disaggregated")
WIRE_VERSION = 1


class InvalidRequestError(ValueError):
    """The request cannot be served as given; the message says which field and why."""


@dataclass(frozen=True)
class GenerateRequest:
    prompt: str | None = None
    prompt_token_ids: tuple[int, ...] | None = None
    max_tokens: int = 16
    temperature: float = 0.0
    top_p: float = 1.0
    ignore_eos: bool = False
    seed: int | None = None
    route: str = "auto"
    request_id: str | None = None

    def sampling_params(self) -> dict[str, Any]:
        return {"max_tokens": self.max_tokens, "temperature": self.temperature, "top_p": self.top_p,
                "ignore_eos": self.ignore_eos, "seed": self.seed}


@dataclass
class GenerateResult:
    """What one request produced and how: the fields every front door returns."""

    request_id: str
    token_ids: list[int]
    text: str
    route: str
    ttft_s: float
    e2e_s: float
    itl_s: list[float]
    prefill_worker: str | None
    decode_worker: str
    kv_transfer_bytes: int
    kv_transfer_s: float | None
    finish_reason: str | None
    num_prompt_tokens: int = 0
    predicted_ttft_s: float | None = None
    decision_reason: str = ""
    fallback: str | None = None  # why the request did not take the route it was given, if so
    token_times: list[float] = field(default_factory=list)  # router wall-clock time per token
    version: int = WIRE_VERSION

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _is_int(x: Any) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


def _is_number(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool)


def make_request(prompt: str | None = None, prompt_token_ids: Sequence[int] | None = None,
                 max_tokens: int = 16, temperature: float = 0.0, ignore_eos: bool = False,
                 route: str = "auto", top_p: float = 1.0, seed: int | None = None,
                 request_id: str | None = None) -> GenerateRequest:
    """Check types and value ranges that need no model knowledge; raise InvalidRequestError."""
    if (prompt is None) == (prompt_token_ids is None):
        raise InvalidRequestError("give exactly one of prompt (text) or prompt_token_ids")
    if prompt is not None:
        if not isinstance(prompt, str):
            raise InvalidRequestError(f"prompt must be a string, got {type(prompt).__name__}")
        if not prompt:
            raise InvalidRequestError("prompt is empty")
    ids: tuple[int, ...] | None = None
    if prompt_token_ids is not None:
        if isinstance(prompt_token_ids, (str, bytes)) or not hasattr(prompt_token_ids, "__iter__"):
            raise InvalidRequestError("prompt_token_ids must be a list of integers")
        ids = tuple(prompt_token_ids)
        if not ids:
            raise InvalidRequestError("prompt_token_ids is empty")
        bad = next((t for t in ids if not _is_int(t)), None)
        if bad is not None:
            raise InvalidRequestError(f"prompt_token_ids must be integers, got {bad!r}")
    if not _is_int(max_tokens) or max_tokens < 1:
        raise InvalidRequestError(f"max_tokens must be an integer >= 1, got {max_tokens!r}")
    if not _is_number(temperature) or temperature < 0:
        raise InvalidRequestError(f"temperature must be a number >= 0, got {temperature!r}")
    if not _is_number(top_p) or not 0 < top_p <= 1:
        raise InvalidRequestError(f"top_p must be a number in (0, 1], got {top_p!r}")
    if not isinstance(ignore_eos, bool):
        raise InvalidRequestError(f"ignore_eos must be a boolean, got {ignore_eos!r}")
    if seed is not None and not _is_int(seed):
        raise InvalidRequestError(f"seed must be an integer, got {seed!r}")
    if route not in ROUTES:
        raise InvalidRequestError(f"unknown route {route!r}; allowed: {', '.join(ROUTES)}")
    return GenerateRequest(prompt, ids, max_tokens, float(temperature), float(top_p), ignore_eos,
                           seed, route, request_id)


def check_against_model(token_ids: Sequence[int], max_tokens: int, vocab_size: int,
                        max_model_len: int) -> None:
    """Checks that need the model: ids inside the vocabulary, prompt and output within length."""
    bad = next((t for t in token_ids if not 0 <= t < vocab_size), None)
    if bad is not None:
        raise InvalidRequestError(f"token id {bad} is outside the vocabulary [0, {vocab_size})")
    if len(token_ids) >= max_model_len:
        raise InvalidRequestError(
            f"prompt has {len(token_ids)} tokens; max_model_len is {max_model_len}, so at most "
            f"{max_model_len - 1} prompt tokens fit")
    if len(token_ids) + max_tokens > max_model_len:
        raise InvalidRequestError(
            f"prompt ({len(token_ids)} tokens) + max_tokens ({max_tokens}) exceeds max_model_len "
            f"{max_model_len}")

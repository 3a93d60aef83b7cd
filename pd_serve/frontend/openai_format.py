"""OpenAI's wire shapes for completions, as vLLM's server writes them: responses, stream
chunks, server-sent events ending in `data: [DONE]`, errors, and the model list.

Beyond OpenAI's fields a choice carries `token_ids` (as vLLM's does with `return_token_ids`),
and the response or the last chunk a `pd_serve` object saying how the request was served. Clients
ignore fields they do not know, the `openai` package included.
"""
from __future__ import annotations

import json
from typing import Any

from pd_serve.frontend.settings import ModelInfo

SSE_DONE = "data: [DONE]\n\n"
OWNED_BY = "pd-serve"
SUMMARY_FIELDS = ("request_id", "route", "prefill_worker", "decode_worker", "ttft_s",
                  "predicted_ttft_s", "e2e_s", "kv_transfer_bytes", "kv_transfer_s",
                  "decision_reason", "fallback", "num_prompt_tokens")


def sse_event(payload: dict[str, Any]) -> str:
    """One server-sent event; `data: ` with the space, as OpenAI's and vLLM's clients expect."""
    return f"data: {json.dumps(payload, separators=(',', ':'))}\n\n"


def pd_serve_summary(result: dict[str, Any]) -> dict[str, Any]:
    """How the request was served: route, workers, TTFT (actual and predicted), transfer."""
    return {k: result.get(k) for k in SUMMARY_FIELDS}


def usage(result: dict[str, Any]) -> dict[str, int]:
    prompt, completion = result["num_prompt_tokens"], len(result["token_ids"])
    return {"prompt_tokens": prompt, "completion_tokens": completion,
            "total_tokens": prompt + completion}


def _choice(text: str, token_ids: list[int], finish_reason: str | None) -> dict[str, Any]:
    return {"index": 0, "text": text, "logprobs": None, "finish_reason": finish_reason,
            "stop_reason": None, "token_ids": token_ids}


def _envelope(completion_id: str, created: int, model: str) -> dict[str, Any]:
    return {"id": completion_id, "object": "text_completion", "created": created, "model": model}


def completion_response(completion_id: str, created: int, model: str,
                        result: dict[str, Any]) -> dict[str, Any]:
    """The whole (non-streamed) completion."""
    return {**_envelope(completion_id, created, model),
            "choices": [_choice(result["text"], result["token_ids"], result["finish_reason"])],
            "usage": usage(result), "pd_serve": pd_serve_summary(result)}


def completion_chunk(completion_id: str, created: int, model: str, text: str, token_ids: list[int],
                     finish_reason: str | None = None,
                     summary: dict[str, Any] | None = None) -> dict[str, Any]:
    chunk = {**_envelope(completion_id, created, model),
             "choices": [_choice(text, token_ids, finish_reason)]}
    if summary is not None:
        chunk["pd_serve"] = summary
    return chunk


def usage_chunk(completion_id: str, created: int, model: str, result: dict[str, Any]) -> dict[str, Any]:
    """The final chunk of a stream with `stream_options.include_usage`: no choices, the usage."""
    return {**_envelope(completion_id, created, model), "choices": [], "usage": usage(result)}


def error_body(message: str, error_type: str, http_status: int) -> dict[str, Any]:
    return {"error": {"message": message, "type": error_type, "param": None, "code": http_status}}


def model_list(model: ModelInfo, created: int) -> dict[str, Any]:
    """`/v1/models`: vLLM's card, whose `root` vLLM's benchmark client loads the tokenizer from."""
    card = {"id": model.id, "object": "model", "created": created, "owned_by": OWNED_BY,
            "root": model.root, "parent": None, "max_model_len": model.max_model_len,
            "permission": []}
    return {"object": "list", "data": [card]}

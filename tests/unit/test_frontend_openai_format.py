"""OpenAI's wire shapes: SSE events as OpenAI's and vLLM's clients parse them, chunks,
responses with usage and the pd_serve summary, errors, and the model card."""
from __future__ import annotations

import json

from pd_serve.frontend import openai_format as fmt
from pd_serve.frontend.settings import ModelInfo

RESULT = {"request_id": "r1", "token_ids": [5, 6, 7], "text": "abc", "route": "disaggregated",
          "ttft_s": 0.1, "e2e_s": 0.3, "itl_s": [0.1, 0.1], "prefill_worker": "prefill-0",
          "decode_worker": "both-0", "kv_transfer_bytes": 4096, "kv_transfer_s": 0.002,
          "finish_reason": "length", "num_prompt_tokens": 10, "predicted_ttft_s": 0.12,
          "decision_reason": "long prompt", "fallback": None, "token_times": [1.0, 1.1, 1.2],
          "version": 1}


def test_an_sse_event_is_one_data_line_then_a_blank_line():
    event = fmt.sse_event({"a": 1, "b": "é"})
    assert event.startswith("data: ") and event.endswith("\n\n") and event.count("\n") == 2
    assert json.loads(event.removeprefix("data: ")) == {"a": 1, "b": "é"}
    assert fmt.SSE_DONE == "data: [DONE]\n\n"


def test_a_chunk_has_openais_fields_and_the_token_ids():
    chunk = fmt.completion_chunk("cmpl-1", 100, "m", "ab", [5, 6])
    assert chunk["object"] == "text_completion" and chunk["id"] == "cmpl-1"
    (choice,) = chunk["choices"]
    assert choice == {"index": 0, "text": "ab", "logprobs": None, "finish_reason": None,
                      "stop_reason": None, "token_ids": [5, 6]}
    assert "pd_serve" not in chunk


def test_the_last_chunk_carries_finish_reason_and_the_summary():
    chunk = fmt.completion_chunk("cmpl-1", 100, "m", "c", [7], "length", fmt.pd_serve_summary(RESULT))
    assert chunk["choices"][0]["finish_reason"] == "length"
    assert chunk["pd_serve"]["route"] == "disaggregated"
    assert chunk["pd_serve"]["kv_transfer_bytes"] == 4096


def test_a_whole_response_has_text_usage_and_how_it_was_served():
    resp = fmt.completion_response("cmpl-1", 100, "m", RESULT)
    assert resp["choices"][0]["text"] == "abc" and resp["choices"][0]["token_ids"] == [5, 6, 7]
    assert resp["usage"] == {"prompt_tokens": 10, "completion_tokens": 3, "total_tokens": 13}
    summary = resp["pd_serve"]
    assert summary["prefill_worker"] == "prefill-0" and summary["decode_worker"] == "both-0"
    assert summary["ttft_s"] == 0.1 and summary["predicted_ttft_s"] == 0.12
    assert summary["kv_transfer_s"] == 0.002
    json.dumps(resp)  # serializable as is


def test_the_usage_chunk_has_no_choices():
    chunk = fmt.usage_chunk("cmpl-1", 100, "m", RESULT)
    assert chunk["choices"] == [] and chunk["usage"]["completion_tokens"] == 3


def test_errors_use_openais_envelope():
    assert fmt.error_body("bad", "invalid_request_error", 400) == {
        "error": {"message": "bad", "type": "invalid_request_error", "param": None, "code": 400}}


def test_the_model_card_names_the_tokenizer_root_for_vllms_benchmark():
    data = fmt.model_list(ModelInfo("tiny", "/models/tiny", "/models/tiny", 8192, 259), 100)
    (card,) = data["data"]
    assert data["object"] == "list" and card["id"] == "tiny" and card["root"] == "/models/tiny"
    assert card["max_model_len"] == 8192

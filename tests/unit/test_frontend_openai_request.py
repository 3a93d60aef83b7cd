"""OpenAI completions JSON -> make_request arguments: every OpenAI prompt form, defaults as
OpenAI's, wrong types and unsupported parameters refused with the field's name, unknown
fields ignored and reported."""
from __future__ import annotations

import pytest

from pd_serve.frontend.openai_request import completion_call_from_json, parse_json_object
from pd_serve.request import InvalidRequestError, make_request


def _kwargs(body):
    return completion_call_from_json(body).request_kwargs


@pytest.mark.parametrize("prompt, expected", [
    ("hello", {"prompt": "hello"}),
    ([1, 2, 3], {"prompt_token_ids": [1, 2, 3]}),
    (["hello"], {"prompt": "hello"}),
    ([[4, 5]], {"prompt_token_ids": [4, 5]}),
])
def test_every_single_prompt_form_maps(prompt, expected):
    kw = _kwargs({"prompt": prompt})
    assert {k: kw[k] for k in expected} == expected
    make_request(**kw)  # and is a valid request


def test_defaults_are_openais():
    kw = _kwargs({"prompt": "x"})
    assert kw["max_tokens"] == 16 and kw["temperature"] == 1.0 and kw["top_p"] == 1.0
    assert kw["route"] == "auto" and kw["ignore_eos"] is False and kw["seed"] is None
    # null means "default" too, as OpenAI's server treats it
    assert _kwargs({"prompt": "x", "max_tokens": None, "temperature": None})["temperature"] == 1.0


def test_pd_serve_and_vllm_extras_are_honoured():
    call = completion_call_from_json({"prompt": "x", "route": "disaggregated", "ignore_eos": True,
                                      "seed": 7, "max_tokens": 4, "temperature": 0,
                                      "stream": True, "stream_options": {"include_usage": True},
                                      "model": "m"})
    assert call.request_kwargs["route"] == "disaggregated" and call.request_kwargs["seed"] == 7
    assert call.is_stream and call.include_usage and call.model == "m"


@pytest.mark.parametrize("body, message", [
    ({}, "prompt is required"),
    ({"prompt": 5}, "prompt must be a string or a list of token ids, got int"),
    ({"prompt": []}, "prompt is empty"),
    ({"prompt": ["a", "b"]}, "batched prompts are not supported: got 2"),
    ({"prompt": "x", "stream": "yes"}, "stream must be a boolean, got str"),
    ({"prompt": "x", "model": 3}, "model must be a string"),
    ({"prompt": "x", "stream_options": []}, "stream_options must be an object"),
    ({"prompt": "x", "stream_options": {"include_usage": 1}}, "include_usage must be a boolean"),
    ({"prompt": "x", "n": 2}, "n=2 is not supported"),
    ({"prompt": "x", "n": True}, "n=True is not supported"),   # a bool is not the integer 1
    ({"prompt": "x", "stop": ["\n"]}, "stop=.* is not supported"),
    ({"prompt": "x", "logprobs": 1}, "logprobs=1 is not supported"),
    ({"prompt": "x", "echo": True}, "echo=True is not supported"),
])
def test_malformed_fields_are_named(body, message):
    with pytest.raises(InvalidRequestError, match=message):
        completion_call_from_json(body)


@pytest.mark.parametrize("body, message", [
    ({"prompt": "x", "max_tokens": "5"}, "max_tokens must be an integer"),
    ({"prompt": "x", "max_tokens": 0}, "max_tokens must be an integer >= 1, got 0"),
    ({"prompt": "x", "temperature": "hot"}, "temperature must be a number"),
    ({"prompt": "x", "temperature": -1}, "temperature must be a number >= 0"),
    ({"prompt": "x", "route": "sideways"}, "unknown route 'sideways'"),
    ({"prompt": "x", "route": 3}, "unknown route 3"),
    ({"prompt": "x", "ignore_eos": "true"}, "ignore_eos must be a boolean"),
    ({"prompt": [1, "a"]}, "prompt_token_ids must be integers, got 'a'"),
    ({"prompt": [1, 2.5]}, "prompt_token_ids must be integers, got 2.5"),
    ({"prompt": "x", "seed": 1.5}, "seed must be an integer"),
])
def test_wrong_values_are_named_by_make_request(body, message):
    with pytest.raises(InvalidRequestError, match=message):
        make_request(**_kwargs(body))


def test_neutral_values_of_unsupported_parameters_pass():
    # What vLLM's benchmark client and the openai package send by default.
    call = completion_call_from_json({"prompt": "x", "n": 1, "logprobs": None, "echo": False,
                                      "stop": None, "repetition_penalty": 1.0, "best_of": 1,
                                      "presence_penalty": 0, "frequency_penalty": 0.0, "user": "u"})
    assert call.ignored_fields == ()


def test_unknown_fields_are_ignored_and_reported():
    call = completion_call_from_json({"prompt": "x", "my_extra": 1, "another": {}})
    assert call.ignored_fields == ("another", "my_extra")


@pytest.mark.parametrize("raw, message", [
    (b"{bad json", "invalid JSON in the request body"),
    (b"[1, 2]", "must be a JSON object, got list"),
    (b'{"prompt": "x", "temperature": NaN}', "NaN is not a JSON number"),
    (b"\xff\xfe", "invalid JSON"),
])
def test_bodies_that_are_not_a_json_object_are_refused(raw, message):
    with pytest.raises(InvalidRequestError, match=message):
        parse_json_object(raw)


def test_infinite_temperature_is_refused():
    with pytest.raises(InvalidRequestError, match="temperature must be a finite number"):
        completion_call_from_json({"prompt": "x", "temperature": float("inf")})

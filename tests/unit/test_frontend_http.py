"""The OpenAI-compatible HTTP app against a fake deployment (no Ray, no network): the `openai`
package works unchanged, SSE streams end with [DONE], bad input is a 400 with a message in
OpenAI's error format, the token rule holds on every path, and the server keeps serving."""
from __future__ import annotations

import json
import logging

import openai
import pytest
from starlette.testclient import TestClient

from pd_serve.frontend.errors import UnavailableError
from pd_serve.frontend.http_server import build_app

from .frontend_fakes import OUTPUT_IDS, OUTPUT_TEXT, FakeBackend

TOKEN = "s3cret"
AUTH = {"Authorization": f"Bearer {TOKEN}"}


@pytest.fixture
def backend():
    return FakeBackend()


@pytest.fixture
def http(backend):
    return TestClient(build_app(backend, backend.tokenizer, token=TOKEN))


@pytest.fixture
def oai(http):
    return openai.OpenAI(base_url="http://testserver/v1", api_key=TOKEN, http_client=http,
                         max_retries=0)


def _events(body: str) -> list[str]:
    assert body.endswith("\n\n")
    return [e.removeprefix("data: ") for e in body.strip().split("\n\n")]


def test_openai_package_gets_a_completion_with_token_ids_and_usage(oai, backend):
    out = oai.completions.create(model="fake-model", prompt="hello", max_tokens=len(OUTPUT_IDS),
                                 temperature=0)
    choice = out.choices[0]
    assert choice.text == OUTPUT_TEXT and choice.finish_reason == "length"
    assert choice.model_extra["token_ids"] == OUTPUT_IDS
    assert out.usage.prompt_tokens == 5 and out.usage.completion_tokens == len(OUTPUT_IDS)
    assert out.model_extra["pd_serve"]["decode_worker"] == "both-0"
    assert backend.requests[-1].temperature == 0.0 and backend.requests[-1].prompt == "hello"


def test_openai_package_streams_text_that_adds_up(oai):
    chunks = list(oai.completions.create(model="fake-model", prompt=[1, 2, 3],
                                         max_tokens=len(OUTPUT_IDS), stream=True,
                                         stream_options={"include_usage": True}))
    with_choices = [c for c in chunks if c.choices]
    assert "".join(c.choices[0].text for c in with_choices) == OUTPUT_TEXT
    assert [t for c in with_choices for t in c.choices[0].model_extra["token_ids"]] == OUTPUT_IDS
    assert [c.choices[0].finish_reason for c in with_choices][-1] == "length"
    assert all(c.choices[0].finish_reason is None for c in with_choices[:-1])
    assert chunks[-1].usage.completion_tokens == len(OUTPUT_IDS)   # the usage chunk comes last


def test_the_raw_stream_is_openai_sse_ending_with_done(http):
    r = http.post("/v1/completions", headers=AUTH,
                  json={"prompt": "hi", "max_tokens": 3, "stream": True})
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
    events = _events(r.text)
    assert events[-1] == "[DONE]"
    chunks = [json.loads(e) for e in events[:-1]]
    assert len(chunks) == 3  # one per token; no usage chunk unless asked
    assert chunks[-1]["pd_serve"]["route"] == "colocated" and "pd_serve" not in chunks[0]


@pytest.mark.parametrize("body, message", [
    (b"{not json", "invalid JSON"),
    (b"[1, 2]", "must be a JSON object"),
    (json.dumps({"prompt": ""}).encode(), "prompt is empty"),
    (json.dumps({"prompt": "x", "max_tokens": 0}).encode(), "max_tokens must be an integer >= 1"),
    (json.dumps({"prompt": "x", "max_tokens": "5"}).encode(), "max_tokens must be an integer"),
    (json.dumps({"prompt": "x", "route": "sideways"}).encode(), "unknown route"),
    (json.dumps({"prompt": "x", "temperature": -1}).encode(), "temperature must be a number >= 0"),
    (json.dumps({"prompt": "x", "stream": "yes"}).encode(), "stream must be a boolean"),
    (json.dumps({"prompt": [1, 2, 1000]}).encode(), "outside the vocabulary"),
    (json.dumps({"prompt": list(range(100))}).encode(), "max_model_len"),
    (json.dumps({"prompt": [1, 2, 1000], "stream": True}).encode(), "outside the vocabulary"),
])
def test_bad_input_is_a_400_with_a_message_and_service_continues(http, body, message):
    r = http.post("/v1/completions", headers=AUTH, content=body)
    assert r.status_code == 400, r.text
    err = r.json()["error"]
    assert message in err["message"] and err["type"] == "invalid_request_error" and err["code"] == 400
    ok = http.post("/v1/completions", headers=AUTH, json={"prompt": "again", "max_tokens": 2})
    assert ok.status_code == 200 and len(ok.json()["choices"][0]["token_ids"]) == 2


def test_openai_package_raises_bad_request_with_the_message(oai):
    with pytest.raises(openai.BadRequestError, match="prompt is empty"):
        oai.completions.create(model="fake-model", prompt="", max_tokens=3)


@pytest.mark.parametrize("path, method", [("/v1/completions", "post"), ("/v1/models", "get"),
                                          ("/health", "get"), ("/metrics", "get")])
@pytest.mark.parametrize("headers", [{}, {"Authorization": "Bearer wrong"},
                                     {"Authorization": TOKEN}])
def test_every_path_needs_the_token(http, path, method, headers):
    r = getattr(http, method)(path, headers=headers, **({"json": {"prompt": "x"}} if method == "post" else {}))
    assert r.status_code == 401 and r.json()["error"]["type"] == "authentication_error"
    assert r.headers["www-authenticate"] == "Bearer"


def test_openai_package_with_a_wrong_key_is_refused(http):
    bad = openai.OpenAI(base_url="http://testserver/v1", api_key="wrong", http_client=http,
                        max_retries=0)
    with pytest.raises(openai.AuthenticationError):
        bad.completions.create(model="fake-model", prompt="x", max_tokens=2)


def test_without_a_token_no_header_is_needed(backend):
    open_http = TestClient(build_app(backend, backend.tokenizer, token=None))
    assert open_http.post("/v1/completions", json={"prompt": "x", "max_tokens": 2}).status_code == 200


def test_unknown_fields_are_ignored_with_a_warning(http, caplog):
    with caplog.at_level(logging.WARNING, logger="pd_serve.frontend.http_server"):
        r = http.post("/v1/completions", headers=AUTH,
                      json={"prompt": "x", "max_tokens": 2, "my_extra_field": 1})
    assert r.status_code == 200
    assert "my_extra_field" in caplog.text


def test_overload_is_a_429(http, backend):
    backend.max_inflight_requests = 0
    r = http.post("/v1/completions", headers=AUTH, json={"prompt": "x"})
    assert r.status_code == 429 and r.json()["error"]["type"] == "rate_limit_error"


def test_a_failure_mid_stream_is_reported_in_the_stream(http, backend):
    backend.fail_after_tokens = UnavailableError("decode worker died")
    r = http.post("/v1/completions", headers=AUTH, json={"prompt": "x", "max_tokens": 5, "stream": True})
    events = _events(r.text)
    assert events[-1] == "[DONE]"
    err = json.loads(events[-2])["error"]
    assert err["code"] == 503 and "decode worker died" in err["message"]


def test_models_health_and_metrics(http):
    models = http.get("/v1/models", headers=AUTH).json()
    assert models["data"][0]["id"] == "fake-model" and models["data"][0]["root"] == "/models/fake"
    health = http.get("/health", headers=AUTH)
    assert health.status_code == 200 and health.json()["is_healthy"]
    metrics = http.get("/metrics", headers=AUTH)
    assert metrics.headers["content-type"].startswith("text/plain")
    assert "pd_serve:route_fallbacks_total" in metrics.text

"""The front doors end to end on CPU: a hybrid deployment (real vLLM engines, real NIXL) serving
the gRPC API and OpenAI-compatible HTTP from its frontend actor, with a token required.

One deployment serves the whole module; tests run in file order, the metrics check last but
one (after the traffic of the others), then shutdown.
"""
from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys

os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")

import grpc  # noqa: E402
import httpx  # noqa: E402
import openai  # noqa: E402
import pytest  # noqa: E402
from prometheus_client.parser import text_string_to_metric_families  # noqa: E402

import pd_serve  # noqa: E402
from pd_serve import deploy  # noqa: E402
from pd_serve.frontend import FrontendSettings, ModelInfo, start_frontend, stop_frontend  # noqa: E402
from pd_serve.metrics import METRIC_NAMES  # noqa: E402
from pd_serve.proto import pd_serve_pb2 as pb  # noqa: E402
from pd_serve.proto import pd_serve_pb2_grpc as pb_grpc  # noqa: E402

from .conftest import BAD_INPUTS, LEFT_MAX_TOKENS, distinct_prompt, wait_until_nothing_left  # noqa: E402

pytestmark = pytest.mark.integration

TOKEN = "frontdoor-test-token"
GREEDY_PROMPT = "The front door of a serving system"
NUM_TOKENS = 12
LONG_PROMPT_TOKENS = 1500  # above hybrid.yaml's 1024-token threshold: auto disaggregates it


@pytest.fixture(scope="module")
def dep():
    d = deploy("configs/hybrid.yaml", grpc_port=0, http_port=0, token=TOKEN)
    yield d
    d.shutdown()


@pytest.fixture(scope="module")
def client(dep):
    with pd_serve.Client(dep.addresses.grpc, token=TOKEN, timeout_s=120) as c:
        yield c


@pytest.fixture(scope="module")
def oai(dep):
    return openai.OpenAI(base_url=dep.addresses.http_url + "/v1", api_key=TOKEN, max_retries=0,
                         timeout=120)


@pytest.fixture(scope="module")
def http(dep):
    with httpx.Client(base_url=dep.addresses.http_url, timeout=120,
                      headers={"Authorization": f"Bearer {TOKEN}"}) as h:
        yield h


def _model_id(oai) -> str:
    return oai.models.list().data[0].id


# ---- the same tokens through every door ----------------------------------------------------
@pytest.mark.parametrize("route", ["colocated", "disaggregated"])
def test_sdk_and_http_return_the_in_process_tokens(dep, client, oai, route):
    kw = dict(max_tokens=NUM_TOKENS, ignore_eos=True, temperature=0.0, route=route)
    prompt = distinct_prompt(300, 61) if route == "disaggregated" else None
    text = None if prompt else GREEDY_PROMPT
    ref = dep.generate(prompt=text, prompt_token_ids=prompt, **kw)
    assert len(ref.token_ids) == NUM_TOKENS and ref.route == route

    sdk = client.generate(prompt=text, prompt_token_ids=prompt, **kw)
    assert sdk.token_ids == ref.token_ids and sdk.text == ref.text and sdk.route == route
    items = list(client.stream(prompt=text, prompt_token_ids=prompt, **kw))
    assert [t for i in items[:-1] for t in i["token_ids"]] == ref.token_ids
    assert items[-1]["result"].token_ids == ref.token_ids

    extra = {"ignore_eos": True, "route": route}
    whole = oai.completions.create(model=_model_id(oai), prompt=text or prompt,
                                   max_tokens=NUM_TOKENS, temperature=0, extra_body=extra)
    assert whole.choices[0].model_extra["token_ids"] == ref.token_ids
    assert whole.choices[0].text == ref.text and whole.choices[0].finish_reason == "length"
    assert whole.model_extra["pd_serve"]["route"] == route

    chunks = list(oai.completions.create(model=_model_id(oai), prompt=text or prompt,
                                         max_tokens=NUM_TOKENS, temperature=0, stream=True,
                                         stream_options={"include_usage": True}, extra_body=extra))
    with_choices = [c for c in chunks if c.choices]
    assert [t for c in with_choices for t in c.choices[0].model_extra["token_ids"]] == ref.token_ids
    assert "".join(c.choices[0].text for c in with_choices) == ref.text
    assert with_choices[-1].choices[0].finish_reason == "length"
    assert chunks[-1].usage.completion_tokens == NUM_TOKENS
    summary = with_choices[-1].model_extra["pd_serve"]
    assert summary["route"] == route and summary["decode_worker"] == "both-0"
    if route == "disaggregated":
        # Only the first request on this prompt is sure to move KV; repeats may hit the decode
        # worker's prefix cache. Transfer figures through each door are checked on fresh prompts.
        assert ref.kv_transfer_bytes > 0
        assert sdk.prefill_worker == summary["prefill_worker"] == "prefill-0"


def test_async_client_reports_the_transfer(dep):
    async def main():
        async with pd_serve.AsyncClient(dep.addresses.grpc, token=TOKEN, timeout_s=120) as c:
            return await c.generate(prompt_token_ids=distinct_prompt(LONG_PROMPT_TOKENS, 62),
                                    max_tokens=4, ignore_eos=True, route="disaggregated")

    r = asyncio.run(main())
    assert r.route == "disaggregated" and r.prefill_worker == "prefill-0" and len(r.token_ids) == 4
    assert r.kv_transfer_bytes > 0 and r.kv_transfer_s > 0 and r.ttft_s > 0


def test_http_reports_how_a_request_was_served(http):
    r = http.post("/v1/completions", json={"prompt": distinct_prompt(LONG_PROMPT_TOKENS, 63),
                                           "max_tokens": 4, "ignore_eos": True, "temperature": 0,
                                           "route": "disaggregated"})
    assert r.status_code == 200
    summary = r.json()["pd_serve"]
    assert summary["route"] == "disaggregated" and summary["prefill_worker"] == "prefill-0"
    assert summary["kv_transfer_bytes"] > 0 and summary["kv_transfer_s"] > 0
    assert summary["ttft_s"] > 0 and summary["decision_reason"]
    assert r.json()["usage"]["prompt_tokens"] == LONG_PROMPT_TOKENS


def test_auto_route_is_the_default_through_both_doors(client, http):
    # Whichever route the deployment's policy picks, it says which and why.
    r = client.generate(prompt_token_ids=distinct_prompt(LONG_PROMPT_TOKENS, 64), max_tokens=2)
    assert r.route in ("colocated", "disaggregated") and r.decision_reason
    h = http.post("/v1/completions", json={"prompt": distinct_prompt(LONG_PROMPT_TOKENS, 65),
                                           "max_tokens": 2}).json()["pd_serve"]
    assert h["route"] in ("colocated", "disaggregated") and h["decision_reason"]


def test_health_and_status_over_grpc(client, dep):
    assert client.health()["is_healthy"]
    st = client.status()
    assert {w: s["role"] for w, s in st["workers"].items()} == {"prefill-0": "prefill", "both-0": "both"}
    assert st["model"]["vocab_size"] == dep.vocab_size and st["model"]["max_model_len"] == dep.max_model_len
    assert st["counters"].get("requests_finished", 0) > 0
    assert isinstance(st["links"], list)


# ---- the token rule ------------------------------------------------------------------------
@pytest.mark.parametrize("token", [None, "wrong-token"])
def test_a_missing_or_wrong_token_is_refused(dep, token, monkeypatch):
    monkeypatch.delenv("PD_SERVE_TOKEN", raising=False)
    with pd_serve.Client(dep.addresses.grpc, token=token) as c:
        with pytest.raises(pd_serve.UnauthenticatedError):
            c.generate(prompt="x", max_tokens=2)
        with pytest.raises(pd_serve.UnauthenticatedError):
            c.health()
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    for path in ("/v1/models", "/metrics", "/health"):
        assert httpx.get(dep.addresses.http_url + path, headers=headers).status_code == 401
    bad = openai.OpenAI(base_url=dep.addresses.http_url + "/v1", api_key=token or "none",
                        max_retries=0)
    with pytest.raises(openai.AuthenticationError):
        bad.completions.create(model="m", prompt="x", max_tokens=2)


def test_without_a_token_no_credentials_are_needed(dep):
    # A second frontend actor on the same router, without a token: auth off.
    info = ModelInfo("open", dep.config.model, _tokenizer_path(), dep.max_model_len, dep.vocab_size)
    actor, addrs = start_frontend(dep.router, info, FrontendSettings(grpc_port=0, http_port=0))
    try:
        with pd_serve.Client(addrs.grpc, token="") as c:  # "" overrides $PD_SERVE_TOKEN too
            assert len(c.generate(prompt="open door", max_tokens=3, ignore_eos=True).token_ids) == 3
        r = httpx.post(addrs.http_url + "/v1/completions", timeout=60,
                       json={"prompt": "open door", "max_tokens": 3, "ignore_eos": True})
        assert r.status_code == 200 and len(r.json()["choices"][0]["token_ids"]) == 3
    finally:
        stop_frontend(actor)


def _tokenizer_path() -> str:
    from pd_serve.deployment import resolve_model
    return resolve_model("default")


# ---- bad input -----------------------------------------------------------------------------


@pytest.mark.parametrize("kwargs, message", BAD_INPUTS)
def test_bad_input_over_grpc_is_invalid_argument_and_service_continues(client, kwargs, message):
    with pytest.raises(pd_serve.InvalidArgumentError, match=message):
        client.generate(**kwargs)
    assert len(client.generate(prompt="still serving?", max_tokens=2, ignore_eos=True).token_ids) == 2


def test_a_raw_grpc_request_without_a_prompt_is_invalid_argument(dep):
    with grpc.insecure_channel(dep.addresses.grpc) as ch:
        stub = pb_grpc.PdServeStub(ch)
        with pytest.raises(grpc.RpcError) as info:
            list(stub.Generate(pb.GenerateRequest(max_tokens=3), timeout=30,
                               metadata=(("authorization", f"Bearer {TOKEN}"),)))
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "exactly one of prompt" in info.value.details()


def _as_openai(kwargs: dict) -> dict:
    body = {"max_tokens": kwargs.get("max_tokens", 16)}
    body["prompt"] = kwargs["prompt"] if "prompt" in kwargs else kwargs["prompt_token_ids"]
    body.update({k: kwargs[k] for k in ("route", "temperature") if k in kwargs})
    return body


@pytest.mark.parametrize("body, message", [(_as_openai(kw), msg) for kw, msg in BAD_INPUTS] + [
    (b"{not json", "invalid JSON"),
    ({"prompt": "x", "max_tokens": "5"}, "max_tokens must be an integer"),
    ({"prompt": 5}, "prompt must be a string or a list of token ids"),
    ({"prompt": "x", "stream": "yes"}, "stream must be a boolean"),
    ({"prompt": "x", "temperature": "hot"}, "temperature must be a number"),
])
@pytest.mark.parametrize("stream", [False, True])
def test_bad_input_over_http_is_400_and_service_continues(http, body, message, stream):
    if isinstance(body, dict):
        r = http.post("/v1/completions", json={**body, "stream": body.get("stream", stream)})
    else:
        r = http.post("/v1/completions", content=body, headers={"Content-Type": "application/json"})
    assert r.status_code == 400, r.text
    err = r.json()["error"]
    assert message in err["message"] and err["type"] == "invalid_request_error"
    ok = http.post("/v1/completions", json={"prompt": "still serving?", "max_tokens": 2,
                                            "ignore_eos": True, "stream": stream})
    assert ok.status_code == 200


def test_unknown_extra_fields_are_ignored(http):
    r = http.post("/v1/completions", json={"prompt": "extras", "max_tokens": 2, "ignore_eos": True,
                                           "some_client_extra": {"x": 1}})
    assert r.status_code == 200 and len(r.json()["choices"][0]["token_ids"]) == 2


# ---- vLLM's own benchmark client -----------------------------------------------------------
BENCH_DRIVER = """
import json, sys
from vllm.benchmarks.serve import add_cli_args, main
from vllm.utils.argparse_utils import FlexibleArgumentParser
p = FlexibleArgumentParser()
add_cli_args(p)
r = main(p.parse_args(sys.argv[1:]))
print("BENCH " + json.dumps({k: r[k] for k in ("completed", "failed", "total_output_tokens")}))
"""


def test_vllms_benchmark_client_runs_unchanged(dep):
    host, port = dep.addresses.http.rsplit(":", 1)
    args = ["--backend", "openai", "--host", host, "--port", port, "--dataset-name", "random",
            "--random-input-len", "64", "--random-output-len", "8", "--num-prompts", "4",
            "--ignore-eos", "--disable-tqdm", "--ready-check-timeout-sec", "0", "--seed", "0",
            # the model and its tokenizer come from /v1/models, which needs the token too
            "--header", f"Authorization=Bearer {TOKEN}"]
    env = dict(os.environ, OPENAI_API_KEY=TOKEN)  # what vLLM's client sends on completions
    out = subprocess.run([sys.executable, "-c", BENCH_DRIVER, *args], env=env, timeout=300,
                         capture_output=True, text=True)
    line = next((l for l in out.stdout.splitlines() if l.startswith("BENCH ")), None)
    assert line, out.stdout[-3000:] + out.stderr[-3000:]
    res = json.loads(line.removeprefix("BENCH "))
    assert res["completed"] == 4 and res["failed"] == 0 and res["total_output_tokens"] == 32


@pytest.mark.parametrize("route", ["colocated", "disaggregated"])
def test_a_grpc_client_that_leaves_mid_stream_stops_its_request_everywhere(dep, client, route):
    items = client.stream(prompt_token_ids=distinct_prompt(300, 700 + len(route)), max_tokens=LEFT_MAX_TOKENS,
                          ignore_eos=True, route=route)
    for _ in range(3):
        assert next(items)["type"] == "token"
    items.close()  # cancels the call: the frontend's stream ends, the router cancels the request
    after = wait_until_nothing_left(dep)
    assert not any(after["left"].values()) and not any(after["kv_usage"].values()), after


# ---- metrics after the traffic above -------------------------------------------------------
def test_metrics_carry_every_metric_with_samples(http, dep):
    r = http.get("/metrics")
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/plain")
    families = {f.name: f for f in text_string_to_metric_families(r.text)}
    for name in METRIC_NAMES:
        family = families.get(name.removesuffix("_total"))
        assert family is not None and family.samples, name

    def value(sample: str, **labels) -> float:
        return sum(s.value for f in families.values() for s in f.samples
                   if s.name == sample and all(s.labels.get(k) == v for k, v in labels.items()))

    for route in ("colocated", "disaggregated"):
        assert value("pd_serve:time_to_first_token_seconds_count", route=route) > 0
        assert value("pd_serve:e2e_request_latency_seconds_count", route=route) > 0
        assert value("pd_serve:request_prefill_time_seconds_count", route=route) > 0
        assert value("pd_serve:route_decisions_total", route=route) > 0
    assert value("pd_serve:inter_token_latency_seconds_count") > 0
    assert value("pd_serve:kv_transfer_bytes_count") > 0 and value("pd_serve:kv_transfer_seconds_sum") > 0
    assert value("pd_serve:route_decisions_total", reason="forced") > 0
    for worker in ("prefill-0", "both-0"):
        assert any(s.labels.get("worker") == worker
                   for s in families["pd_serve:kv_cache_usage_perc"].samples)
    if dep.calibration is not None:  # predictions exist only with the calibrated cost model
        assert value("pd_serve:ttft_prediction_error_ratio_count") > 0
    assert "pd_serve:route_decisions_total" in dep.metrics_text()  # the in-process view of it

"""The gRPC wire format: "not given" stays distinguishable from a value, values protobuf cannot
carry fail on the client with the field's name, results and status round-trip."""
from __future__ import annotations

import math

import pytest

from pd_serve.frontend.backend import health_from_status, links_from_registry
from pd_serve.proto import convert
from pd_serve.proto import pd_serve_pb2 as pb
from pd_serve.request import GenerateResult, InvalidRequestError, make_request


def _roundtrip_kwargs(**kw):
    wire = pb.GenerateRequest.FromString(convert.request_to_proto(**kw).SerializeToString())
    return convert.request_kwargs_from_proto(wire)


def test_a_request_survives_the_wire():
    kw = _roundtrip_kwargs(prompt_token_ids=[3, 4], max_tokens=5, temperature=0.5, top_p=0.9,
                           seed=11, ignore_eos=True, route="colocated", request_id="abc")
    assert make_request(**kw) == make_request(prompt_token_ids=[3, 4], max_tokens=5, temperature=0.5,
                                              top_p=0.9, seed=11, ignore_eos=True, route="colocated",
                                              request_id="abc")


def test_unset_fields_take_the_servers_defaults():
    kw = convert.request_kwargs_from_proto(pb.GenerateRequest(prompt="hi"))
    req = make_request(**kw)
    assert req.max_tokens == 16 and req.temperature == 0.0 and req.top_p == 1.0
    assert req.route == "auto" and req.seed is None and req.request_id is None


def test_explicit_bad_values_reach_validation_instead_of_becoming_defaults():
    # max_tokens=0 and prompt="" are values, not "unset": the server must reject them.
    kw = convert.request_kwargs_from_proto(pb.GenerateRequest(prompt="", max_tokens=0))
    assert kw["prompt"] == "" and kw["max_tokens"] == 0
    with pytest.raises(InvalidRequestError, match="prompt is empty"):
        make_request(**kw)


def test_no_prompt_at_all_is_named():
    with pytest.raises(InvalidRequestError, match="exactly one of prompt"):
        make_request(**convert.request_kwargs_from_proto(pb.GenerateRequest()))


@pytest.mark.parametrize("kwargs, message", [
    ({"prompt": "x", "max_tokens": "5"}, "max_tokens has the wrong type"),
    ({"prompt": "x", "max_tokens": True}, "max_tokens has the wrong type"),
    ({"prompt": 5}, "prompt has the wrong type"),
    ({"prompt": "x", "temperature": "hot"}, "temperature has the wrong type"),
    ({"prompt_token_ids": [1, 2.5]}, "prompt_token_ids must be a list of integers"),
    ({"prompt_token_ids": "abc"}, "prompt_token_ids must be a list of integers"),
    ({"prompt_token_ids": [2 ** 70]}, "prompt_token_ids must be a list of integers"),
])
def test_values_protobuf_cannot_carry_fail_with_the_fields_name(kwargs, message):
    with pytest.raises(InvalidRequestError, match=message):
        convert.request_to_proto(**kwargs)


@pytest.mark.parametrize("name", ["temperature", "top_p"])
def test_non_finite_numbers_are_refused_on_the_server(name):
    msg = pb.GenerateRequest(prompt="x", **{name: math.inf})
    with pytest.raises(InvalidRequestError, match=f"{name} must be a finite number"):
        convert.request_kwargs_from_proto(msg)


def _result(**over) -> GenerateResult:
    base = dict(request_id="r", token_ids=[1, 2], text="ab", route="disaggregated", ttft_s=0.1,
                e2e_s=0.2, itl_s=[0.1], prefill_worker="prefill-0", decode_worker="both-0",
                kv_transfer_bytes=1024, kv_transfer_s=0.003, finish_reason="length",
                num_prompt_tokens=7, predicted_ttft_s=0.09, decision_reason="why",
                fallback=None, token_times=[1.0, 1.1])
    base.update(over)
    return GenerateResult(**base)


@pytest.mark.parametrize("over", [{}, {"prefill_worker": None, "kv_transfer_s": None,
                                       "predicted_ttft_s": None, "route": "colocated",
                                       "fallback": "prefill worker died", "finish_reason": None}])
def test_a_result_survives_the_wire_including_its_nones(over):
    r = _result(**over)
    msg = pb.GenerateResponse.FromString(convert.result_to_proto(r.to_dict()).SerializeToString())
    assert convert.item_from_proto(msg) == {"type": "result", "result": r}


def test_token_items_keep_ids_time_and_finish_reason():
    item = {"type": "token", "token_ids": [4, 5], "t": 12.5, "finish_reason": None}
    assert convert.item_from_proto(convert.token_item_to_proto(item)) == item
    last = dict(item, finish_reason="stop")
    assert convert.item_from_proto(convert.token_item_to_proto(last)) == last


STATUS = {"workers": {"prefill-0": {"role": "prefill", "healthy": False, "engine_id": "e0",
                                    "node_ip": "10.0.0.1", "inflight": 0, "load": {}},
                      "both-0": {"role": "both", "healthy": True, "engine_id": "e1",
                                 "node_ip": "10.0.0.2", "inflight": 2,
                                 "load": {"num_running": 2, "num_waiting": 1, "kv_cache_usage": 0.5,
                                          "num_queued_prefill_tokens": 300}}},
          "policy": "length_threshold", "counters": {"requests_finished": 9},
          "links": links_from_registry({"version": 1, "models": [
              {"prefill_id": "prefill-0", "decode_id": "both-0",
               "model": {"alpha_s": 0.001, "beta_bytes_per_s": 3e9, "num_updates": 4}}]})}
MODEL = {"id": "tiny", "max_model_len": 8192, "vocab_size": 259}


def test_status_survives_the_wire_shaped_like_the_in_process_status():
    msg = pb.StatusResponse.FromString(convert.status_to_proto(STATUS, MODEL).SerializeToString())
    out = convert.status_from_proto(msg)
    assert out["policy"] == "length_threshold" and out["counters"] == {"requests_finished": 9}
    assert out["workers"]["both-0"]["load"]["kv_cache_usage"] == 0.5
    assert out["workers"]["both-0"]["inflight"] == 2 and out["workers"]["prefill-0"]["healthy"] is False
    assert out["links"] == [{"prefill_worker": "prefill-0", "decode_worker": "both-0",
                             "alpha_s": 0.001, "beta_bytes_per_s": 3e9, "num_updates": 4}]
    assert out["model"] == MODEL


def test_health_needs_a_healthy_worker_that_can_decode():
    assert health_from_status(STATUS)["is_healthy"]
    only_prefill = {"workers": {"prefill-0": {"role": "prefill", "healthy": True},
                                "both-0": {"role": "both", "healthy": False}}}
    h = health_from_status(only_prefill)
    assert not h["is_healthy"] and h["num_healthy_workers"] == 1
    assert "no healthy decode-capable worker" in h["detail"]

"""The request path: a short request's TTFT less its engines' steps and its KV transfer."""
from __future__ import annotations

import pytest

from pd_serve.request_path import decompose, routes_served


def steps(*records):
    return [{"t": t, "elapsed_s": e, "num_prefill_tokens": n} for t, e, n in records]


@pytest.mark.parametrize("roles, routes", [
    (["both", "both"], ["colocated", "disaggregated"]),
    (["prefill", "decode"], ["colocated", "disaggregated"]),  # a decode worker can serve alone
    (["prefill", "both"], ["colocated", "disaggregated"]),
    (["both"], ["colocated"]),
])
def test_routes_a_deployment_can_serve(roles, routes):
    assert routes_served(roles) == routes


def test_a_colocated_path_is_the_ttft_beyond_its_prefill_step_and_the_gap():
    by_worker = {"both-0": steps((9.0, 0.5, 100), (10.02, 0.030, 128), (10.03, 0.006, 0))}
    d = decompose("colocated", 0.045, by_worker, 10.0, 0.001, None, "both-0", None)
    assert d["engine_s"] == pytest.approx(0.031)  # the step before t0 is another request's
    assert d["path_s"] == pytest.approx(0.014)


def test_a_disaggregated_path_also_leaves_out_the_transfer_and_the_decode_sides_first_step():
    by_worker = {"prefill-0": steps((10.03, 0.030, 128)), "decode-0": steps((10.05, 0.004, 1))}
    d = decompose("disaggregated", 0.070, by_worker, 10.0, 0.001, "prefill-0", "decode-0", 0.002)
    assert d["engine_s"] == pytest.approx(0.036)
    assert d["transfer_s"] == 0.002
    assert d["path_s"] == pytest.approx(0.032)


def test_no_prefill_step_on_record_is_an_error_that_says_why():
    with pytest.raises(RuntimeError, match="enable_logging_iteration_details"):
        decompose("colocated", 0.04, {"both-0": []}, 10.0, 0.0, None, "both-0", None)

"""The router learns each route's path from the engines' own first-token timestamps."""
from types import SimpleNamespace

import pytest

from pd_serve.router import Router
from pd_serve.worker import _engine_ttft_s
from schedulers.path_estimate import RecentMedian


def test_the_engines_share_is_from_the_hand_over_to_vllms_first_token_timestamp():
    out = SimpleNamespace(metrics=SimpleNamespace(first_token_ts=105.25))
    assert _engine_ttft_s(out, 105.0) == pytest.approx(0.25)
    assert _engine_ttft_s(SimpleNamespace(metrics=None), 105.0) is None  # vLLM kept no stats
    assert _engine_ttft_s(SimpleNamespace(metrics=SimpleNamespace(first_token_ts=0.0)), 105.0) is None


def _router():
    return SimpleNamespace(paths={"colocated": RecentMedian(), "disaggregated": RecentMedian()})


def test_the_path_is_the_ttft_less_every_engines_share():
    r = _router()
    Router._learn_path(r, SimpleNamespace(route="colocated", ttft_s=0.050), {"decode": 0.044})
    Router._learn_path(r, SimpleNamespace(route="disaggregated", ttft_s=0.300),
                       {"prefill": 0.200, "decode": 0.086})
    assert r.paths["colocated"].value == pytest.approx(0.006)
    assert r.paths["disaggregated"].value == pytest.approx(0.014)


def test_a_request_without_an_engines_timestamp_teaches_nothing():
    r = _router()
    Router._learn_path(r, SimpleNamespace(route="disaggregated", ttft_s=0.3), {"prefill": None, "decode": 0.1})
    assert r.paths["disaggregated"].count == 0

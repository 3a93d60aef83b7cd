from __future__ import annotations

import pytest

from schedulers.slo import SloTable
from schedulers.types import ClusterView, LinkEstimate, RequestInfo, WorkerView


def test_link_estimate_is_alpha_plus_bytes_over_beta():
    link = LinkEstimate(alpha_s=0.001, beta_bytes_per_s=1e9)
    assert link.predict_s(2_000_000_000) == pytest.approx(2.001)
    with pytest.raises(ValueError):
        LinkEstimate(0.0, 0.0)


def test_worker_role_must_be_known():
    with pytest.raises(ValueError, match="role"):
        WorkerView("w", "router")


def test_uncached_tokens_never_go_negative():
    assert RequestInfo("r", 100, 10, num_cached_tokens=40).num_uncached_tokens == 60
    assert RequestInfo("r", 100, 10, num_cached_tokens=140).num_uncached_tokens == 0


def test_cluster_view_links_default_to_empty():
    view = ClusterView((WorkerView("a", "both"), WorkerView("b", "prefill", is_healthy=False)))
    assert view.link("a", "b") is None
    assert [w.worker_id for w in view.healthy(("both", "prefill"))] == ["a"]


def test_slo_buckets_follow_the_seed_at_their_edges():
    table = SloTable()
    assert table.ttft_slo_s(4096) == 0.2  # <= 4K
    assert table.ttft_slo_s(4097) == 1.0
    assert table.ttft_slo_s(16384) == 1.0  # <= 16K
    assert table.ttft_slo_s(16385) == 5.0


def test_request_slos_override_the_table():
    table = SloTable(tpot_slo_s=0.05)
    assert table.for_request(RequestInfo("r", 100, 1)) == (0.2, 0.05)
    assert table.for_request(RequestInfo("r", 100, 1, ttft_slo_s=3.0, tpot_slo_s=0.5)) == (3.0, 0.5)


def test_slo_table_rejects_a_table_without_a_catch_all():
    with pytest.raises(ValueError):
        SloTable(ttft_buckets=((4096, 0.2),))

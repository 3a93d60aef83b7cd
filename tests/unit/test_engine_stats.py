"""Transfer records are claimed once each, first come first claimed, stale ones dropped."""
from __future__ import annotations

from types import SimpleNamespace

import pytest

pytest.importorskip("vllm")
from pd_serve.engine_stats import STALE_TRANSFER_S, EngineStatsCollector  # noqa: E402


def _sched(nbytes, durations, t_running=1, usage=0.25):
    return SimpleNamespace(num_running_reqs=t_running, num_waiting_reqs=0, kv_cache_usage=usage,
                           kv_connector_stats={"bytes_transferred": nbytes, "transfer_duration": durations,
                                               "num_failed_transfers": []},
                           iteration_details=None)


def test_each_transfer_is_claimed_once_in_order():
    c = EngineStatsCollector()
    c.observe(_sched([100, 200], [0.1, 0.2]), None)
    first = c.claim_transfers(0.0)
    second = c.claim_transfers(0.0)
    assert [r.num_bytes for r in first] == [100] and [r.num_bytes for r in second] == [200]
    assert c.claim_transfers(0.0) == []
    assert c.snapshot()["num_transfers"] == 2 and c.snapshot()["kv_cache_usage"] == 0.25


def test_stale_unclaimed_transfers_are_dropped():
    c = EngineStatsCollector()
    c.observe(_sched([100], [0.1]), None)
    t_old = c.unclaimed[0].t
    assert c.claim_transfers(t_old + STALE_TRANSFER_S + 1) == []


def test_posting_time_and_descriptor_count_are_kept_when_nixl_reports_them():
    c = EngineStatsCollector()
    stats = _sched([4096], [0.006])
    stats.kv_connector_stats.update(post_duration=[0.002], num_descriptors=[500])
    c.observe(stats, None)
    c.observe(_sched([100], [0.1]), None)  # an older vLLM: neither field
    with_post, without = c.claim_transfers(0.0, 2)
    assert (with_post.post_s, with_post.num_descriptors) == (0.002, 500)
    assert (without.post_s, without.num_descriptors) == (None, None)
    assert [r["num_bytes"] for r in c.recent_transfers(0.0)] == [4096, 100]  # claimed ones too
    assert c.recent_transfers(with_post.t + 3600) == []

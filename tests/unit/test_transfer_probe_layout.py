"""The probe cuts its buffer as vLLM cuts the KV cache, and its records survive JSON."""
from __future__ import annotations

import json
import os

import pytest

from transfer.kv_geometry import KVGeometry
from transfer.link_model import fit_link
from transfer.probe_layout import BlockLayout, pick_block_ids, plan_sweep_blocks
from transfer.probe_records import PairProbeResult, ReadSample, SizeStats, summarize_reads
from transfer.ucx_env import apply_ucx_defaults

# Llama-3.1-8B, bf16, 16-token blocks: 128 KiB per token, 2 MiB per block, 64 KiB per layer.
LLAMA_8B = KVGeometry(num_layers=32, num_kv_heads=8, head_dim=128, dtype_bytes=2, block_size=16)


def test_layout_has_one_descriptor_per_block_per_layer():
    layout = BlockLayout.from_geometry(LLAMA_8B, max_num_tokens=8192)
    assert layout.num_blocks == 512  # 8192 / 16
    assert layout.desc_bytes == 64 << 10  # 2 MiB block / 32 layers
    assert layout.bytes_per_block == LLAMA_8B.bytes_per_block
    assert layout.num_descs(10) == 320


def test_layout_with_split_k_and_v_halves_the_descriptors():
    layout = BlockLayout.from_geometry(LLAMA_8B, 8192, regions_per_layer=2)
    assert (layout.num_regions, layout.desc_bytes) == (64, 32 << 10)
    assert layout.bytes_per_block == LLAMA_8B.bytes_per_block


def test_layout_is_capped_by_the_buffer_budget():
    # 32k tokens = 2,048 blocks = 4 GiB; a 1 GiB cap keeps 512 blocks.
    layout = BlockLayout.from_geometry(LLAMA_8B, 32768, max_buffer_bytes=1 << 30)
    assert layout.num_blocks == 512
    assert layout.total_bytes == 1 << 30


def test_desc_ids_are_region_major_like_vllm():
    layout = BlockLayout(num_layers=2, regions_per_layer=1, num_blocks=10, desc_bytes=8)
    assert layout.desc_ids([3, 7]) == [3, 7, 13, 17]
    assert layout.desc_offset_bytes(1, 7) == 17 * 8


def test_sweep_doubles_and_ends_at_the_largest_request():
    assert plan_sweep_blocks(100) == [1, 2, 4, 8, 16, 32, 64, 100]
    assert plan_sweep_blocks(64) == [1, 2, 4, 8, 16, 32, 64]
    with pytest.raises(ValueError):
        plan_sweep_blocks(0)


def test_block_picks_are_distinct_in_range_and_repeatable():
    ids = pick_block_ids(50, 128, "scattered", seed=3)
    assert len(set(ids)) == 50 and all(0 <= i < 128 for i in ids)
    assert ids == pick_block_ids(50, 128, "scattered", seed=3)
    assert pick_block_ids(4, 128, "contiguous", seed=3) == [0, 1, 2, 3]
    with pytest.raises(ValueError, match="unknown block order"):
        pick_block_ids(4, 128, "random", seed=3)


def test_size_stats_median_and_p90():
    stats = SizeStats.from_seconds(1 << 20, [0.001 * i for i in range(1, 11)])
    assert stats.median_s == pytest.approx(0.0055)
    assert stats.p90_s == pytest.approx(0.0091)  # numpy's linear interpolation
    assert stats.gb_per_s == pytest.approx((1 << 20) / 0.0055 / 1e9)


def test_probe_result_round_trips_through_json():
    layout = BlockLayout(num_layers=4, regions_per_layer=1, num_blocks=16, desc_bytes=1 << 10)
    samples = [ReadSample(n, n * layout.bytes_per_block, layout.num_descs(n), 1e-5 + n * 1e-6)
               for n in (1, 2, 4, 8, 16) for _ in range(3)]
    result = PairProbeResult("p0", "d0", "DRAM", layout, "scattered",
                             fit_link([(s.num_bytes, s.seconds) for s in samples]),
                             summarize_reads(samples), samples,
                             [SizeStats.from_seconds(1 << 16, [1e-5])], True, 0.5)
    again = PairProbeResult.from_dict(json.loads(json.dumps(result.to_dict())))
    assert again.fit == result.fit
    assert again.sizes == result.sizes
    assert [(s.num_bytes, s.seconds) for s in again.samples] == \
        [(s.num_bytes, s.seconds) for s in samples]
    assert again.memcpy_bytes_per_s == pytest.approx((1 << 16) / 1e-5)


def test_ucx_defaults_keep_user_settings_and_refuse_an_empty_tls(monkeypatch):
    monkeypatch.setenv("UCX_NET_DEVICES", "eth0")
    monkeypatch.delenv("UCX_RCACHE_MAX_UNRELEASED", raising=False)
    applied = apply_ucx_defaults("cpu")
    assert applied == {"UCX_RCACHE_MAX_UNRELEASED": "1024"}
    assert os.environ["UCX_NET_DEVICES"] == "eth0"
    monkeypatch.delenv("UCX_NET_DEVICES")
    assert "UCX_NET_DEVICES" not in apply_ucx_defaults("cuda")
    monkeypatch.setenv("UCX_TLS", "")
    with pytest.raises(ValueError, match="empty"):
        apply_ucx_defaults("cpu")

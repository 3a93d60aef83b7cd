"""Deployment configs: the shipped files load, and every bad value is named with what is allowed."""
from __future__ import annotations

from pathlib import Path

import pytest

from pd_serve.config import ConfigError, config_from_dict, load_config

CONFIGS = sorted((Path(__file__).parents[2] / "configs").glob("*.yaml"))
BASE = {"device": "cpu", "workers": {"prefill": {"count": 1}, "decode": {"count": 1}}}


def _with(**overrides):
    data = {**BASE, **overrides}
    return config_from_dict(data)


@pytest.mark.parametrize("path", [p for p in CONFIGS if not p.name.startswith("sim_")], ids=lambda p: p.name)
def test_shipped_configs_load(path):
    cfg = load_config(path)
    assert any(r in cfg.role_counts() for r in ("decode", "both"))


def test_the_three_deployment_shapes_exist():
    assert load_config("configs/colocated.yaml").role_counts() == {"both": 2}
    assert load_config("configs/disaggregated.yaml").role_counts() == {"prefill": 1, "decode": 1}
    assert load_config("configs/hybrid.yaml").role_counts() == {"prefill": 1, "both": 1}


def test_unknown_key_is_named_with_its_path():
    with pytest.raises(ConfigError, match=r"workers\.prefill\.engine\.chunk: unknown key"):
        _with(workers={"prefill": {"engine": {"chunk": 512}}, "decode": {}})


def test_unknown_role_lists_allowed_roles():
    with pytest.raises(ConfigError, match=r"unknown role\(s\) \['prefil'\]; allowed: \['prefill', 'decode', 'both'\]"):
        _with(workers={"prefil": {}, "decode": {}})


def test_a_deployment_needs_a_decoder():
    with pytest.raises(ConfigError, match="at least one worker of role 'decode' or 'both'"):
        _with(workers={"prefill": {"count": 2}})


def test_bad_literal_names_the_allowed_values():
    with pytest.raises(ConfigError, match=r"transfer\.backend: .*'nixl', 'nccl' or 'auto', got 'rdma'"):
        _with(transfer={"backend": "rdma"})


def test_nccl_on_cpu_fails_at_load_and_says_what_to_use():
    with pytest.raises(ConfigError, match="needs GPUs.*use 'nixl'"):
        _with(transfer={"backend": "nccl"})


def test_nccl_on_gpus_fails_at_load_because_vllm_dropped_its_connector():
    with pytest.raises(ConfigError, match=r"P2pNcclConnector.*no longer ships.*use 'nixl' or 'auto'"):
        _with(device="gpu", transfer={"backend": "nccl"})


def test_cpu_block_size_must_be_a_multiple_of_32():
    with pytest.raises(ConfigError, match=r"workers\.decode\.engine\.block_size: must be a multiple of 32 on CPU .*got 16"):
        _with(workers={"prefill": {}, "decode": {"engine": {"block_size": 16}}})


def test_chunk_must_hold_a_whole_prompt_without_chunked_prefill():
    with pytest.raises(ConfigError, match="max_num_batched_tokens .* must be >= max_model_len"):
        _with(workers={"decode": {"engine": {"enable_chunked_prefill": False,
                                             "max_num_batched_tokens": 2048, "max_model_len": 8192}}})


def test_negative_count_is_rejected():
    with pytest.raises(ConfigError, match=r"workers\.prefill\.count"):
        _with(workers={"prefill": {"count": -1}, "decode": {}})


def test_missing_file_and_bad_yaml(tmp_path):
    with pytest.raises(ConfigError, match="not found"):
        load_config(tmp_path / "nope.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text("workers: [unclosed\n")
    with pytest.raises(ConfigError, match="invalid YAML"):
        load_config(bad)


def test_the_all_thread_stack_dump_is_off_unless_asked_for():
    assert _with().diagnostics.stack_dump_after_s is None
    assert _with(diagnostics={"stack_dump_after_s": 0.25}).diagnostics.stack_dump_after_s == 0.25
    with pytest.raises(ConfigError, match=r"diagnostics\.stack_dump_after_s"):
        _with(diagnostics={"stack_dump_after_s": 0.01})  # at or under the watch's re-arm period


def test_the_engine_start_timeout_defaults_by_device_and_can_be_set():
    assert _with().resolved_engine_start_timeout_s == 300.0
    assert _with(device="gpu").resolved_engine_start_timeout_s == 1800.0  # large models load for minutes
    assert _with(engine_start_timeout_s=45).resolved_engine_start_timeout_s == 45.0
    with pytest.raises(ConfigError, match="engine_start_timeout_s"):
        _with(engine_start_timeout_s=0)

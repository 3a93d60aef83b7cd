from __future__ import annotations

import json

import pytest

from schedulers.model_spec import MODEL_SPECS, ModelSpec, load_model_spec, mha_seed_spec
from transfer.kv_geometry import KVGeometry

SMALL_CONFIG = {"num_hidden_layers": 2, "hidden_size": 64, "num_attention_heads": 4,
                      "intermediate_size": 128}


def test_public_configs_have_their_published_parameter_counts():
    # Published sizes: Llama-2-7B 6.74e9, Llama-3-8B 8.03e9, Llama-3-70B 70.55e9 parameters.
    assert MODEL_SPECS["llama-2-7b"].num_params == pytest.approx(6.74e9, rel=1e-3)
    assert MODEL_SPECS["llama-3-8b"].num_params == pytest.approx(8.03e9, rel=1e-3)
    assert MODEL_SPECS["llama-3-70b"].num_params == pytest.approx(70.55e9, rel=1e-3)


def test_llama3_8b_is_gqa_with_group_four():
    spec = MODEL_SPECS["llama-3-8b"]
    assert (spec.num_heads, spec.num_kv_heads, spec.head_dim, spec.group_size) == (32, 8, 128, 4)
    assert spec.gated_mlp and spec.dtype_bytes == 2


def test_kv_geometry_agrees_with_transfer_module():
    config = {"num_hidden_layers": 32, "hidden_size": 4096, "num_attention_heads": 32,
              "num_key_value_heads": 8, "intermediate_size": 14336, "vocab_size": 128256,
              "torch_dtype": "bfloat16"}
    assert MODEL_SPECS["llama-3-8b"].kv_geometry(16) == KVGeometry.from_hf_config(config, 16)
    # 32 layers x 2 (K, V) x 8 heads x 128 x 2 bytes = 128 KiB per token.
    assert MODEL_SPECS["llama-3-8b"].kv_geometry().bytes_per_token == 131072


def test_seed_article_block_size_for_llama2_7b_is_8_mib():
    # Seed: 16 x 32 x 32 x 128 x 2 x 2 = 8 MiB per block.
    assert MODEL_SPECS["llama-2-7b"].kv_geometry(16).bytes_per_block == 8 * 2**20


def test_mha_seed_spec_is_the_idealised_model():
    spec = mha_seed_spec(4096, 32)
    assert spec.q_width == spec.kv_width == 4096
    assert spec.intermediate_size == 4 * 4096 and not spec.gated_mlp


def test_from_hf_config_reads_wrappers_defaults_and_non_gated_families():
    inner = {"model_type": "gpt_neox", "num_hidden_layers": 2, "hidden_size": 64,
             "num_attention_heads": 4, "intermediate_size": 256, "vocab_size": 100}
    spec = ModelSpec.from_hf_config({"text_config": inner})
    assert spec.num_kv_heads == 4 and spec.head_dim == 16 and not spec.gated_mlp


def test_from_hf_config_rejects_configs_it_cannot_cost():
    with pytest.raises(ValueError, match="lacks"):
        ModelSpec.from_hf_config({"hidden_size": 64})
    with pytest.raises(ValueError, match="mixture-of-experts"):
        ModelSpec.from_hf_config({**SMALL_CONFIG, "num_local_experts": 8})


def test_load_model_spec_takes_a_table_name_or_a_config_dir(tmp_path):
    assert load_model_spec("llama-3-70b") is MODEL_SPECS["llama-3-70b"]
    (tmp_path / "config.json").write_text(json.dumps({**SMALL_CONFIG, "num_key_value_heads": 2}))
    assert load_model_spec(str(tmp_path)).num_kv_heads == 2
    with pytest.raises(ValueError, match="llama-3-8b"):
        load_model_spec(str(tmp_path / "missing"))

"""KV bytes from public model configs: the one sizing every module uses."""
from __future__ import annotations

import pytest

from transfer.kv_geometry import KVGeometry, dtype_num_bytes

LLAMA_2_7B = {"num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 32,
              "hidden_size": 4096, "torch_dtype": "float16"}
LLAMA_3_8B = {"num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 8,
              "hidden_size": 4096, "torch_dtype": "bfloat16"}
LLAMA_3_70B = {"num_hidden_layers": 80, "num_attention_heads": 64, "num_key_value_heads": 8,
               "hidden_size": 8192, "torch_dtype": "bfloat16"}
DEEPSEEK_V3 = {"num_hidden_layers": 61, "num_attention_heads": 128, "hidden_size": 7168,
               "kv_lora_rank": 512, "qk_rope_head_dim": 64, "torch_dtype": "bfloat16"}


@pytest.mark.parametrize("cfg, kib_per_token", [
    (LLAMA_2_7B, 512),   # MHA: 32 layers x 2 x 32 heads x 128 x 2 B
    (LLAMA_3_8B, 128),   # GQA: 8 KV heads
    (LLAMA_3_70B, 320),  # 80 layers x 2 x 8 x 128 x 2 B
])
def test_bytes_per_token_of_public_models(cfg, kib_per_token):
    assert KVGeometry.from_hf_config(cfg).bytes_per_token == kib_per_token * 1024


def test_the_seed_block_of_llama_2_7b_is_8_mib():
    # The seed: 16 tokens x 32 layers x 32 heads x 128 x 2 (K, V) x 2 B = 8 MB per block.
    g = KVGeometry.from_hf_config(LLAMA_2_7B, block_size=16)
    assert g.bytes_per_block == 8 * 2**20
    assert g.num_blocks(4096) == 256 and g.bytes_for_tokens(4096) == 256 * 8 * 2**20


def test_partial_last_block_moves_whole():
    g = KVGeometry.from_hf_config(LLAMA_3_8B, block_size=32)
    assert g.bytes_for_tokens(33) == 2 * g.bytes_per_block
    assert g.bytes_for_tokens(0) == 0


def test_mla_caches_one_latent_per_token():
    g = KVGeometry.from_hf_config(DEEPSEEK_V3)
    assert g.bytes_per_token == 61 * (512 + 64) * 2


def test_dtype_overrides_config_and_bad_dtype_is_named():
    assert KVGeometry.from_hf_config(LLAMA_3_8B, dtype="float32").bytes_per_token == 256 * 1024
    assert dtype_num_bytes("torch.bfloat16") == 2
    with pytest.raises(ValueError, match="unknown dtype 'int3'"):
        dtype_num_bytes("int3")

"""How many bytes a request's paged KV cache occupies: the one place that knows it.

The router (bytes a disaggregated request ships), the link model (what a transfer of n tokens
costs), the cost model (KV read per decode step) and the simulator all size KV with this module.
Pure Python: no torch, no vLLM.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Mapping

DTYPE_BYTES = {
    "float32": 4, "fp32": 4,
    "bfloat16": 2, "bf16": 2, "float16": 2, "fp16": 2, "half": 2,
    "fp8": 1, "fp8_e4m3": 1, "fp8_e5m2": 1, "float8": 1,
}


def dtype_num_bytes(dtype: str) -> int:
    """Bytes per element of a dtype name as configs and vLLM spell it."""
    key = str(dtype).replace("torch.", "").lower()
    if key not in DTYPE_BYTES:
        raise ValueError(f"unknown dtype {dtype!r}; known: {sorted(DTYPE_BYTES)}")
    return DTYPE_BYTES[key]


@dataclass(frozen=True)
class KVGeometry:
    """Per-token and per-block KV sizes of one model on one engine configuration.

    `num_kv_heads` and `head_dim` describe what is cached per layer and token: K and V heads for
    standard and grouped-query attention; for MLA (DeepSeek) a single latent of
    `kv_lora_rank + qk_rope_head_dim` with no separate V (`kv_multiplier` = 1).
    """

    num_layers: int
    num_kv_heads: int
    head_dim: int
    dtype_bytes: int
    block_size: int
    kv_multiplier: int = 2  # K and V; 1 for MLA's joint latent

    @property
    def bytes_per_token(self) -> int:
        return self.num_layers * self.kv_multiplier * self.num_kv_heads * self.head_dim * self.dtype_bytes

    @property
    def bytes_per_block(self) -> int:
        return self.bytes_per_token * self.block_size

    def num_blocks(self, num_tokens: int) -> int:
        """Blocks a sequence of `num_tokens` occupies (the last one may be partly filled)."""
        return math.ceil(num_tokens / self.block_size)

    def bytes_for_blocks(self, num_blocks: int) -> int:
        return num_blocks * self.bytes_per_block

    def bytes_for_tokens(self, num_tokens: int) -> int:
        """Bytes of the blocks holding `num_tokens` tokens: what paged KV actually moves."""
        return self.bytes_for_blocks(self.num_blocks(num_tokens))

    @classmethod
    def from_hf_config(cls, config: Mapping[str, Any], block_size: int = 16,
                       dtype: str | None = None) -> "KVGeometry":
        """From a Hugging Face `config.json` dict (Llama, Mistral, Qwen, DeepSeek MLA ...)."""
        cfg = dict(config)
        if "text_config" in cfg and "num_hidden_layers" not in cfg:
            cfg = dict(cfg["text_config"])  # multimodal wrappers keep the LM config inside
        num_layers = int(cfg["num_hidden_layers"])
        dtype_name = dtype or cfg.get("torch_dtype") or cfg.get("dtype") or "bfloat16"
        dtype_bytes = dtype_num_bytes(dtype_name)
        if cfg.get("kv_lora_rank"):  # MLA: one compressed latent plus the rope part, per token
            width = int(cfg["kv_lora_rank"]) + int(cfg.get("qk_rope_head_dim", 0))
            return cls(num_layers, 1, width, dtype_bytes, block_size, kv_multiplier=1)
        num_heads = int(cfg["num_attention_heads"])
        num_kv_heads = int(cfg.get("num_key_value_heads") or num_heads)
        head_dim = int(cfg.get("head_dim") or cfg["hidden_size"] // num_heads)
        return cls(num_layers, num_kv_heads, head_dim, dtype_bytes, block_size)

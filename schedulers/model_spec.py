"""The architecture numbers of a decoder-only transformer that cost models need.

A `ModelSpec` is what FLOPs, weight bytes and KV bytes are computed from. It comes from a Hugging
Face `config.json` dict (`ModelSpec.from_hf_config`), from the small table of public configs
below (`MODEL_SPECS`), or from the seed articles' idealised MHA model (`mha_seed_spec`).
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

from transfer.kv_geometry import KVGeometry, dtype_num_bytes

# Model families whose MLP is a plain up/down projection (no gate). Everything else is taken to be
# gated (SwiGLU/GeGLU: Llama, Mistral, Qwen, Gemma, Phi-3 ...).
_NON_GATED_MODEL_TYPES = frozenset({
    "gpt2", "gpt_neox", "gptj", "opt", "bloom", "falcon", "phi", "gpt_bigcode", "starcoder2", "bert",
})


@dataclass(frozen=True)
class ModelSpec:
    """Sizes of one dense decoder-only transformer.

    Widths are in elements; `dtype_bytes` is bytes per weight and per KV element.
    `gated_mlp`: the MLP has three matrices (gate, up, down) of `hidden x intermediate`, else two.
    `tie_word_embeddings`: the LM head shares the embedding matrix (counted once in weight bytes).
    Mixture-of-experts and MLA models are out of scope of this spec.
    """

    num_layers: int
    hidden_size: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    intermediate_size: int
    vocab_size: int
    dtype_bytes: int
    gated_mlp: bool
    tie_word_embeddings: bool = False
    name: str = ""

    def __post_init__(self) -> None:
        for field_name in ("num_layers", "hidden_size", "num_heads", "num_kv_heads", "head_dim",
                           "intermediate_size", "dtype_bytes"):
            if getattr(self, field_name) <= 0:
                raise ValueError(f"ModelSpec.{field_name} must be positive, got {getattr(self, field_name)}")
        if self.num_heads % self.num_kv_heads:
            raise ValueError(f"num_heads ({self.num_heads}) must be a multiple of "
                             f"num_kv_heads ({self.num_kv_heads})")

    @property
    def q_width(self) -> int:
        """Elements per token of all query heads (= output projection input)."""
        return self.num_heads * self.head_dim

    @property
    def kv_width(self) -> int:
        """Elements per token of the K heads (and again of the V heads)."""
        return self.num_kv_heads * self.head_dim

    @property
    def group_size(self) -> int:
        """Query heads per KV head: 1 for MHA, G for GQA."""
        return self.num_heads // self.num_kv_heads

    @property
    def num_layer_params(self) -> int:
        """Weights of one layer: Q, K, V, O projections, the MLP and two norms."""
        d = self.hidden_size
        attention = d * self.q_width * 2 + d * self.kv_width * 2
        mlp = (3 if self.gated_mlp else 2) * d * self.intermediate_size
        return attention + mlp + 2 * d

    @property
    def num_params(self) -> int:
        """All weights: embeddings, layers, final norm and LM head (once if tied)."""
        embeddings = self.vocab_size * self.hidden_size
        lm_head = 0 if self.tie_word_embeddings else embeddings
        return embeddings + self.num_layers * self.num_layer_params + self.hidden_size + lm_head

    @property
    def weight_bytes_read_per_step(self) -> int:
        """Bytes of weights one forward step streams from memory: layers, final norm, LM head.

        The input embedding is only gathered (a few rows) and is left out; the LM head is read
        whole, whether or not it is tied to the embedding.
        """
        return (self.num_layers * self.num_layer_params + self.hidden_size
                + self.vocab_size * self.hidden_size) * self.dtype_bytes

    def kv_geometry(self, block_size: int = 16) -> KVGeometry:
        """The KV cache geometry of this model at `block_size` tokens per block."""
        return KVGeometry(self.num_layers, self.num_kv_heads, self.head_dim, self.dtype_bytes, block_size)

    @classmethod
    def from_hf_config(cls, config: Mapping[str, Any], name: str = "",
                       dtype: str | None = None) -> ModelSpec:
        """From a Hugging Face `config.json` dict (Llama-style keys; wrappers with `text_config`)."""
        cfg = dict(config)
        if "text_config" in cfg and "num_hidden_layers" not in cfg:
            cfg = dict(cfg["text_config"])
        missing = [k for k in ("num_hidden_layers", "hidden_size", "num_attention_heads",
                               "intermediate_size") if k not in cfg]
        if missing:
            raise ValueError(f"config lacks {missing}; a Llama-style config.json is expected")
        if cfg.get("kv_lora_rank") or cfg.get("num_local_experts") or cfg.get("n_routed_experts"):
            raise ValueError("MLA and mixture-of-experts configs are not supported by ModelSpec")
        num_heads = int(cfg["num_attention_heads"])
        hidden_size = int(cfg["hidden_size"])
        return cls(
            num_layers=int(cfg["num_hidden_layers"]),
            hidden_size=hidden_size,
            num_heads=num_heads,
            num_kv_heads=int(cfg.get("num_key_value_heads") or num_heads),
            head_dim=int(cfg.get("head_dim") or hidden_size // num_heads),
            intermediate_size=int(cfg["intermediate_size"]),
            vocab_size=int(cfg.get("vocab_size", 0)),
            dtype_bytes=dtype_num_bytes(dtype or cfg.get("torch_dtype") or cfg.get("dtype") or "bfloat16"),
            gated_mlp=str(cfg.get("model_type", "llama")) not in _NON_GATED_MODEL_TYPES,
            tie_word_embeddings=bool(cfg.get("tie_word_embeddings", False)),
            name=name or str(cfg.get("_name_or_path", "")),
        )


def mha_seed_spec(hidden_size: int = 4096, num_layers: int = 32, head_dim: int = 128,
                  vocab_size: int = 32000) -> ModelSpec:
    """The seed articles' idealised MHA model: FFN of `16 n d^2` (intermediate 4d, not gated).

    Its prefill FLOPs are exactly `L (24 n d^2 + 4 n^2 d)` in the full-square convention.
    """
    if hidden_size % head_dim:
        raise ValueError(f"hidden_size {hidden_size} is not a multiple of head_dim {head_dim}")
    num_heads = hidden_size // head_dim
    return ModelSpec(num_layers, hidden_size, num_heads, num_heads, head_dim, 4 * hidden_size,
                     vocab_size, dtype_bytes=2, gated_mlp=False,
                     name=f"mha-seed-d{hidden_size}-L{num_layers}")


# Public config.json numbers (meta-llama on Hugging Face).
_PUBLIC_CONFIGS: dict[str, dict[str, Any]] = {
    "llama-2-7b": {"model_type": "llama", "num_hidden_layers": 32, "hidden_size": 4096,
                   "num_attention_heads": 32, "num_key_value_heads": 32, "intermediate_size": 11008,
                   "vocab_size": 32000, "torch_dtype": "float16"},
    "llama-3-8b": {"model_type": "llama", "num_hidden_layers": 32, "hidden_size": 4096,
                   "num_attention_heads": 32, "num_key_value_heads": 8, "intermediate_size": 14336,
                   "vocab_size": 128256, "torch_dtype": "bfloat16"},
    "llama-3-70b": {"model_type": "llama", "num_hidden_layers": 80, "hidden_size": 8192,
                    "num_attention_heads": 64, "num_key_value_heads": 8, "intermediate_size": 28672,
                    "vocab_size": 128256, "torch_dtype": "bfloat16"},
}

MODEL_SPECS: dict[str, ModelSpec] = {
    name: ModelSpec.from_hf_config(cfg, name=name) for name, cfg in _PUBLIC_CONFIGS.items()
}


def load_model_spec(name_or_path: str) -> ModelSpec:
    """A built-in table name (`MODEL_SPECS`), or a directory holding a `config.json`."""
    if name_or_path in MODEL_SPECS:
        return MODEL_SPECS[name_or_path]
    config_path = Path(name_or_path) / "config.json"
    if not config_path.is_file():
        raise ValueError(f"unknown model {name_or_path!r}: not one of {sorted(MODEL_SPECS)} "
                         f"and no config.json in that directory")
    with config_path.open() as f:
        return ModelSpec.from_hf_config(json.load(f), name=str(name_or_path))

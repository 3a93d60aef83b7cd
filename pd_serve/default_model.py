"""The default model: a small Llama with random weights and a byte-level tokenizer, made locally.

No model hub is reachable from where pd-serve is tested, so the default model is generated on
first use, deterministically: weights come from numpy's PCG64 stream with a fixed seed (stable
across machines and library versions), so every machine serves the same model and greedy outputs
are comparable across runs. Any Hugging Face model directory or name replaces it via `model:` in
the config.

Size: 4 layers, hidden 256, GQA 4/2 heads of 64, 16,384 positions: an engine starts in seconds and
a 4,000-token prefill takes about half a second on one core (measured: 0.48 s), clearly measurable.
The output head is scaled up so that greedy decoding has clear winners (random weights with the
usual 0.02 init give near-ties that flip on rounding differences between kernels).
"""
from __future__ import annotations

import json
import logging
import os
from pathlib import Path

logger = logging.getLogger(__name__)

DEFAULT_MODEL_NAME = "pd-serve-tiny-llama"
MODEL_VERSION = 2  # bump when the architecture or the generation procedure changes
SEED = 20261129

LLAMA_CONFIG = {
    "architectures": ["LlamaForCausalLM"],
    "model_type": "llama",
    "hidden_size": 256,
    "intermediate_size": 768,
    "num_hidden_layers": 4,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 64,
    "hidden_act": "silu",
    "max_position_embeddings": 16384,
    "rms_norm_eps": 1e-5,
    "rope_theta": 500000.0,
    "tie_word_embeddings": False,
    "attention_bias": False,
    "mlp_bias": False,
    "torch_dtype": "float32",
}
# Byte-level vocabulary: 256 byte tokens, then the special tokens.
SPECIAL_TOKENS = ["<|begin_of_text|>", "<|end_of_text|>", "<|pad|>"]
VOCAB_SIZE = 256 + len(SPECIAL_TOKENS)
BOS_ID, EOS_ID, PAD_ID = 256, 257, 258
INIT_STD = 0.02
LM_HEAD_STD = 0.5  # sharp logits: greedy argmax is robust to kernel rounding


def default_cache_dir() -> Path:
    root = os.environ.get("PD_SERVE_CACHE") or os.path.join(
        os.environ.get("XDG_CACHE_HOME", os.path.expanduser("~/.cache")), "pd-serve")
    return Path(root) / "models" / f"{DEFAULT_MODEL_NAME}-v{MODEL_VERSION}"


def ensure_default_model(path: str | os.PathLike | None = None) -> str:
    """Return the default model's directory, generating it there first if it is not complete."""
    target = Path(path) if path else default_cache_dir()
    if (target / ".complete").exists():
        return str(target)
    logger.info("generating the default model into %s", target)
    tmp = target.with_name(target.name + f".tmp{os.getpid()}")
    tmp.mkdir(parents=True, exist_ok=True)
    _write_config(tmp)
    _write_weights(tmp)
    _write_tokenizer(tmp)
    (tmp / ".complete").write_text("ok\n")
    try:
        tmp.rename(target)  # atomic: concurrent first uses end with one complete copy
    except OSError:
        if not (target / ".complete").exists():
            raise
        import shutil
        shutil.rmtree(tmp, ignore_errors=True)
    return str(target)


def _write_config(out: Path) -> None:
    cfg = dict(LLAMA_CONFIG, vocab_size=VOCAB_SIZE, bos_token_id=BOS_ID, eos_token_id=EOS_ID,
               pad_token_id=PAD_ID)
    (out / "config.json").write_text(json.dumps(cfg, indent=2))
    (out / "generation_config.json").write_text(json.dumps(
        {"bos_token_id": BOS_ID, "eos_token_id": EOS_ID, "pad_token_id": PAD_ID}))


def _parameter_shapes() -> dict[str, tuple[int, ...]]:
    c = LLAMA_CONFIG
    d, f, hd = c["hidden_size"], c["intermediate_size"], c["head_dim"]
    q, kv = c["num_attention_heads"] * hd, c["num_key_value_heads"] * hd
    shapes: dict[str, tuple[int, ...]] = {"model.embed_tokens.weight": (VOCAB_SIZE, d)}
    for i in range(c["num_hidden_layers"]):
        p = f"model.layers.{i}."
        shapes.update({
            p + "input_layernorm.weight": (d,),
            p + "post_attention_layernorm.weight": (d,),
            p + "self_attn.q_proj.weight": (q, d),
            p + "self_attn.k_proj.weight": (kv, d),
            p + "self_attn.v_proj.weight": (kv, d),
            p + "self_attn.o_proj.weight": (d, q),
            p + "mlp.gate_proj.weight": (f, d),
            p + "mlp.up_proj.weight": (f, d),
            p + "mlp.down_proj.weight": (d, f),
        })
    shapes["model.norm.weight"] = (d,)
    shapes["lm_head.weight"] = (VOCAB_SIZE, d)
    return shapes


def _write_weights(out: Path) -> None:
    import numpy as np
    from safetensors.numpy import save_file

    rng = np.random.Generator(np.random.PCG64(SEED))
    tensors = {}
    for name, shape in _parameter_shapes().items():  # insertion order fixes the stream
        if name.endswith("norm.weight"):
            tensors[name] = np.ones(shape, dtype=np.float32)
            continue
        std = LM_HEAD_STD if name == "lm_head.weight" else INIT_STD
        tensors[name] = (rng.standard_normal(shape, dtype=np.float32) * std).astype(np.float32)
    save_file(tensors, str(out / "model.safetensors"), metadata={"format": "pt"})


def _write_tokenizer(out: Path) -> None:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from tokenizers.pre_tokenizers import ByteLevel
    from transformers import PreTrainedTokenizerFast

    alphabet = ByteLevel.alphabet()  # the 256 printable stand-ins for bytes, GPT-2 style
    byte_to_char = _bytes_to_unicode()
    vocab = {byte_to_char[b]: b for b in range(256)}
    assert set(vocab) == set(alphabet)
    for i, tok in enumerate(SPECIAL_TOKENS):
        vocab[tok] = 256 + i
    tok = Tokenizer(models.BPE(vocab=vocab, merges=[], fuse_unk=False))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    tok.decoder = decoders.ByteLevel()
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok, bos_token=SPECIAL_TOKENS[0], eos_token=SPECIAL_TOKENS[1],
        pad_token=SPECIAL_TOKENS[2], model_max_length=LLAMA_CONFIG["max_position_embeddings"])
    fast.add_special_tokens({"additional_special_tokens": []})
    fast.save_pretrained(str(out))


def _bytes_to_unicode() -> dict[int, str]:
    """GPT-2's reversible byte -> printable character map (what ByteLevel uses)."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(
        range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return dict(zip(bs, (chr(c) for c in cs)))


if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO)
    print(ensure_default_model())

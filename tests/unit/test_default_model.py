"""The default model is the same on every machine: fixed architecture, fixed-seed weights."""
from __future__ import annotations

import hashlib
import json
from pathlib import Path

from pd_serve.default_model import ensure_default_model

# sha256 over every tensor's name and raw float32 bytes in file order; changes only with
# MODEL_VERSION. A different value on another machine means it would serve a different model.
EXPECTED_WEIGHTS_SHA256 = "9eb77a524a6b12faea35649c190b93b7a13443ef96582be928461a418cde7277"


def _weights_digest(path: Path) -> str:
    from safetensors.numpy import load_file

    h = hashlib.sha256()
    for name, arr in sorted(load_file(str(path / "model.safetensors")).items()):
        h.update(name.encode())
        h.update(arr.tobytes())
    return h.hexdigest()


def test_generation_is_deterministic(tmp_path):
    a = Path(ensure_default_model(tmp_path / "a"))
    b = Path(ensure_default_model(tmp_path / "b"))
    assert _weights_digest(a) == _weights_digest(b) == EXPECTED_WEIGHTS_SHA256
    cfg = json.loads((a / "config.json").read_text())
    assert cfg["architectures"] == ["LlamaForCausalLM"]
    assert cfg["max_position_embeddings"] >= 8192


def test_tokenizer_is_byte_level_and_round_trips(tmp_path):
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(ensure_default_model(tmp_path / "m"))
    text = "Prefill, decode — 프리필과 디코드!"
    ids = tok.encode(text, add_special_tokens=False)
    assert len(ids) == len(text.encode("utf-8"))  # one token per byte
    assert tok.decode(ids) == text
    assert max(ids) < 256 and tok.eos_token_id == 257


def test_a_complete_model_is_not_regenerated(tmp_path):
    path = Path(ensure_default_model(tmp_path / "m"))
    stamp = (path / "model.safetensors").stat().st_mtime_ns
    assert ensure_default_model(path) == str(path)
    assert (path / "model.safetensors").stat().st_mtime_ns == stamp

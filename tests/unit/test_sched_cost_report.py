from __future__ import annotations

import json

import pytest

from schedulers.cost_report import main, parse_lengths


def test_lengths_accept_k_suffixes():
    assert parse_lengths("512,1K,4k") == [512, 1024, 4096]
    with pytest.raises(ValueError):
        parse_lengths("1M")


def test_report_prints_and_writes_json(tmp_path, capsys):
    out = tmp_path / "cost.json"
    assert main(["--model", "llama-3-8b", "--hardware", "a100", "--lengths", "1K,10K",
                 "--json", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "attn share" in printed and "10240" in printed
    rows = json.loads(out.read_text())["rows"]
    assert [r["num_tokens"] for r in rows] == [1024, 10240]
    assert rows[0]["predicted_ttft_s"] == pytest.approx(0.081, rel=0.1)  # the seed measured 81 ms


def test_full_convention_reproduces_the_seed_table_row(capsys, tmp_path):
    (tmp_path / "config.json").write_text(json.dumps({
        "num_hidden_layers": 32, "hidden_size": 4096, "num_attention_heads": 32,
        "intermediate_size": 16384, "model_type": "gpt_neox"}))  # the seed's 16 n d^2 FFN, not gated
    out = tmp_path / "seed.json"
    assert main(["--model", str(tmp_path), "--hardware", "h100", "--lengths", "4K",
                 "--attention", "full", "--json", str(out)]) == 0
    row = json.loads(out.read_text())["rows"][0]
    assert row["linear_flops"] / 1e12 == pytest.approx(52.8, abs=0.05)
    assert row["attention_flops"] / 1e12 == pytest.approx(8.8, abs=0.05)


def test_bad_input_returns_2(capsys):
    assert main(["--model", "nope", "--hardware", "a100", "--lengths", "1K"]) == 2
    assert "unknown model" in capsys.readouterr().err

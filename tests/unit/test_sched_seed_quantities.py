"""The seed's derived numbers: crossover, doubling ratios, GQA rows, roofline thresholds.

The seed's GQA rows use a simplified linear term `(24 - 4 (1 - 1/G)) n d^2` (K and V shrunk by G,
the MHA model's 16 n d^2 FFN kept). Its numbers are tested against that formula; the exact
Llama-3 architectures (gated, wider MLPs) are tested separately:

| model        | seed formula: linear@4K, crossover | exact: linear@4K, crossover (full / causal) |
|--------------|------------------------------------|---------------------------------------------|
| Llama-3-8B   | 46.2 TFLOPs, 5.25d = 21,504        | 57.2 TFLOPs, 6.5d = 26,624 / 53,247         |
| Llama-3-70B  | 450.8 TFLOPs, 5.125d = 41,984      | 560.8 TFLOPs, 6.375d = 52,224 / 104,447     |

The seed's "~168K" crossover for Llama-3-70B is 20.5 d = 167,936: it drops the 4 of `4 n^2 d`
(the same formula gives its own 21K for d=4096 only because it divides by 4 there). Neither the
seed formula nor the exact counts give 168K.
"""
from __future__ import annotations

import pytest

from schedulers.flops import prefill_flops
from schedulers.hardware import HARDWARE_SPECS, HardwareSpec
from schedulers.model_spec import MODEL_SPECS, mha_seed_spec
from schedulers.roofline import prefill_time_s, roofline_threshold_flop_per_byte
from schedulers.seed_quantities import (crossover_tokens, max_chunk_tokens_for_slo,
                                        seed_gqa_crossover_tokens, seed_gqa_linear_flops,
                                        seed_max_chunk_tokens, ttft_doubling_ratio)

D = 4096


def test_mha_crossover_is_six_d_about_24k():
    assert crossover_tokens(mha_seed_spec(D, 32)) == 6 * D == 24576


def test_causal_crossover_is_about_twice_as_far():
    assert crossover_tokens(mha_seed_spec(D, 32), causal=True) == 12 * D - 1


def test_doubling_ratio_goes_from_two_through_three_to_four():
    spec = mha_seed_spec(D, 32)
    assert ttft_doubling_ratio(spec, 1) == pytest.approx(2.0, abs=1e-3)
    assert ttft_doubling_ratio(spec, 6 * D) == pytest.approx(3.0)  # (48d + 16n) / (24d + 4n) at n = 6d
    assert ttft_doubling_ratio(spec, 10**9) == pytest.approx(4.0, abs=1e-3)


def test_seed_gqa_rows_follow_the_seed_formula():
    # Llama-3-8B: G=4, d=4096, L=32 -> 21 n d^2; Llama-3-70B: G=8, d=8192, L=80 -> 20.5 n d^2.
    assert seed_gqa_linear_flops(4096, 4096, 32, 4) / 1e12 == pytest.approx(46.2, abs=0.05)
    assert seed_gqa_linear_flops(4096, 8192, 80, 8) / 1e12 == pytest.approx(451, abs=0.5)
    assert seed_gqa_crossover_tokens(4096, 4) == 21504  # "~21K"
    assert seed_gqa_crossover_tokens(8192, 8) == 41984  # not the seed's "~168K"
    assert 4 * seed_gqa_crossover_tokens(8192, 8) == 167936  # the seed's 168K: the 4 dropped


def test_seed_attention_terms_for_gqa_rows():
    # Attention is untouched by GQA: 4 n^2 d L. Seed: 8.8 (8B) and "~43.9" (70B; 43.98 exactly).
    assert prefill_flops(MODEL_SPECS["llama-3-8b"], 4096).attention_flops / 1e12 == pytest.approx(8.8, abs=0.05)
    assert prefill_flops(MODEL_SPECS["llama-3-70b"], 4096).attention_flops / 1e12 == pytest.approx(43.98, abs=0.01)


def test_exact_llama3_linear_terms_and_crossovers():
    llama8, llama70 = MODEL_SPECS["llama-3-8b"], MODEL_SPECS["llama-3-70b"]
    assert prefill_flops(llama8, 4096).linear_flops / 1e12 == pytest.approx(57.2, abs=0.05)  # 26 n d^2
    assert prefill_flops(llama70, 4096).linear_flops / 1e12 == pytest.approx(560.8, abs=0.05)  # 25.5 n d^2
    assert crossover_tokens(llama8) == 6.5 * 4096 == 26624
    assert crossover_tokens(llama70) == 6.375 * 8192 == 52224
    assert crossover_tokens(llama8, causal=True) == 53247


def test_roofline_thresholds_153_and_148():
    assert round(roofline_threshold_flop_per_byte(HARDWARE_SPECS["a100"])) == 153
    assert round(roofline_threshold_flop_per_byte(HARDWARE_SPECS["h100"])) == 148


def test_max_chunk_meets_the_slo_and_one_more_token_does_not():
    spec, hw = MODEL_SPECS["llama-3-8b"], HARDWARE_SPECS["a100"]
    chunk = max_chunk_tokens_for_slo(spec, hw, 0.2)
    assert prefill_time_s(spec, hw, chunk) <= 0.2 < prefill_time_s(spec, hw, chunk + 1)
    deep = max_chunk_tokens_for_slo(spec, hw, 0.2, num_context_tokens=100_000)
    assert deep < chunk  # attention over a long context eats the budget


def test_max_chunk_matches_the_seed_closed_form_without_efficiency_or_attention():
    # Seed: chunk <= T_max * peak / FLOPs per token. With efficiency 1 and a short chunk, the
    # attention term is small: within 3%.
    spec = MODEL_SPECS["llama-3-8b"]
    ideal = HardwareSpec("a100-ideal", 312e12, 2.04e12)
    closed = seed_max_chunk_tokens(spec, ideal, 0.05)
    assert max_chunk_tokens_for_slo(spec, ideal, 0.05) == pytest.approx(closed, rel=0.03)


def test_max_chunk_is_zero_when_even_one_token_misses():
    spec, hw = MODEL_SPECS["llama-3-70b"], HARDWARE_SPECS["a100"]
    assert max_chunk_tokens_for_slo(spec, hw, 1e-4) == 0

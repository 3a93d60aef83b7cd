"""FLOPs against the seed's table: d=4096, L=32 MHA, full-square attention convention.

The seed prints one decimal below 100 TFLOPs and integers above; it truncates in two cells
(8K linear 105.55 -> "105.5", 128K linear 1688.8 -> "1,688", hence total "10,695"), so the check
is "within one unit of the last printed digit" (two for totals, which the seed sums from its
printed cells: 1,688 + 9,007 = 10,695 against 10,696.05 exactly).
"""
from __future__ import annotations

import pytest

from schedulers.flops import (attention_flops, decode_step_flops, linear_flops, num_attention_pairs,
                              prefill_flops)
from schedulers.model_spec import MODEL_SPECS, mha_seed_spec
from schedulers.seed_quantities import SEED_MHA_FLOPS_TABLE

D, L = 4096, 32


def _unit(printed: float) -> float:
    return 0.1 if printed < 100 else 1.0


@pytest.mark.parametrize("row", SEED_MHA_FLOPS_TABLE, ids=lambda r: str(r[0]))
def test_seed_flops_table_is_reproduced_to_its_rounding(row):
    n, linear_t, attention_t, total_t, share_pct = row
    count = prefill_flops(mha_seed_spec(D, L), n)
    assert abs(count.linear_flops / 1e12 - linear_t) <= _unit(linear_t) + 1e-9
    assert abs(count.attention_flops / 1e12 - attention_t) <= _unit(attention_t) + 1e-9
    assert abs(count.total_flops / 1e12 - total_t) <= 2 * _unit(total_t) + 1e-9
    assert round(100 * count.attention_share) == share_pct


@pytest.mark.parametrize("n", [1, 512, 4096, 131072])
def test_seed_formula_comes_out_exactly_for_the_mha_spec(n):
    count = prefill_flops(mha_seed_spec(D, L), n)
    assert count.linear_flops == L * 24 * n * D**2
    assert count.attention_flops == L * 4 * n**2 * D


def test_causal_counts_the_lower_triangle_with_its_diagonal():
    assert num_attention_pairs(4) == 16
    assert num_attention_pairs(4, causal=True) == 10  # 1 + 2 + 3 + 4
    spec = mha_seed_spec(D, L)
    assert attention_flops(spec, 4096, causal=True) == pytest.approx(attention_flops(spec, 4096) / 2, rel=1e-3)


def test_causal_chunks_add_up_to_the_whole_prompt():
    spec = MODEL_SPECS["llama-3-8b"]
    whole = prefill_flops(spec, 3000, causal=True)
    chunks = [prefill_flops(spec, 1000, start, causal=True) for start in (0, 1000, 2000)]
    assert sum(c.total_flops for c in chunks) == whole.total_flops


def test_full_convention_is_not_additive_over_chunks():
    # Chunks of 1000 count 1000 x (1000, 2000, 3000) = 6e6 pairs: between the causal 4.5e6 and
    # the square 9e6 of the whole prompt.
    spec = MODEL_SPECS["llama-3-8b"]
    chunks = sum(num_attention_pairs(1000, start) for start in (0, 1000, 2000))
    assert chunks == 6_000_000
    assert num_attention_pairs(3000, causal=True) < chunks < num_attention_pairs(3000)
    assert prefill_flops(spec, 3000).attention_flops == L * 4 * 4096 * 9_000_000


def test_gqa_shrinks_only_k_and_v():
    # Llama-3-8B per token and layer: Q,O 4d^2, K,V 2*2*d*1024 = d^2, gated MLP 6*d*14336 = 21d^2.
    spec = MODEL_SPECS["llama-3-8b"]
    assert linear_flops(spec, 1) == L * 26 * D**2


def test_lm_head_is_counted_only_when_asked():
    spec = MODEL_SPECS["llama-3-8b"]
    extra = linear_flops(spec, 10, num_logit_tokens=1) - linear_flops(spec, 10)
    assert extra == 2 * 4096 * 128256


def test_decode_step_meets_context_and_itself():
    spec = MODEL_SPECS["llama-3-8b"]
    step = decode_step_flops(spec, [100, 200], with_lm_head=False)
    assert step.linear_flops == linear_flops(spec, 2)
    assert step.attention_flops == L * 4 * 4096 * (101 + 201)


def test_negative_counts_are_rejected():
    with pytest.raises(ValueError):
        prefill_flops(mha_seed_spec(), -1)

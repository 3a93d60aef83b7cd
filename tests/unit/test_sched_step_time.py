from __future__ import annotations

import pytest

from schedulers.hardware import HARDWARE_SPECS
from schedulers.least_squares import least_squares, nonnegative_least_squares
from schedulers.model_spec import MODEL_SPECS
from schedulers.roofline import decode_step_time_s
from schedulers.step_time import StepSample, StepTimeModel, step_features

SPEC = MODEL_SPECS["llama-3-8b"]
KV = SPEC.kv_geometry(16)
TRUE = StepTimeModel(SPEC, KV, overhead_s=0.004, s_per_linear_flop=2e-15,
                     s_per_attention_flop=3e-15, s_per_kv_byte=6e-13)

SHAPES = [  # (prefill tokens, prefill context, decode contexts)
    (512, 0, ()), (2048, 0, ()), (2048, 8192, ()), (1024, 30000, ()),
    (0, 0, (1000,) * 8), (0, 0, (8000,) * 32), (256, 0, (2000,) * 16), (0, 0, (100,)),
]


def test_fit_recovers_known_coefficients():
    samples = [StepSample(p, c, d, TRUE.predict(p, c, d)) for p, c, d in SHAPES]
    fitted = StepTimeModel.fit(SPEC, KV, samples)
    assert fitted.overhead_s == pytest.approx(TRUE.overhead_s, rel=1e-6)
    assert fitted.s_per_linear_flop == pytest.approx(TRUE.s_per_linear_flop, rel=1e-6)
    assert fitted.s_per_attention_flop == pytest.approx(TRUE.s_per_attention_flop, rel=1e-6)
    assert fitted.s_per_kv_byte == pytest.approx(TRUE.s_per_kv_byte, rel=1e-6)


def test_fit_gives_zero_to_a_feature_the_samples_never_vary():
    # Prefill-only samples at context 0 read no KV: its coefficient cannot be learned, stays 0.
    samples = [StepSample(n, 0, (), 0.001 + 1e-15 * n * 1e9) for n in (128, 512, 2048, 8192)]
    fitted = StepTimeModel.fit(SPEC, KV, samples)
    assert fitted.s_per_kv_byte == 0.0
    for s in samples:
        assert fitted.predict(s.prefill_tokens) == pytest.approx(s.duration_s, rel=1e-3)


def test_nonnegative_least_squares_drops_a_column_that_would_go_negative():
    rows = [(1.0, 1.0), (1.0, 2.0), (1.0, 3.0)]
    targets = [3.0, 2.0, 1.0]  # slope -1 unconstrained
    assert least_squares(rows, targets)[1] == pytest.approx(-1.0)
    assert nonnegative_least_squares(rows, targets) == pytest.approx([2.0, 0.0])


def test_roofline_defaults_predict_compute_and_memory_terms():
    model = StepTimeModel.from_roofline(SPEC, HARDWARE_SPECS["a100"])
    weights_s = SPEC.weight_bytes_read_per_step / (2.04e12 * 0.8)
    assert model.overhead_s == pytest.approx(weights_s)
    assert model.predict() == 0.0
    # A 1K prefill: ~77 ms of compute plus one weight read (~9 ms).
    assert model.predict(1024) == pytest.approx(0.0766 + weights_s, rel=0.01)


def test_roofline_defaults_add_what_the_roofline_overlaps():
    # 8 decodes at 1K: memory roof ~9.9 ms; the additive model adds the ~0.7 ms of compute.
    hw = HARDWARE_SPECS["a100"]
    model = StepTimeModel.from_roofline(SPEC, hw)
    contexts = [1024] * 8
    roofline_s = decode_step_time_s(SPEC, hw, contexts)
    assert roofline_s <= model.predict(0, 0, contexts) <= 1.1 * roofline_s


def test_chunked_prefill_steps_cover_the_prompt_with_growing_context():
    model = StepTimeModel.from_roofline(SPEC, HARDWARE_SPECS["a100"])
    steps = model.chunked_prefill_steps_s(5000, 100, 2048)
    assert steps == [model.predict(2048, 100), model.predict(2048, 2148), model.predict(904, 4196)]


def test_step_features_count_context_kv_reads():
    features = step_features(SPEC, KV, 16, 32, (16,))
    assert features.kv_bytes_read == KV.bytes_for_tokens(32) + KV.bytes_for_tokens(16)

"""The engine loop's step gap: measured from steady decode steps, added to the fitted model."""
from __future__ import annotations

import pytest

from pd_serve.calibration import fit_step_model, step_gaps
from schedulers.step_time import StepTimeModel
from transfer.kv_geometry import KVGeometry

HF = {"hidden_size": 256, "intermediate_size": 512, "num_hidden_layers": 2, "num_attention_heads": 4,
      "num_key_value_heads": 2, "vocab_size": 1000, "torch_dtype": "float32"}


def step(t, elapsed, prefill=0, decodes=4):
    return {"t": t, "elapsed_s": elapsed, "num_prefill_reqs": int(prefill > 0),
            "num_prefill_tokens": prefill, "num_decode_reqs": decodes, "num_decode_tokens": decodes}


def test_the_gap_is_the_time_between_steady_steps_less_the_later_ones_execution():
    steps = [step(1.000, 0.005), step(1.007, 0.006), step(1.015, 0.0065)]
    assert step_gaps(steps, 4) == pytest.approx([0.001, 0.0015])


def test_steps_that_admit_or_lose_requests_are_not_steady():
    steps = [step(1.000, 0.030, prefill=64, decodes=3), step(1.040, 0.006), step(1.047, 0.006),
             step(1.060, 0.004, decodes=3)]
    assert step_gaps(steps, 4) == pytest.approx([0.001])


def test_a_record_that_came_early_gives_no_negative_gap():
    assert step_gaps([step(1.0, 0.005), step(1.003, 0.005)], 4) == [0.0]


def test_the_calibrated_model_predicts_execution_plus_the_median_gap():
    kv = KVGeometry.from_hf_config(HF, 32, None)
    samples = [{"prefill_tokens": n, "prefill_context": 0, "decode_contexts": [], "duration_s": 0.002 + n * 1e-5}
               for n in (64, 128, 256, 512, 1024)]
    samples += [{"prefill_tokens": 0, "prefill_context": 0, "decode_contexts": [80] * b,
                 "duration_s": 0.002 + b * 1e-4} for b in (1, 4, 8)]
    plain = fit_step_model(HF, kv, samples)
    gapped = fit_step_model(HF, kv, samples, step_gaps_s=[0.001, 0.0012, 0.005])
    assert gapped.step_gap_s == pytest.approx(0.0012)
    assert gapped.model.overhead_s == pytest.approx(plain.model.overhead_s + 0.0012)
    assert gapped.median_abs_rel_error == pytest.approx(plain.median_abs_rel_error)  # fit on execution
    assert gapped.summary()["execute_overhead_s"] == pytest.approx(plain.model.overhead_s)
    assert isinstance(gapped.model, StepTimeModel)


def test_the_calibration_says_how_the_engines_were_probed():
    kv = KVGeometry.from_hf_config(HF, 32, None)
    samples = [{"prefill_tokens": n, "prefill_context": 0, "decode_contexts": [], "duration_s": 0.002 + n * 1e-5}
               for n in (64, 256, 1024)]
    assert fit_step_model(HF, kv, samples).summary()["probed"] == "all engines at once"
    alone = fit_step_model(HF, kv, samples, one_at_a_time=True)
    assert alone.one_at_a_time and alone.summary()["probed"] == "one engine at a time"

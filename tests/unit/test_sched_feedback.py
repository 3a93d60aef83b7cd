"""The TTFT feedback factor follows a machine that runs slower or faster than calibrated."""
from __future__ import annotations

import math

import pytest

from schedulers.feedback import TtftFeedback
from schedulers.model_spec import MODEL_SPECS
from schedulers.step_time import StepTimeModel
from schedulers.hardware import get_hardware


def test_factor_is_one_until_warmed_up():
    fb = TtftFeedback(warmup=3)
    fb.observe(1.0, 2.0)
    fb.observe(1.0, 2.0)
    assert fb.factor == 1.0
    fb.observe(1.0, 2.0)
    assert fb.factor == pytest.approx(2.0)


def test_factor_tracks_a_change_of_speed():
    fb = TtftFeedback(half_life=5, warmup=1)
    for _ in range(30):
        fb.observe(1.0, 0.5)  # machine twice as fast as calibrated
    assert fb.factor == pytest.approx(0.5, rel=1e-6)
    for _ in range(30):
        fb.observe(1.0, 1.5)  # then 1.5x slower: after 6 half-lives the old regime weighs ~1.5%
    assert fb.factor == pytest.approx(1.5, rel=0.05)


def test_factor_is_clamped_and_ignores_nonsense():
    fb = TtftFeedback(warmup=1, max_factor=4.0)
    fb.observe(0.0, 1.0)
    fb.observe(1.0, -1.0)
    assert fb.num_observed == 0
    fb.observe(0.001, 10.0)
    assert fb.factor == 4.0


def test_scaled_model_predicts_proportionally_longer_steps():
    spec = MODEL_SPECS["llama-3-8b"]
    model = StepTimeModel.from_roofline(spec, get_hardware("a100"))
    t = model.predict(1024, 0, [512] * 4)
    assert model.scaled(1.7).predict(1024, 0, [512] * 4) == pytest.approx(1.7 * t)
    with pytest.raises(ValueError):
        model.scaled(0)
    assert math.isclose(model.scaled(1.0).predict(10), model.predict(10))

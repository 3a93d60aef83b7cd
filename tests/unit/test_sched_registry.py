from __future__ import annotations

import subprocess
import sys

import pytest

from schedulers.hardware import HARDWARE_SPECS
from schedulers.model_spec import MODEL_SPECS
from schedulers.policies import (AdaptivePolicy, ColocatedPolicy, DisaggregatedPolicy,
                                 LengthThresholdPolicy)
from schedulers.registry import POLICY_NAMES, make_policy
from schedulers.step_time import StepTimeModel


def test_every_name_builds_its_policy():
    assert isinstance(make_policy("colocated"), ColocatedPolicy)
    assert isinstance(make_policy("disaggregated"), DisaggregatedPolicy)
    assert isinstance(make_policy("length_threshold"), LengthThresholdPolicy)
    assert make_policy("length_threshold", threshold_tokens=2048).threshold_tokens == 2048
    assert isinstance(make_policy("adaptive", model="llama-3-8b", hardware="h100"), AdaptivePolicy)
    model = StepTimeModel.from_roofline(MODEL_SPECS["llama-3-8b"], HARDWARE_SPECS["cpu"])
    assert make_policy("adaptive", step_model=model, chunk_tokens=512).chunk_tokens == 512
    assert POLICY_NAMES == ("adaptive", "colocated", "disaggregated", "length_threshold")


def test_policy_names_match_the_registry_names():
    for name in ("colocated", "disaggregated", "length_threshold"):
        assert make_policy(name).name == name
    assert make_policy("adaptive", model="llama-3-8b", hardware="a100").name == "adaptive"


def test_unknown_name_lists_the_allowed_ones():
    with pytest.raises(ValueError, match="adaptive, colocated, disaggregated, length_threshold"):
        make_policy("round_robin")


def test_unknown_parameter_lists_the_accepted_ones():
    with pytest.raises(ValueError, match="threshold_tokens"):
        make_policy("length_threshold", threshold=5)


def test_adaptive_needs_a_step_model_or_model_and_hardware():
    with pytest.raises(ValueError, match="step_model"):
        make_policy("adaptive")
    with pytest.raises(ValueError, match="unknown hardware"):
        make_policy("adaptive", model="llama-3-8b", hardware="tpu")
    with pytest.raises(ValueError, match="unknown model"):
        make_policy("adaptive", model="no-such-model", hardware="a100")


def test_the_package_imports_no_heavy_frameworks():
    code = ("import sys, schedulers, schedulers.registry, schedulers.cost_report, schedulers.seed_quantities; "
            "bad = [m for m in ('ray', 'vllm', 'torch', 'nixl') if m in sys.modules]; "
            "assert not bad, bad")
    subprocess.run([sys.executable, "-c", code], check=True)

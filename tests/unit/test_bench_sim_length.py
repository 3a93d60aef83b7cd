"""The host's stretch by prompt length (the length form): a stretched prefill's excess over its
engine time scaled by the length probe's excess at its prompt's length over its excess at the
load probe's prompt length."""
from __future__ import annotations

from dataclasses import replace

import pytest

from bench.simulator import simulate
from bench.simulator.config import SimConfigError, sim_config_from_dict
from bench.simulator.host import HostSpec
from bench.workloads import RequestSpec, Workload
from schedulers.policies import DisaggregatedPolicy

from .sim_clusters import MODEL, cluster

# run 80's colocated engines, round 0: x1.78 at 256 tokens, x1.56 at 1,536, x1.40 at 3,584
POINTS = ((256, 1.78), (1536, 1.56), (3584, 1.40))
HOST = HostSpec(num_cores=2, load_stretch=((1, 1.6),), length_stretch=POINTS, length_reference_tokens=1024)


def test_the_excess_scales_by_the_probes_excess_at_the_prompts_length_over_the_reference():
    reference = 0.78 + (0.56 - 0.78) * (1024 - 256) / (1536 - 256)  # the probe joined at 1,024 tokens
    assert HOST.length_factor(1.6, [(1024, 1024)]) == pytest.approx(1.6)  # the load probe's own prompt
    assert HOST.length_factor(1.6, [(256, 256)]) == pytest.approx(1 + 0.6 * 0.78 / reference)
    assert HOST.length_factor(1.6, [(2048, 3584)]) == pytest.approx(1 + 0.6 * 0.40 / reference)  # a chunk of it
    assert HOST.length_factor(2.2, [(2560, 2560)]) == pytest.approx(1 + 1.2 * 0.48 / reference)
    # beyond the probe's lengths, held at its shortest and longest
    assert HOST.length_factor(1.6, [(64, 64)]) == HOST.length_factor(1.6, [(256, 256)])
    assert HOST.length_factor(1.6, [(2048, 8000)]) == HOST.length_factor(1.6, [(2048, 3584)])
    # two prompts in one step: weighted by the tokens each computes
    both = HOST.length_factor(1.6, [(256, 256), (768, 3584)])
    assert both == pytest.approx(1 + 0.6 * (256 * 0.78 + 768 * 0.40) / 1024 / reference)


def test_an_unstretched_prefill_stays_unstretched_and_no_probe_leaves_the_factor():
    assert HOST.length_factor(1.0, [(256, 256)]) == 1.0
    assert HostSpec(num_cores=2, load_stretch=((1, 1.6),)).length_factor(1.6, [(256, 256)]) == 1.6
    assert replace(HOST, num_cores=0).length_factor(1.6, [(256, 256)]) == 1.6


def test_a_prefill_only_engine_takes_its_own_points_when_probed_there():
    beside = replace(HOST, length_stretch_beside=((256, 1.2), (3584, 1.6)))
    assert beside.length_factor(1.6, [(256, 256)], beside=True) < beside.length_factor(1.6, [(3584, 3584)], beside=True)
    assert beside.length_factor(1.6, [(256, 256)]) == HOST.length_factor(1.6, [(256, 256)])
    assert HOST.length_factor(1.6, [(256, 256)], beside=True) == HOST.length_factor(1.6, [(256, 256)])


def test_the_ratio_shape_scales_the_whole_factor_and_takes_a_probe_without_stretch_at_the_reference():
    # hybrid's engine that streams on run 112: x1.03 / 0.88 / 0.95, none at 1,024 tokens (joined: 0.94)
    flat = replace(HOST, length_stretch=((256, 1.03), (1536, 0.88), (3584, 0.95)), length_shape="ratio")
    reference = 1.03 + (0.88 - 1.03) * (1024 - 256) / (1536 - 256)
    assert flat.length_factor(1.13, [(1024, 1024)]) == pytest.approx(1.13)  # the load probe's own prompt
    assert flat.length_factor(1.13, [(1536, 1536)]) == pytest.approx(1.13 * 0.88 / reference)
    assert flat.length_factor(1.13, [(256, 256), (768, 3584)]) == pytest.approx(
        1.13 * (256 * 1.03 + 768 * 0.95) / 1024 / reference)
    assert flat.length_factor(1.02, [(1536, 1536)]) == 1.0  # never below 1
    assert flat.length_factor(1.0, [(256, 256)]) == 1.0  # an unstretched prefill stays unstretched
    ratio = replace(HOST, length_shape="ratio")  # where the probe stretched: close to the excess shape
    assert ratio.length_factor(1.6, [(256, 256)]) == pytest.approx(1.6 * 1.78 / (1 + 0.78 + (0.56 - 0.78) * 0.6))
    with pytest.raises(ValueError, match="length_shape"):
        replace(HOST, length_shape="log")


def test_a_probe_point_below_one_is_no_excess():
    host = replace(HOST, length_stretch=((256, 1.5), (1536, 1.3), (3584, 0.95)))
    assert host.length_factor(1.6, [(3584, 3584)]) == 1.0


@pytest.mark.parametrize("fields,match", [
    ({"length_reference_tokens": 0}, "length_reference_tokens"),
    ({"length_stretch": ((256, 1.02), (1536, 0.9))}, "no stretch at the reference length"),
    ({"length_stretch": ((1536, 1.2), (256, 1.3))}, "increasing"),
    ({"length_stretch_beside": ((256, 0.0),)}, "factors must be positive"),
])
def test_length_points_that_give_no_shape_are_refused(fields, match):
    with pytest.raises(ValueError, match=match):
        replace(HOST, **fields)


def test_a_sim_config_takes_the_length_points():
    config = {"name": "t", "model": "llama-3-8b", "hardware": "a100", "policies": {"colocated": {"workers": {"both": 1}}},
              "host": {"num_cores": 2, "load_stretch": [[1, 1.6]], "length_stretch": [list(p) for p in POINTS],
                       "length_reference_tokens": 1024}}
    assert sim_config_from_dict(config).host.spec() == HOST
    with pytest.raises(SimConfigError, match="length_reference_tokens"):
        sim_config_from_dict({**config, "host": {**config["host"], "length_reference_tokens": 0}})


def test_a_short_prompt_on_the_prefill_engine_takes_more_of_its_time_than_a_long_one():
    # r0 streams on the decode engine through r1's prefill on the prefill engine: the load's
    # factor is x1.5 either way, and the length points take it to x1.75 short and x1.25 long.
    roles = {"prefill": 1, "decode": 1}
    plain = HostSpec(num_cores=2, load_stretch=((1, 1.5),))
    by_length = replace(plain, length_stretch=((256, 1.75), (3584, 1.25)), length_reference_tokens=1920)

    def extra_s(host, prompt_tokens):
        work = Workload("w", (RequestSpec("r0", 0.0, 64, 2000), RequestSpec("r1", 0.05, prompt_tokens, 2)))
        result = simulate(work, cluster(roles, host), DisaggregatedPolicy())
        idle = simulate(work, cluster(roles, HostSpec(num_cores=2)), DisaggregatedPolicy())
        return result.prompt_prefilled_s["r1"] - idle.prompt_prefilled_s["r1"]
    for tokens, factor in ((256, 1.75), (3584, 1.25)):
        prefill_s = MODEL.predict(tokens, 0, [])
        assert extra_s(plain, tokens) == pytest.approx(0.5 * prefill_s, rel=0.02)
        assert extra_s(by_length, tokens) == pytest.approx((factor - 1) * prefill_s, rel=0.02)


def test_the_calibrations_error_by_length_scales_every_prefill_when_measured():
    alone = replace(HOST, length_alone=((256, 1.02), (1536, 0.93), (3584, 0.90)))
    assert HOST.alone_factor([(256, 256)]) == 1.0  # not measured
    assert alone.alone_factor([(2048, 3584)]) == pytest.approx(0.90)
    assert alone.alone_factor([(512, 512)]) == pytest.approx(1.02 - 0.09 * 256 / 1280)
    assert alone.alone_factor([(256, 256), (768, 3584)]) == pytest.approx((256 * 1.02 + 768 * 0.90) / 1024)
    assert alone.alone_factor([(64, 64)], beside=True) == pytest.approx(1.02)  # flat beyond; beside falls back
    assert replace(alone, length_alone_beside=((256, 1.3),)).alone_factor([(64, 64)], beside=True) == 1.3
    # In the simulator: a prompt alone on an idle host takes it on its calibrated steps.
    roles = {"prefill": 1, "decode": 1}
    work = Workload("w", (RequestSpec("r0", 0.0, 3584, 2),))

    def prefilled_s(host):
        return simulate(work, cluster(roles, host), DisaggregatedPolicy()).prompt_prefilled_s["r0"]
    plain = HostSpec(num_cores=2, load_stretch=((1, 1.5),))
    assert prefilled_s(replace(plain, length_alone=((256, 1.0), (3584, 0.9)))) == pytest.approx(
        0.9 * prefilled_s(plain), rel=1e-6)

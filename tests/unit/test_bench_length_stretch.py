"""bench.length_stretch: the prefill's stretch beside streams, by the prompt's length."""
from __future__ import annotations

import pytest

from bench import length_stretch as ls
from bench.pooled_measurements import RAW_KEYS
from bench.router_log import first_parts


def test_each_lengths_factor_is_its_median_beside_the_streams_over_its_median_alone():
    engine_s = {256: {0: [0.02, 0.03, 0.04], 2: [0.05, 0.06, 0.9]},  # one stalled probe: the median holds
                3584: {0: [0.7, 0.8, 0.9], 2: [0.7, 0.72, 0.74]}}  # below 1 is kept as measured
    points = ls.length_points(engine_s, 2)
    assert [n for n, _ in points] == [256, 3584]
    assert points[0][1] == pytest.approx(2.0) and points[1][1] == pytest.approx(0.9)
    with pytest.raises(ValueError, match="256-token probe"):
        ls.length_points({256: {0: [0.02]}}, 2)  # nothing beside the streams
    with pytest.raises(ValueError, match="positive"):
        ls.length_points({256: {0: [0.0], 2: [0.1]}}, 2)


def test_the_engine_part_is_the_prefill_engines_on_either_route():
    log = [{"request_id": "a", "route": "colocated", "engines_s": 0.05, "engine_s": {"decode": 0.05}},
           {"request_id": "b", "route": "disaggregated", "engines_s": 0.4, "engine_s": {"prefill": 0.3, "decode": 0.1}},
           {"request_id": "c", "route": "colocated", "engines_s": None, "engine_s": {"decode": None}}]
    assert first_parts(log, "colocated") == {"a": 0.05}
    assert first_parts(log, "disaggregated") == {"b": 0.3}


def test_the_record_keeps_every_probe_and_the_pool_keeps_it_raw():
    probe = ls.LengthStretch(2, "colocated", {256: {0: [0.02], 2: [0.04]}}, {256: {0: [0.03], 2: [0.06]}},
                             ((256, 2.0),))
    assert probe.to_dict() == {"streams": 2, "route": "colocated", "engine_s": {"256": {"0": [0.02], "2": [0.04]}},
                               "ttft_s": {"256": {"0": [0.03], "2": [0.06]}}, "points": [[256, 2.0]]}
    # raw probe detail: the pooled measurements keep the first round's, never a median of lists
    assert {"length_probe", "length_probe_beside"} <= RAW_KEYS


def test_the_probes_prompts_are_their_own():
    # a shorter prompt of one length must not be the prefix of a longer one's (the prefix cache
    # would serve it), and the lengths' salts leave room for the counts, repeats and a second probe
    salts = [ls.LENGTH_SALT + ls.LENGTH_SALT_STEP * i for i in range(len(ls.PROBE_LENGTHS))]
    assert len(set(salts)) == len(salts) and ls.LENGTH_SALT_STEP > 1000 + 999
    with pytest.raises(ValueError, match="lengths and repeats"):
        ls.measure_length_stretch(object(), "colocated", lambda: [], lengths=())

"""The router's log read by the probes and the reports (bench.router_log)."""
from __future__ import annotations

from bench.router_log import colocated_parts, disaggregated_parts, engine_parts_by_id, first_part

LOG = [{"request_id": "a", "route": "disaggregated", "engine_s": {"prefill": 0.2, "decode": 0.03}, "engines_s": 0.23},
       {"request_id": "b", "route": "colocated", "engine_s": {"decode": 0.1}, "engines_s": 0.1},
       {"request_id": "c", "route": "disaggregated", "engine_s": {"prefill": 0.2, "decode": None},
        "engines_s": None},  # the decode engine kept no stats
       {"request_id": "d", "route": "colocated", "engine_s": {"decode": None}, "engines_s": None},
       {"request_id": "e"}]


def test_each_requests_engine_parts_by_its_id():
    assert engine_parts_by_id(LOG) == {"a": {"prefill": 0.2, "decode": 0.03}, "b": {"decode": 0.1},
                                       "c": {"prefill": 0.2, "decode": None}, "d": {"decode": None}, "e": {}}


def test_each_disaggregated_requests_two_parts_where_both_engines_timed_it():
    assert disaggregated_parts(LOG) == {"a": (0.2, 0.03)}


def test_each_colocated_requests_engine_part_where_its_engine_timed_it():
    assert colocated_parts(LOG) == {"b": 0.1}


def test_the_first_part_of_a_ttft_is_the_engines_or_the_prefill_engines():
    assert first_part(LOG[1], "colocated") == 0.1 and first_part(LOG[3], "colocated") is None
    assert first_part(LOG[0], "disaggregated") == 0.2 and first_part(LOG[4], "disaggregated") is None

"""A request sent to a worker whose running slots are all taken waits for enough of them to finish."""
from __future__ import annotations

import pytest

from schedulers.decode_slack import DecodeProgress
from schedulers.decode_slots import slot_wait_s


def decoding(*remaining: int, max_tokens: int = 100) -> list[DecodeProgress]:
    """Requests decoding with `remaining` tokens each still to come."""
    return [DecodeProgress(0.0, max_tokens - r, max_tokens, 0.1) for r in remaining]


def test_a_free_slot_means_no_wait():
    assert slot_wait_s(decoding(5, 10), num_inflight=3, max_num_seqs=4, step_s=0.02) == 0.0


def test_a_full_worker_frees_its_first_slot_when_its_nearest_finish_comes():
    # 4 slots, 4 in flight: the request takes the slot of the one with 5 tokens left.
    assert slot_wait_s(decoding(30, 5, 12, 40), num_inflight=4, max_num_seqs=4, step_s=0.02) == pytest.approx(0.1)


def test_requests_waiting_ahead_take_the_first_slots_that_free():
    # 6 in flight on 4 slots: two wait ahead, so the third finish (12 tokens left) frees this one's.
    assert slot_wait_s(decoding(30, 5, 12, 8), num_inflight=6, max_num_seqs=4, step_s=0.02) == pytest.approx(0.24)


def test_more_slots_owed_than_requests_decoding_waits_at_least_for_the_longest():
    # 4 slots, 9 in flight, 2 decoding: the rest finish after these two; the bound is the longest.
    assert slot_wait_s(decoding(30, 5), num_inflight=9, max_num_seqs=4, step_s=0.02) == pytest.approx(0.6)


def test_without_slots_known_or_anything_decoding_no_wait_is_priced():
    assert slot_wait_s(decoding(5), num_inflight=40, max_num_seqs=0, step_s=0.02) == 0.0
    assert slot_wait_s([], num_inflight=40, max_num_seqs=4, step_s=0.02) == 0.0


def test_a_request_past_its_max_tokens_counts_as_finishing_now():
    progress = [DecodeProgress(0.0, 120, 100, 0.1)] + decoding(7)
    assert slot_wait_s(progress, num_inflight=2, max_num_seqs=2, step_s=0.02) == 0.0

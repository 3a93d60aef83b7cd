"""The rate search behind DistServe-style goodput (bench/max_rate.py)."""
from __future__ import annotations

import pytest

from bench.max_rate import MAX_DOUBLINGS, max_rate_meeting


def step(threshold: float):
    """Attainment 1 up to `threshold` req/s, 0 beyond: the answer is known exactly."""
    return lambda rate: 1.0 if rate <= threshold else 0.0


@pytest.mark.parametrize("threshold, start", [(37.0, 1.0), (37.0, 30.0), (5.0, 64.0), (0.9, 1.0)])
def test_the_search_lands_within_its_precision_below_the_threshold(threshold, start):
    search = max_rate_meeting(step(threshold), start, target=0.9, rel_precision=0.01)
    assert threshold / 1.011 <= search.max_rate <= threshold
    assert search.bounded
    # the answer is a rate that was run and met the target, never an interpolation
    assert (search.max_rate, 1.0) in search.points


def test_a_gradual_attainment_is_cut_at_the_target_share():
    attainment = lambda rate: max(0.0, min(1.0, 1.5 - rate / 20))  # 0.9 at 12 req/s  # noqa: E731
    search = max_rate_meeting(attainment, 2.0, target=0.9, rel_precision=0.005)
    assert 11.9 <= search.max_rate <= 12.0


def test_a_system_that_never_meets_the_target_gets_zero():
    search = max_rate_meeting(lambda rate: 0.5, 8.0, target=0.9)
    assert search.max_rate == 0.0
    assert all(rate >= 8.0 / 1024 for rate, _ in search.points)


def test_a_system_that_always_meets_it_is_reported_unbounded():
    search = max_rate_meeting(lambda rate: 1.0, 1.0)
    assert not search.bounded
    assert search.max_rate == 2.0 ** MAX_DOUBLINGS


def test_noise_cannot_make_it_report_a_rate_that_missed():
    # met at 10, missed at 20, met again at 15 and missed at 17.5 ...: whatever the order,
    # the reported rate is one that met the target
    seen = {}

    def noisy(rate: float) -> float:
        seen[rate] = 0.95 if int(rate * 7) % 3 else 0.5
        return seen[rate]

    search = max_rate_meeting(noisy, 10.0, target=0.9)
    assert search.max_rate == 0.0 or seen[search.max_rate] >= 0.9


@pytest.mark.parametrize("kwargs, message", [
    ({"start": 0.0}, "rate > 0"),
    ({"start": 1.0, "target": 0.0}, "target"),
    ({"start": 1.0, "target": 1.5}, "target"),
    ({"start": 1.0, "rel_precision": 0.0}, "rel_precision"),
])
def test_bad_arguments_are_refused(kwargs, message):
    with pytest.raises(ValueError, match=message):
        max_rate_meeting(step(10.0), **kwargs)


def test_an_attainment_outside_zero_to_one_is_an_error_not_a_result():
    with pytest.raises(ValueError, match="share"):
        max_rate_meeting(lambda rate: 90.0, 1.0)

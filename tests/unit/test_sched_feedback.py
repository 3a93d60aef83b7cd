"""The TTFT feedback factor follows a machine that runs slower or faster than calibrated."""
from __future__ import annotations

import pytest

from schedulers.feedback import TtftFeedback


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


def test_a_host_that_slows_prefills_with_load_gives_a_rising_line():
    fb = TtftFeedback(half_life=50, warmup=3)
    # Measured here: prefills 1.3x slower beside one request, 1.6x beside three, as calibrated alone.
    for _ in range(20):
        for n, slowdown in ((0, 1.0), (1, 1.3), (3, 1.6)):
            fb.observe(0.1, 0.1 * slowdown, num_inflight=n)
    a, b = fb.line()
    assert b > 0
    assert fb.factor == pytest.approx(1.0, abs=0.05)  # an idle host runs as calibrated
    assert fb.factor_at(1) == pytest.approx(1.3, rel=0.05)
    assert fb.factor_at(3) == pytest.approx(1.6, rel=0.05)
    assert fb.factor_at(8) > fb.factor_at(3)  # the line goes on past the loads seen


def test_load_never_makes_prefills_faster_and_one_load_tilts_nothing():
    faster = TtftFeedback(warmup=1)
    for _ in range(10):
        faster.observe(0.1, 0.2, num_inflight=0)
        faster.observe(0.1, 0.1, num_inflight=4)  # noise that would give a falling line
    assert faster.line()[1] == 0.0
    assert faster.factor_at(4) == faster.factor  # flat: the mean of all
    one_load = TtftFeedback(warmup=1)
    for _ in range(10):
        one_load.observe(0.1, 0.15, num_inflight=2)
    assert one_load.line()[1] == pytest.approx(0.0, abs=1e-9)  # no spread in load: no slope, only drift
    assert one_load.factor_at(0) == pytest.approx(1.5) == pytest.approx(one_load.factor_at(6))


def test_a_bad_ridge_is_refused():
    with pytest.raises(ValueError):
        TtftFeedback(ridge=-1)


def _two_engines(fb: TtftFeedback, rounds: int = 60) -> None:
    """One host, loads 0-3: engine `both` runs as calibrated and gives four prefills in five;
    engine `prefill` runs 1.4x slower (as hybrid's prefill engine beside streams, runs 91-93)."""
    for i in range(rounds):
        for n in range(4):
            slowdown = 1.0 + 0.1 * n
            fb.observe(0.1, 0.1 * slowdown, num_inflight=n, role="both")
            if i % 4 == n:  # about one in five observations
                fb.observe(0.1, 0.1 * slowdown * 1.4, num_inflight=n, role="prefill")


def test_each_kind_of_engine_learns_its_own_speed_over_the_hosts_line():
    fb = TtftFeedback(half_life=50)
    _two_engines(fb)
    for n in (0, 2):
        assert fb.factor_at(n, "both") == pytest.approx(1.0 + 0.1 * n, rel=0.05)
        # shrunk toward the host by `role_prior` observations: a little under 1.4
        assert 1.3 < fb.factor_at(n, "prefill") / fb.factor_at(n, "both") <= 1.4
    assert fb.line()[1] > 0  # the load line still rises
    assert set(fb.role_factors()) == {"both", "prefill"}
    assert fb.factor_at(2, "decode") == fb.factor_at(2)  # a role not seen gets the host's


def test_one_factor_for_all_engines_when_asked():
    shared = TtftFeedback(half_life=50, by_role=False)
    _two_engines(shared)
    assert shared.factor_at(1, "prefill") == shared.factor_at(1, "both") == shared.factor_at(1)
    assert shared.factor_at(0) > 1.03  # the slow engine pulls everyone's factor up
    assert shared.role_factors() == {}


def test_a_role_seen_a_few_times_borrows_the_hosts_factor():
    fb = TtftFeedback(warmup=3, role_prior=3.0)
    for _ in range(10):
        fb.observe(0.1, 0.1, role="both")
    fb.observe(0.1, 0.3, role="prefill")  # one prefill 3x slow
    # its own offset takes a quarter of the log (one observation against role_prior's three);
    # the host's line takes about a tenth of it (one observation in eleven)
    host = fb.factor_at(0)
    assert 1.05 < host < 1.15 and fb.factor_at(0, "both") == pytest.approx(host, rel=0.02)
    assert fb.factor_at(0, "prefill") / host == pytest.approx(3.0 ** 0.25, rel=0.05)
    with pytest.raises(ValueError):
        TtftFeedback(role_prior=0)

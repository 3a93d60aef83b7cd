"""The OS's account of a thread over an interval (pd_serve/os_clocks.py)."""
import sys
import time

import pytest

from pd_serve.os_clocks import OsClocks, Reading, between, what_held


def account(ran=0.0, runnable=0.0, others=0.0, steal=0.0, faults=0) -> dict:
    before = Reading(ran_s=1.0, runnable_s=2.0, process_ran_s=10.0, steal_s=5.0, major_faults=7, iowait_s=3.0)
    after = Reading(ran_s=1.0 + ran, runnable_s=2.0 + runnable, process_ran_s=10.0 + ran + others,
                    steal_s=5.0 + steal, major_faults=7 + faults, iowait_s=3.5)
    return between(before, after)


def test_between_takes_differences_and_others_are_the_process_less_the_thread():
    a = account(ran=0.1, runnable=0.3, others=0.2, steal=0.05)
    assert a == pytest.approx({"thread_ran_s": 0.1, "thread_runnable_s": 0.3, "others_ran_s": 0.2,
                               "steal_s": 0.05, "major_faults": 0, "iowait_s": 0.5})
    assert between(None, Reading(0, 0, 0, 0)) is None


@pytest.mark.parametrize("kw, verdict", [
    ({"runnable": 0.6}, "no cpu"),
    ({"steal": 0.6}, "steal"),
    ({"ran": 0.6}, "ran"),
    ({"others": 0.6}, "other thread"),
    ({"ran": 0.3, "runnable": 0.4, "steal": 0.6}, "steal"),
    ({"ran": 0.45, "runnable": 0.55}, "no cpu"),
    ({"ran": 0.55, "runnable": 0.45}, "ran"),
    ({"ran": 0.3, "runnable": 0.35}, "no cpu"),  # runnable the longest (asleep 0.35)
    ({"ran": 0.3, "runnable": 0.3}, "asleep"),  # asleep 0.4 the longest, nothing else ran
    ({"others": 0.25}, "other thread"),  # a quarter of the time asleep: a busy host's share
    ({"ran": 0.1, "runnable": 0.1, "others": 0.1}, "asleep"),
    ({"ran": 0.1, "runnable": 0.1, "others": 0.1, "faults": 3}, "page faults"),
])
def test_what_held_names_where_the_thread_spent_the_stall(kw, verdict):
    assert what_held(1.0, account(**kw)) == verdict
    assert what_held(1.0, None) is None


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="/proc is Linux's")
def test_a_busy_thread_runs_and_a_sleeping_one_does_not():
    clocks = OsClocks()
    assert clocks.available
    r0 = clocks.read()
    t_end = time.process_time() + 0.2
    while time.process_time() < t_end:
        pass
    r1 = clocks.read()
    time.sleep(0.2)
    r2 = clocks.read()
    clocks.close()
    assert between(r0, r1)["thread_ran_s"] >= 0.15
    assert between(r1, r2)["thread_ran_s"] < 0.05
    assert r2.major_faults >= r0.major_faults >= 0 and r2.iowait_s >= r0.iowait_s
    assert clocks.read() is None  # closed


def test_the_sweeps_stall_line_counts_the_verdicts():
    from bench.compare import loop_line
    report = {"both-0": {"num_stalls": 3, "max_stall_s": 3.389,
                         "stalls": [{"os_verdict": "no cpu"}, {"os_verdict": "no cpu"}, {"os_verdict": "asleep"}]},
              "router": {"num_stalls": 0, "max_stall_s": 0.0, "stalls": []},
              "old": {"num_stalls": 1, "max_stall_s": 0.2, "stalls": [{"stall_s": 0.2}]}}  # before os_clocks
    assert loop_line(report) == ("both-0 3 (longest 3389 ms, no cpu 2, asleep 1); router 0 (longest 0 ms); "
                                 "old 1 (longest 200 ms)")

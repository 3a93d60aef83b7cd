"""The event-loop watch: a held loop is a stall, with the stack that held it.

Each watch runs in a fresh interpreter (`python tests/unit/test_loop_stalls.py SCENARIO`): the
watch's faulthandler dump walks every thread's stack without the GIL, and in a pytest process
that has run the integration tests, Ray's and gRPC's threads are still there, changing theirs;
one such dump crashed the whole suite (a segmentation fault, 2026-12-01).
"""
import asyncio
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Callable

import pytest

from pd_serve.loop_stalls import DUMP_AFTER_S, LoopStalls

ROOT = Path(__file__).resolve().parents[2]


def watched_here(*holds: Callable[[], None], **options) -> dict:
    """A watch's summary after the loop ran each of `holds` in turn, turning 0.1 s around each."""
    async def main() -> LoopStalls:
        watch = await LoopStalls(threshold_s=0.1, interval_s=0.01, **options).start()
        await watch.start()  # idempotent
        await asyncio.sleep(0.1)
        for hold in holds:
            hold()
            await asyncio.sleep(0.1)
        watch.stop()
        return watch

    return asyncio.run(main()).summary()


def hold_the_loop(seconds: float) -> None:
    time.sleep(seconds)  # a synchronous call on the loop: nothing else of the process runs


def hold_the_gil(seconds: float) -> None:
    """One C call that keeps the GIL all along (builtin sum over a range), sized to last about
    `seconds` here: no other thread of the process runs meanwhile."""
    per_million = min(_timed(lambda: sum(range(10**6))) for _ in range(3))  # one slow try would shorten the hold
    sum(range(int(10**6 * seconds / per_million)))


def _timed(call: Callable[[], object]) -> float:
    t0 = time.perf_counter()
    call()
    return time.perf_counter() - t0


def hold_the_gil_elsewhere(seconds: float) -> None:
    """Another thread of the process takes the GIL in one C call while the loop waits for it."""
    import threading
    holder = threading.Thread(target=hold_the_gil, args=(seconds,))
    holder.start()
    holder.join()


def hold_before_the_first_beat(seconds: float) -> None:
    hold_the_gil(seconds)


def held_before_the_first_beat() -> dict:
    """The loop held (the GIL too) right after the watch started, before its heartbeat ever ran,
    as a worker actor imports vLLM after starting its watch; later an ordinary stall."""
    async def main() -> LoopStalls:
        watch = await LoopStalls(threshold_s=0.1, interval_s=0.01).start()
        hold_before_the_first_beat(0.5)
        await asyncio.sleep(0.2)
        hold_the_loop(0.4)
        await asyncio.sleep(0.1)
        watch.stop()
        return watch

    return asyncio.run(main()).summary()


SCENARIOS: dict[str, Callable[[], dict]] = {
    "held loop": lambda: watched_here(lambda: hold_the_loop(0.4), dump_after_s=DUMP_AFTER_S),
    "held process": lambda: watched_here(lambda: hold_the_gil(0.6), dump_after_s=DUMP_AFTER_S),
    "held loop, no dump": lambda: watched_here(lambda: hold_the_loop(0.4)),
    "held elsewhere": lambda: watched_here(lambda: hold_the_gil_elsewhere(0.6)),
    "turning": lambda: watched_here(*[lambda: None] * 2),
    "held before the first beat": held_before_the_first_beat,
    "short then long": lambda: watched_here(lambda: hold_the_loop(0.15), lambda: hold_the_loop(0.5),
                                            dump_after_s=0.3),
}


def watched(scenario: str) -> dict:
    """SCENARIOS[scenario]'s summary, from a fresh interpreter."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    done = subprocess.run([sys.executable, __file__, scenario], capture_output=True, text=True, env=env,
                          timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_a_held_loop_is_one_stall_with_the_holders_stack():
    summary = watched("held loop")
    assert summary["num_stalls"] == 1
    stall = summary["stalls"][0]
    assert 0.35 <= stall["stall_s"] <= 1.0
    assert stall["t_start"] <= time.time() - stall["stall_s"]
    assert not stall["process_held"]  # time.sleep releases the GIL: the watchdog ran and sampled
    frames = [line for s in stall["stacks"] for line in s["stack"]]
    assert any(line.endswith(" hold_the_loop") for line in frames)
    assert sum(s["count"] for s in stall["stacks"]) >= 10
    # longer than dump_after_s: faulthandler's C thread wrote every thread's stack, this one's too
    assert "hold_the_loop" in stall["all_threads"]
    # in time.sleep: neither ran nor waited for a CPU ("page faults" when the dump read code back)
    assert stall["os_verdict"] in ("asleep", "page faults")
    assert stall["os"]["thread_ran_s"] < 0.5 * stall["stall_s"]


def test_a_held_process_is_marked_held_and_dumped_with_the_holder():
    stalls = watched("held process")["stalls"]
    shown = json.dumps([{k: v for k, v in s.items() if k != "all_threads"} for s in stalls])  # if it fails
    assert len(stalls) == 1 and stalls[0]["stall_s"] >= 0.3, shown
    assert stalls[0]["process_held"], shown  # the watchdog thread could not run either
    assert "hold_the_gil" in stalls[0]["all_threads"], shown  # faulthandler's C thread needs no GIL
    # the loop thread itself held the GIL, computing (on a busy host, partly waiting for a CPU;
    # on a busy VM, partly taken by the hypervisor)
    os_account = stalls[0]["os"]
    assert stalls[0]["os_verdict"] in ("ran", "no cpu", "steal"), shown
    assert (os_account["thread_ran_s"] + os_account["thread_runnable_s"] + os_account["steal_s"]
            >= 0.8 * stalls[0]["stall_s"]), shown


def test_a_gil_held_by_another_thread_is_told_apart_by_the_os_account():
    (stall,) = watched("held elsewhere")["stalls"]
    assert stall["process_held"] and stall["stall_s"] >= 0.3
    assert stall["os_verdict"] == "other thread"
    assert stall["os"]["others_ran_s"] >= 0.25 * stall["stall_s"] > stall["os"]["thread_ran_s"]


def test_without_dump_after_s_no_dump_is_armed_and_the_stall_still_has_its_stack():
    (stall,) = watched("held loop, no dump")["stalls"]
    assert stall["all_threads"] is None
    assert any(line.endswith(" hold_the_loop") for s in stall["stacks"] for line in s["stack"])


def test_a_turning_loop_has_no_stall():
    summary = watched("turning")
    assert summary["num_stalls"] == 0 and summary["stalls"] == []
    assert summary["num_beats"] >= 5


def test_a_short_stall_has_no_dump_and_the_next_long_one_only_its_own():
    short, long = watched("short then long")["stalls"]
    assert short["all_threads"] is None  # shorter than the dump's timeout
    assert long["all_threads"].count("hold_the_loop") == 1


def test_a_hold_before_the_first_beat_is_not_pinned_on_the_next_stall():
    # The heartbeat never measured the first hold (it had not beaten yet); the watchdog saw it.
    # What it saw then (the stack, its own late wake) belonged to no stall, and must not be
    # reported with the next one: run 48's one held stall while serving came with the stacks
    # of its worker's start-up imports of torch, 16 s after them.
    (stall,) = watched("held before the first beat")["stalls"]
    frames = [line for s in stall["stacks"] for line in s["stack"]]
    assert any(line.endswith(" hold_the_loop") for line in frames)
    assert not any("hold_before_the_first_beat" in line for line in frames)
    assert not stall["process_held"] and stall["watchdog_late_s"] < 0.1  # time.sleep released the GIL


def test_the_period_must_be_shorter_than_the_threshold():
    with pytest.raises(ValueError):
        LoopStalls(threshold_s=0.01, interval_s=0.01)
    with pytest.raises(ValueError):
        LoopStalls(dump_after_s=0.01)


if __name__ == "__main__":
    print(json.dumps(SCENARIOS[sys.argv[1]]()))

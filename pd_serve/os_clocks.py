"""What the OS did with a thread over an interval: how long it ran, how long it sat runnable
waiting for a CPU, how long the rest of its process ran, how many major page faults its process
took (pages read back from disk), and the machine's steal and I/O wait.

The event-loop watch (loop_stalls.py) takes one reading per heartbeat, so a stall comes with the
OS's account of it. On this CPU host the worker actors' loops have been held 0.5-4.3 s while
serving with the whole process held and no Python running in any thread (docs/MEASUREMENTS.md, "Late
starts"); these counters tell the remaining causes apart:
- the loop thread runnable most of the time: the OS gave it no CPU (the engines, niced
  processes, spinning pollers);
- steal most of the time: the hypervisor ran something else on the machine's vCPUs;
- another thread of the process running: it held the GIL in C code;
- none of these: the loop thread slept, on the GIL or a lock held by a thread that itself
  waited (a blocking call made without releasing the GIL, or a page read back from disk: this
  VM's kernel runs DAMON with a `pageout` scheme that evicts memory left unaccessed for about a
  minute, so a library's code path idle that long is read back from disk when next run), or
  in its own poll.
Measured (2026-12-02, nine runs of adaptive at 8 req/s): the 0.1-0.3 s stalls while serving
were 'no cpu'; the held ones of 0.94-7.9 s 'asleep', with no fault, steal or I/O wait, and
threads of the process sampled from outside sat in mmap / munmap / mprotect / brk in `D` state:
the address-space lock, held by something not found (docs/MEASUREMENTS.md, "What holds a worker's process").
Linux only (`/proc`); elsewhere every reading is None.
"""
from __future__ import annotations

import os
import time
from dataclasses import dataclass
from typing import Any, Optional

TICK_S = 1.0 / os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 0.01
IOWAIT_FIELD, STEAL_FIELD = 5, 8  # in /proc/stat's "cpu" line: user nice system idle iowait irq softirq steal
MAJFLT_FIELD = 9  # in /proc/<pid>/stat after the command's closing parenthesis (field 12 of the whole)


@dataclass(frozen=True)
class Reading:
    ran_s: float          # this thread's CPU time
    runnable_s: float     # this thread's time runnable but not running (schedstat run_delay)
    process_ran_s: float  # every thread of the process, CPU time
    steal_s: float        # all CPUs' steal time, summed
    major_faults: int = 0  # the process's major page faults
    iowait_s: float = 0.0  # all CPUs' I/O wait, summed


class OsClocks:
    """Readings of the thread that made it (open it on the thread to watch)."""

    def __init__(self) -> None:
        try:
            self._sched = os.open("/proc/thread-self/schedstat", os.O_RDONLY)
            self._stat = os.open("/proc/stat", os.O_RDONLY)
            self._proc = os.open("/proc/self/stat", os.O_RDONLY)
        except OSError:
            self._sched = self._stat = self._proc = None

    @property
    def available(self) -> bool:
        return self._sched is not None

    def read(self) -> Optional[Reading]:
        """Now's counters (pread on the open files: a few tens of microseconds), or None."""
        if self._sched is None:
            return None
        ran_ns, wait_ns = os.pread(self._sched, 128, 0).split()[:2]
        cpu_line = os.pread(self._stat, 256, 0).split(b"\n", 1)[0].split()
        proc = os.pread(self._proc, 1024, 0)
        return Reading(ran_s=int(ran_ns) / 1e9, runnable_s=int(wait_ns) / 1e9,
                       process_ran_s=time.process_time(),
                       steal_s=int(cpu_line[STEAL_FIELD]) * TICK_S if len(cpu_line) > STEAL_FIELD else 0.0,
                       major_faults=int(proc[proc.rindex(b")") + 1:].split()[MAJFLT_FIELD]),
                       iowait_s=int(cpu_line[IOWAIT_FIELD]) * TICK_S)

    def close(self) -> None:
        for fd in (self._sched, self._stat, self._proc):
            if fd is not None:
                os.close(fd)
        self._sched = self._stat = self._proc = None


def between(before: Optional[Reading], after: Optional[Reading]) -> Optional[dict[str, float]]:
    """What happened between two readings of one thread, in seconds (JSON-able), or None."""
    if before is None or after is None:
        return None
    return {"thread_ran_s": after.ran_s - before.ran_s,
            "thread_runnable_s": after.runnable_s - before.runnable_s,
            "others_ran_s": max(0.0, (after.process_ran_s - before.process_ran_s) - (after.ran_s - before.ran_s)),
            "steal_s": after.steal_s - before.steal_s,
            "major_faults": after.major_faults - before.major_faults,
            "iowait_s": after.iowait_s - before.iowait_s}


def what_held(interval_s: float, account: Optional[dict[str, float]]) -> Optional[str]:
    """The OS's account of an interval the thread should have run through, in a word: 'steal'
    (the hypervisor took half of it or more), else by where the thread spent most of it:
    'no cpu' (runnable, waiting for a CPU), 'ran', or asleep: 'other thread' when the rest of
    its process ran a quarter of that time or more (on a busy host that thread waits for a CPU
    too, so it cannot be asked to fill the time), 'page faults' when the process read pages
    back from disk meanwhile, else 'asleep'."""
    if account is None:
        return None
    if account["steal_s"] >= interval_s / 2:
        return "steal"
    ran, runnable = account["thread_ran_s"], account["thread_runnable_s"]
    asleep = max(0.0, interval_s - ran - runnable)
    if runnable >= max(ran, asleep):
        return "no cpu"
    if ran >= asleep:
        return "ran"
    if account["others_ran_s"] >= asleep / 4:
        return "other thread"
    return "page faults" if account.get("major_faults", 0) > 0 else "asleep"

"""A process's asyncio event loop, watched: when it stops turning, for how long, and what held it.

Everything a worker actor or the router does for a request runs on one event loop: a call
handed over by Ray starts there, every token is streamed from there. When that loop is held (a
synchronous call, a long computation, a thread holding the GIL), nothing of that process moves.
On this CPU host, calls have begun 0.4-0.9 s after the router made them (docs/MEASUREMENTS.md, "Late starts"),
with the engine idle meanwhile; vCPU preemption, garbage collection and paging were ruled out.

Two parts:
- a heartbeat coroutine on the loop wakes every `interval_s` and measures how late it woke;
  a wake at least `threshold_s` late is a stall, kept with when it began and how long it lasted;
- a watchdog thread checks the heartbeat every `interval_s`. While the heartbeat is over
  `threshold_s` old it samples the loop thread's Python stack (`sys._current_frames()`), so a
  stall comes with what the loop was running. When the watchdog itself wakes that late, the
  whole process was held (the GIL, or the OS did not run it), and no stack can say by what: the
  stall is marked `process_held`;
- each heartbeat also reads the OS's counters for the loop thread (os_clocks.py), so a stall
  comes with how long that thread ran and waited runnable for a CPU, how long the rest of the
  process ran, its major faults, and the machine's steal and I/O wait meanwhile, and a word for
  it (`os_verdict`);
- for the held case, given `dump_after_s`, the heartbeat keeps `faulthandler.dump_traceback_later`
  armed: CPython's C watchdog needs no GIL, so when the loop has not beaten for `dump_after_s`
  it writes every thread's Python stack to a file, the one holding the GIL among them. A stall
  at least that long comes with that dump (`all_threads`). Off by default, in the product too
  (`diagnostics.stack_dump_after_s` in a deployment's YAML turns it on): walking the other
  threads' stacks without the GIL is unsafe while they run, and one such dump crashed a pytest
  process holding Ray's and gRPC's threads (2026-12-01). The dumps it gave had answered their
  question (below).

Measured (2026-12-01, seven sweeps of the rates experiment at 2-8 req/s, 5,040 requests): while
serving, six stalls of 0.6-1.23 s, every one of the second kind (the whole process held), five
in a worker actor of the adaptive deployment. Their dumps show no thread running Python code:
the loop idle in its poll, every other thread waiting. Whatever held the process was not
Python. Start-up has stalls of its own (imports, the NIXL link probe), counted as well. With
the OS's account (2026-12-02): the held ones had the loop thread asleep, neither running nor
waiting for a CPU, while threads of the process waited in the kernel for its address-space lock.
"""
from __future__ import annotations

import asyncio
import collections
import faulthandler
import os
import sys
import tempfile
import threading
import time
from typing import Any

from pd_serve.os_clocks import OsClocks, between, what_held

STALL_S = 0.1        # a heartbeat at least this late is a stall
BEAT_S = 0.01        # heartbeat and watchdog period
KEEP_STALLS = 64
STACK_FRAMES = 12    # innermost frames kept per sample
MAX_SAMPLES = 50     # stack samples kept per stall
DUMP_AFTER_S = 0.25  # a useful dump_after_s: every thread's stack when the loop has not beaten this long
REARM_S = 0.05       # how often the heartbeat re-arms that dump (each arming starts a C thread)
DUMP_CHARS = 12000   # at most this much of one dump is kept


def _stack_of(thread_id: int, frames: int) -> list[str]:
    """The innermost `frames` of a running thread's Python stack, outermost first.

    Walks only those frames and reads no source: `traceback.extract_stack` walked the whole stack
    and read each frame's line from its file, and that I/O let the thread run on, changing the
    very frames being walked. A worker actor died of it at start-up, in `PyFrame_GetBack`
    (SIGSEGV, CPython 3.11.7, 2026-12-02), while its loop was held by vLLM's imports. This walk
    is a few microseconds with the GIL held."""
    frame = sys._current_frames().get(thread_id)
    out = []
    while frame is not None and len(out) < frames:
        out.append(f"{frame.f_code.co_filename}:{frame.f_lineno} {frame.f_code.co_name}")
        frame = frame.f_back
    return out[::-1]


class LoopStalls:
    """Start with `await LoopStalls().start()` from inside the loop to watch; `summary()` any time."""

    def __init__(self, threshold_s: float = STALL_S, interval_s: float = BEAT_S,
                 keep: int = KEEP_STALLS, dump_after_s: float | None = None) -> None:
        if not 0 < interval_s < threshold_s:
            raise ValueError(f"need 0 < interval_s < threshold_s, got {interval_s}, {threshold_s}")
        if dump_after_s is not None and dump_after_s <= REARM_S:
            raise ValueError(f"dump_after_s must exceed the re-arm period {REARM_S} s, got {dump_after_s}")
        self.threshold_s = threshold_s
        self.interval_s = interval_s
        self.dump_after_s = dump_after_s
        self._dump = None      # the file faulthandler writes into (one per process: it is global)
        self._dump_read = 0    # how far it has been read
        self.stalls: collections.deque = collections.deque(maxlen=keep)
        self.num_stalls = 0
        self.max_s = 0.0
        self.num_beats = 0
        self._last_beat = time.monotonic()
        self._loop_thread: int | None = None
        self._clocks: OsClocks | None = None      # opened on the loop thread by start()
        self._samples: list[dict[str, Any]] = []  # taken by the watchdog during the current stall
        self._held_s = 0.0                         # how late the watchdog itself woke meanwhile
        self._lock = threading.Lock()
        self._task: asyncio.Task | None = None
        self._stop = threading.Event()

    @property
    def running(self) -> bool:
        return self._task is not None and not self._task.done()

    async def start(self) -> LoopStalls:
        """Watch the running loop (idempotent)."""
        if self.running:
            return self
        self._loop_thread = threading.get_ident()
        if self._clocks is None:
            self._clocks = OsClocks()
        self._last_beat = time.monotonic()
        self._stop.clear()
        if self.dump_after_s is not None and self._dump is None:
            self._dump = tempfile.TemporaryFile(mode="w+", prefix=f"pd-serve-stacks-{os.getpid()}-")
        self._task = asyncio.get_running_loop().create_task(self._beat())
        threading.Thread(target=self._watch, name="loop-stalls", daemon=True).start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._task is not None:
            self._task.cancel()
        if self._dump is not None:
            faulthandler.cancel_dump_traceback_later()
        if self._clocks is not None:
            self._clocks.close()
            self._clocks = None

    async def _beat(self) -> None:
        armed = 0.0
        while True:
            before = time.monotonic()
            with self._lock:
                self._last_beat = before
                # What the watchdog saw since the last stall was recorded belongs to none: a hold
                # before the first beat (a worker imports vLLM right after starting its watch),
                # which no beat measures. Kept, it came with the next stall, however much later.
                self._samples, self._held_s = [], 0.0
            if self._dump is not None and before - armed >= REARM_S:
                faulthandler.dump_traceback_later(self.dump_after_s, file=self._dump)
                armed = before
            clocks = self._clocks
            reading = clocks.read() if clocks is not None else None
            await asyncio.sleep(self.interval_s)
            now = time.monotonic()
            self.num_beats += 1
            late_s = now - before - self.interval_s
            if late_s >= self.threshold_s:
                self._record(late_s, now, between(reading, clocks.read() if clocks is not None else None))

    def _record(self, late_s: float, now: float, account: dict[str, float] | None = None) -> None:
        with self._lock:
            samples, self._samples = self._samples, []
            held_s, self._held_s = self._held_s, 0.0
        self.num_stalls += 1
        self.max_s = max(self.max_s, late_s)
        self.stalls.append({
            "t_start": time.time() - (time.monotonic() - now) - late_s,  # wall clock
            "stall_s": late_s,
            # Held: the watchdog woke late, or never sampled a stall it had time to see (the
            # loop can wake first, before the watchdog learns how late it is itself).
            "process_held": held_s >= self.threshold_s or (
                not samples and late_s >= self.threshold_s + 2 * self.interval_s),
            "watchdog_late_s": held_s,
            # the OS's account of the loop thread over the stall (os_clocks.py), and in a word
            "os": account,
            "os_verdict": what_held(late_s + self.interval_s, account),
            "stacks": _distinct_stacks(samples),
            "all_threads": self._read_dump()})

    def _read_dump(self) -> str | None:
        """What faulthandler wrote since the last stall (None: nothing, or no dump armed)."""
        if self._dump is None:
            return None
        self._dump.seek(0, os.SEEK_END)
        end = self._dump.tell()
        if end <= self._dump_read:
            return None
        self._dump.seek(self._dump_read)
        text = self._dump.read(DUMP_CHARS)
        self._dump_read = end
        return text

    def _watch(self) -> None:
        expected = time.monotonic() + self.interval_s
        while not self._stop.wait(self.interval_s):
            now = time.monotonic()
            watchdog_late = now - expected
            expected = now + self.interval_s
            with self._lock:
                age = now - self._last_beat
                if watchdog_late > self._held_s and age >= self.threshold_s:
                    self._held_s = watchdog_late
                if age < self.threshold_s:
                    continue
                if len(self._samples) < MAX_SAMPLES:
                    self._samples.append({"age_s": age, "stack": _stack_of(self._loop_thread, STACK_FRAMES)})

    def summary(self) -> dict[str, Any]:
        """JSON-able: how many stalls, the longest, and the last ones with what held the loop."""
        return {"threshold_s": self.threshold_s, "num_beats": self.num_beats,
                "num_stalls": self.num_stalls, "max_stall_s": self.max_s, "stalls": list(self.stalls)}


def _distinct_stacks(samples: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The watchdog's samples of one stall, the same stack counted once: [{stack, count, first_age_s}]."""
    out: dict[tuple, dict[str, Any]] = {}
    for s in samples:
        key = tuple(s["stack"])
        if key in out:
            out[key]["count"] += 1
        else:
            out[key] = {"stack": s["stack"], "count": 1, "first_age_s": s["age_s"]}
    return list(out.values())

"""A lone stream's decode steps with the other engines idle, by whether they stepped within the
last second: what the simulator's spin host form (`bench.simulator.host`) takes.

After each step, vLLM's model process and the EngineCore waiting on it poll their shared-memory
queues on `sched_yield` for `SPIN_WINDOW_S` (`shm_broadcast.SpinCondition`) before they sleep.
On a host whose engines share the cores with each other and the request path, an engine that
just stepped keeps two more processes runnable. Live, on runs 50-53's hybrid deployment, a
one-stream decode gap took 1.5-2 ms longer with the prefill-only engine active in the last second
than idle for longer (`bench.token_gaps`); the lone-stream probe (`bench.host_cpu`), whose
requests all went to the other engine, saw only the second case.

Measured side by side (hybrid, eight interleaved pairs of three lone colocated streams, each set
after 1.5 s of quiet, the prefill-only engine either stepped every 0.4 s or left idle): the decode
gaps' median excess over the calibration was 3.44 ms stepped against 2.19 ms idle, and the
stepped set was the slower in 7 of the 8 pairs (by -0.4 to +3.3 ms).

So the probe runs two sets of lone streams (one request on the whole deployment at a time, back
to back), each after `QUIET_S` with nothing running:
- quiet: the other engines left idle (except one the requests themselves use: a disaggregated
  request's prefill engine);
- stepped: every engine runs a one-token step (`EngineWorker.step_once`) every `STEP_EVERY_S`,
  so each other engine stays inside its window.
Their gaps are then classed by the engines' own activity (`lone_excess_by_neighbour`), the way
the simulator classes a step, not by which set they came from.
"""
from __future__ import annotations

import bisect
import statistics
import threading
import time
from typing import Any, Callable, Sequence

from bench.host_cpu import _check_served
from bench.simulator.host import SPIN_WINDOW_S
from bench.token_gaps import busy_intervals

QUIET_S = SPIN_WINDOW_S + 0.5  # each set of lone streams starts this long after the last work ended
STEP_EVERY_S = 0.4  # the stepped lone streams: every engine runs a one-token step this often

Interval = tuple[str, float, float]  # (worker, start, end) wall-clock seconds


def activity(records: Sequence[Any], steps: Sequence[Interval] = ()) -> dict[str, list[tuple[float, float]]]:
    """Per worker, the (start, end) spans it computed: `bench.token_gaps.busy_intervals` (each
    request's prefill, then its decode) and `steps` (the one-token steps)."""
    spans = {w: [(s, e) for s, e, _ in v] for w, v in busy_intervals(records).items()}
    for worker, start, end in steps:
        spans.setdefault(worker, []).append((start, end))
    return spans


def lone_excess_by_neighbour(records: Sequence[Any], steps: Sequence[Interval],
                             predict_step_s: Callable[[list[int]], float],
                             window_s: float = SPIN_WINDOW_S,
                             others: Sequence[Any] = ()) -> dict[str, dict[str, float]]:
    """The median excess over `predict_step_s([context])` of `records`' one-stream gaps (no
    other request streaming from the same worker) during which no other worker computed, as
    "quiet" (every other worker's last activity ended more than `window_s` before the gap
    began) and "spin" (one ended within it). Per class: median_s, count; a class with no gap is
    left out. `records`: `bench.metrics.RequestRecord`s; `steps`: (worker, start, end) of the
    one-token steps; `others`: more records whose activity counts, their gaps not classed."""
    spans = activity([*records, *others], steps)
    ends = {w: sorted(e for _, e in s) for w, s in spans.items()}
    streams = [(r.decode_worker, r.token_times, r.input_tokens) for r in records
               if r.ok and r.decode_worker and len(r.token_times) > 1]
    out: dict[str, list[float]] = {"quiet": [], "spin": []}
    for worker, times, prompt in streams:
        neighbours = [w for w in spans if w != worker]
        for i in range(1, len(times)):
            a, b = times[i - 1], times[i]
            if any(w == worker and ts is not times and ts[0] < b <= ts[-1] for w, ts, _ in streams):
                continue  # not one stream
            if (any(s < b and e > a for w in neighbours for s, e in spans[w])
                    or any(s < b and e > a for _, s, e in steps)):
                continue  # another worker computed meanwhile, or this one ran a one-token step
            last = max((ends[w][j - 1] for w in neighbours if (j := bisect.bisect_right(ends[w], a))),
                       default=None)
            kind = "spin" if last is not None and a - last <= window_s else "quiet"
            out[kind].append(b - a - predict_step_s([prompt + i]))
    return {k: {"median_s": statistics.median(v), "count": len(v)} for k, v in out.items() if v}


class EngineStepper:
    """While open, a thread runs a one-token step on every engine of `dep` in turn, each every
    `every_s`; `steps` holds their (worker, start, end)."""

    def __init__(self, dep: Any, every_s: float = STEP_EVERY_S) -> None:
        self.dep, self.every_s = dep, every_s
        self.steps: list[Interval] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="engine-stepper", daemon=True)
        self.error: BaseException | None = None

    def _run(self) -> None:
        import ray

        salt = 0
        try:
            while not self._stop.is_set():
                t0 = time.perf_counter()
                for wid, handle in self.dep.workers.items():
                    start, end = ray.get(handle.step_once.remote(salt))
                    self.steps.append((wid, start, end))
                    salt += 1
                self._stop.wait(max(0.0, self.every_s - (time.perf_counter() - t0)))
        except BaseException as err:  # reported by __exit__: a probe must not pass on half its steps
            self.error = err

    def __enter__(self) -> "EngineStepper":
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._stop.set()
        self._thread.join()
        if self.error is not None and exc[0] is None:
            raise RuntimeError(f"the engine stepper failed: {self.error!r}") from self.error


def lone_streams(dep: Any, count: int, prompt_tokens: int, output_tokens: int, salt: int) -> list[Any]:
    """`count` lone requests, one after another; raises if any failed."""
    from bench.run import run_workload
    from bench.workloads import fixed

    records = run_workload(dep.stream, fixed(count, prompt_tokens, output_tokens, concurrency=1), dep.vocab_size,
                           progress=False, salt=salt)
    _check_served(records, "lone-stream probe")
    return records


def measure_lone_by_neighbour(dep: Any, count: int, prompt_tokens: int, output_tokens: int, salt: int,
                              stepped_first: bool = False) -> tuple[list[Any], list[Interval]]:
    """A quiet set and a stepped set of `count` lone streams (module docstring), each after
    QUIET_S: their records and the one-token steps run beside them, for
    `lone_excess_by_neighbour`."""
    records: list[Any] = []
    steps: list[Interval] = []
    for stepped in ((True, False) if stepped_first else (False, True)):
        time.sleep(QUIET_S)
        if not stepped:
            records += lone_streams(dep, count, prompt_tokens, output_tokens, salt)
            continue
        with EngineStepper(dep) as stepper:
            time.sleep(STEP_EVERY_S)  # every engine has stepped before the first request
            records += lone_streams(dep, count, prompt_tokens, output_tokens, salt - 1)
        steps += stepper.steps
    return records, steps

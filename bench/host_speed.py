"""How fast the host ran while a benchmark ran: one fixed CPU kernel, timed once a second.

    python -m bench.host_speed --out FILE [--period 1.0]      (bench.compare starts it itself)

On this shared 2-core host the same deployment served the same workload with a mean TPOT of
56, 32 and 19 ms in three rounds of one run (run 58), and its probes taken before each round
put the path's CPU per token at 4.0, 2.9 and 2.1 ms. The simulator is given what a deployment
measured minutes before its run; this probe says how fast the host was *during* the run against
*during* those measurements, so that the simulator can scale what it was given
(`bench.sim_fidelity --speed probe`).

The kernel is a pure-Python loop (the engines' schedulers and the request path are Python) and
a small single-threaded matrix product (the model's steps), about 4 ms in all, once a second in
a process of its own, so that it takes well under 1% of one core and never holds the
benchmark's GIL. It is timed by its own thread's CPU time: waiting for a core is the engines'
load, which the simulator models; what the probe reads is how fast a core runs once it has it
(the SMT sibling's load, caches, clock), which the simulator cannot see.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

PERIOD_S = 1.0
PY_ITERATIONS = 20_000
MATMUL_SIZE = 256
MATMUL_REPEATS = 2
MIN_SAMPLES = 5  # fewer in a window and its median says little


@dataclass(frozen=True)
class Sample:
    t: float  # wall clock (time.time()), the clock the live records use
    py_ms: float
    mm_ms: float

    @property
    def kernel_ms(self) -> float:
        return self.py_ms + self.mm_ms


def _python_part() -> int:
    s = 0
    for i in range(PY_ITERATIONS):
        s += i * i
    return s


def time_kernel(a, b) -> tuple[float, float]:
    """(Python loop, matrix products) in ms of this thread's CPU time."""
    t0 = time.thread_time()
    _python_part()
    t1 = time.thread_time()
    for _ in range(MATMUL_REPEATS):
        a @ b
    t2 = time.thread_time()
    return (t1 - t0) * 1e3, (t2 - t1) * 1e3


def probe_loop(out: Path, period_s: float, parent: int | None) -> None:
    """Append one JSON line per sample to `out` until killed or the parent process is gone."""
    import numpy as np

    rng = np.random.default_rng(0)
    a = rng.standard_normal((MATMUL_SIZE, MATMUL_SIZE), dtype=np.float32)
    b = rng.standard_normal((MATMUL_SIZE, MATMUL_SIZE), dtype=np.float32)
    with out.open("a") as f:
        while parent is None or os.getppid() == parent:
            py_ms, mm_ms = time_kernel(a, b)
            f.write(json.dumps({"t": round(time.time(), 3), "py_ms": round(py_ms, 4), "mm_ms": round(mm_ms, 4)}) + "\n")
            f.flush()
            time.sleep(period_s)


class HostSpeedProbe:
    """The probe in a child process for the length of a `with` block, appending to `path`."""

    def __init__(self, path: Path, period_s: float = PERIOD_S) -> None:
        self.path = Path(path)
        self.period_s = period_s
        self._proc: subprocess.Popen | None = None

    def __enter__(self) -> "HostSpeedProbe":
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.path.unlink(missing_ok=True)  # a previous run's samples in the same --out
        # One BLAS thread: the kernel must measure one core, not how many are free.
        env = {**os.environ, "OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
        self._proc = subprocess.Popen(
            [sys.executable, "-m", "bench.host_speed", "--out", str(self.path), "--period", str(self.period_s),
             "--parent", str(os.getpid())], env=env, stdin=subprocess.DEVNULL)
        return self

    def __exit__(self, *exc: object) -> None:
        if self._proc is not None:
            self._proc.terminate()
            try:
                self._proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait()
            self._proc = None


def read_samples(path: Path) -> list[Sample]:
    """The probe's samples, in time order (a line cut short by a kill is skipped)."""
    samples = []
    for line in Path(path).read_text().splitlines():
        try:
            d = json.loads(line)
            samples.append(Sample(float(d["t"]), float(d["py_ms"]), float(d["mm_ms"])))
        except (ValueError, KeyError):
            continue
    return sorted(samples, key=lambda s: s.t)


def window_ms(samples: Sequence[Sample], windows: Sequence[Sequence[float]]) -> float | None:
    """The median kernel time over the samples inside any of `windows` ([t0, t1] each); None
    where fewer than MIN_SAMPLES fall inside."""
    inside = [s.kernel_ms for s in samples if any(t0 <= s.t <= t1 for t0, t1 in windows)]
    return float(statistics.median(inside)) if len(inside) >= MIN_SAMPLES else None


def slowdown(samples: Sequence[Sample], run: Sequence[float], reference: Sequence[Sequence[float]]) -> float | None:
    """How many times slower the host ran during `run` ([t0, t1]) than during the `reference`
    windows (the measurements the simulator is given); None where either has too few samples."""
    during, then = window_ms(samples, [run]), window_ms(samples, reference)
    if during is None or then is None or then <= 0:
        return None
    return during / then


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.host_speed", description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True, help="JSON lines file the samples are appended to")
    ap.add_argument("--period", type=float, default=PERIOD_S, help="seconds between samples")
    ap.add_argument("--parent", type=int, default=None, help="stop when this process is no longer the parent")
    args = ap.parse_args(argv)
    if args.period <= 0:
        ap.error("--period must be > 0")
    try:
        probe_loop(Path(args.out), args.period, args.parent)
    except KeyboardInterrupt:
        pass
    return 0


if __name__ == "__main__":
    sys.exit(main())

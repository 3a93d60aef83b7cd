"""Engine stalls: the steps of a live run that took many times what the calibrated model says.

    python -m bench.engine_stalls --live DIR/summary.json [--ray-logs /tmp/ray/session_*/logs]
        [--ratio 3] [--min-excess 0.3] [--out DIR/engine_stalls.json]

On this 2-core host a vLLM step now and then runs 4-50 times its calibrated time (run 88: one
prefill of 4,486 tokens in 4.02 s, calibrated 0.89 s). Nothing before a run measures them and the
simulator does not model them, yet one of them sets hybrid's p99 TTFT at capacity: the router takes
back the requests queued behind it (stop 48). This module finds them in what the engines
themselves timed, so that a report can say which runs held one.

Where the steps come from: `bench.compare` saves each deployment's engine steps (vLLM's iteration
details, `pd_serve.engine_stats`) as `<round>/<system>/engine_steps.json`; for a sweep saved before
that, `--ray-logs` reads the same figures from the engines' log lines in a Ray session's logs.

A step is a stall when it took at least `ratio` times the round's calibrated step time
(`summary["measured"][system]`, as `bench.sim_fidelity` simulates it) *and* at least
`min_excess_s` more. The iteration details carry the decode requests' count, not their contexts:
each is priced at the run's mean prompt plus half its mean output, which is what a decode step of
that run carries on average. The absolute excess keeps a short step's scatter out (a 20 ms step at
3x is 40 ms late, not a stall); the ratio keeps a long prefill's ordinary spread out.
A step belongs to the run whose requests' first arrival and last finish enclose it (+-1 s).
"""
from __future__ import annotations

import argparse
import datetime
import json
import re
import statistics
import sys
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Iterable, Mapping, NamedTuple, Sequence

from bench.metrics import RequestRecord, write_json
from bench.rate_rounds import round_summaries
from bench.speed_scaled import run_window
from pd_serve.report import format_table
from schedulers.step_time import StepTimeModel

STEPS_FILE = "engine_steps.json"
STALLS_FILE = "engine_stalls.json"
DEFAULT_RATIO = 3.0
DEFAULT_MIN_EXCESS_S = 0.3
WINDOW_SLACK_S = 1.0  # log lines carry whole seconds; a step is timed when its outputs reach the logger


@dataclass(frozen=True)
class Stall:
    """One engine step that took `elapsed_s` against `predicted_s` calibrated, `t_s` seconds into
    its run (when it ended, as the engine logged it)."""

    worker: str
    t_s: float
    elapsed_s: float
    predicted_s: float
    num_prefill_tokens: int
    num_decode_reqs: int

    @property
    def excess_s(self) -> float:
        return self.elapsed_s - self.predicted_s


def decode_context(records: Sequence[RequestRecord]) -> int:
    """What one decode request of a run is priced at: its mean prompt plus half its mean output."""
    if not records:
        return 0
    return round(statistics.fmean(r.input_tokens for r in records)
                 + statistics.fmean(r.output_tokens for r in records) / 2)


class RunSteps(NamedTuple):
    """A run's engine steps: its stalls, how many steps (and of them prefilled), their seconds."""

    stalls: list[Stall]
    steps: int
    prefill_steps: int
    busy_s: float


def is_stall(time_s: float, predicted_s: float, ratio: float = DEFAULT_RATIO,
             min_excess_s: float = DEFAULT_MIN_EXCESS_S) -> bool:
    """Whether a step of `time_s` against its calibrated `predicted_s` stalled: at least `ratio`
    times that and `min_excess_s` over it (`stall_words`)."""
    return time_s >= ratio * predicted_s and time_s - predicted_s >= min_excess_s


def find_stalls(steps: Iterable[Mapping[str, Any]], model: StepTimeModel, window: tuple[float, float],
                context: int, ratio: float = DEFAULT_RATIO, min_excess_s: float = DEFAULT_MIN_EXCESS_S) -> RunSteps:
    """The stalls among `steps` (dicts with `worker`, `t`, `elapsed_s`, `num_prefill_tokens`,
    `num_decode_reqs`) inside `window`."""
    if ratio <= 1 or min_excess_s < 0:
        raise ValueError(f"ratio must be > 1 and min_excess_s >= 0, got {ratio}, {min_excess_s}")
    start, end = window
    stalls, count, prefills, busy = [], 0, 0, 0.0
    for s in steps:
        if not start - WINDOW_SLACK_S <= s["t"] <= end + WINDOW_SLACK_S:
            continue
        count += 1
        prefills += s["num_prefill_tokens"] > 0
        busy += s["elapsed_s"]
        predicted = model.predict(prefill_tokens=s["num_prefill_tokens"],
                                  decode_contexts=[context] * s["num_decode_reqs"])
        if is_stall(s["elapsed_s"], predicted, ratio, min_excess_s):
            stalls.append(Stall(str(s["worker"]), s["t"] - start, s["elapsed_s"], predicted,
                                s["num_prefill_tokens"], s["num_decode_reqs"]))
    return RunSteps(stalls, count, prefills, busy)


# ---- where the steps come from -------------------------------------------------------------------

def saved_steps(system_dir: Path) -> list[dict[str, Any]] | None:
    """A deployment's saved engine steps (`bench.compare`), each with its `worker` and that
    worker's `role`; None if unsaved."""
    path = system_dir / STEPS_FILE
    if not path.is_file():
        return None
    return [{**s, "worker": wid, "role": w.get("role")} for wid, w in json.loads(path.read_text()).items()
            for s in w["steps"]]


# vllm/v1/metrics/loggers.py `_log_iteration_details`, as Ray prefixes an actor's line
_LOG_LINE = re.compile(r"pid=(\d+)\) INFO (\d\d-\d\d \d\d:\d\d:\d\d) .*?Iteration\(\d+\): (\d+) context requests, "
                       r"(\d+) context tokens, (\d+) generation requests, \d+ generation tokens, "
                       r"iteration elapsed time: ([\d.]+) ms(?! \(dummy\))")


def logged_steps(log_dir: Path, year: int) -> list[dict[str, Any]]:
    """Every engine step in a Ray session's logs (`*.out`, `*.err`), the worker named by its pid.
    The lines carry no year and whole seconds only, in the local time of the host that wrote them
    (Python's logging formats `time.localtime`): read here in this machine's, which is that host's
    when the logs are read where the sweep ran (set TZ to that host's zone otherwise)."""
    steps = []
    for path in sorted(log_dir.glob("*.out")) + sorted(log_dir.glob("*.err")):
        with path.open(errors="replace") as f:
            for line in f:
                if "Iteration(" not in line or (m := _LOG_LINE.search(line)) is None:
                    continue
                t = datetime.datetime.strptime(f"{year}-{m.group(2)}", "%Y-%m-%d %H:%M:%S")
                steps.append({"worker": f"pid {m.group(1)}",
                              "t": t.timestamp() + 0.5,  # a naive time is local: the host's
                              "num_prefill_tokens": int(m.group(4)), "num_decode_reqs": int(m.group(5)),
                              "elapsed_s": float(m.group(6)) / 1e3})
    return steps


# ---- a sweep's stalls ----------------------------------------------------------------------------

def sweep_stalls(live_path: Path, ray_logs: Sequence[Path] = (), ratio: float = DEFAULT_RATIO,
                 min_excess_s: float = DEFAULT_MIN_EXCESS_S) -> list[dict[str, Any]]:
    """One row per round, system and rate of the `bench.compare --experiment rates` sweep at
    `live_path`: its steps, their seconds, and its stalls. Steps from each deployment's saved
    file, else from `ray_logs`; a run with neither raises (a run without stalls is a finding, a
    run without steps is not)."""
    from bench.sim_fidelity import step_model_from_calibration  # the simulator's own reading

    live = json.loads(live_path.read_text())
    logged: list[dict[str, Any]] | None = None
    rows = []
    for name, summary in zip(live.get("round_dirs") or ["."], round_summaries(live_path, live)):
        round_dir = live_path.parent / name
        for label, measured in (summary.get("measured") or {}).items():
            steps = saved_steps(round_dir / label)
            model = step_model_from_calibration(measured)
            for rate in live["rates"]:
                records = [RequestRecord.from_dict(d) for d in
                           json.loads((round_dir / label / f"rate_{rate:g}" / "records.json").read_text())]
                if steps is None:
                    if not ray_logs:
                        raise FileNotFoundError(f"{round_dir / label / STEPS_FILE} is missing (a sweep saved "
                                                f"before 2026-12-06?): give the Ray session's logs, --ray-logs")
                    if logged is None:
                        year = datetime.datetime.fromtimestamp(run_window(records)[0]).year  # local, as logged
                        logged = [s for d in ray_logs for s in logged_steps(d, year)]
                    steps = logged
                run = find_stalls(steps, model, run_window(records), decode_context(records), ratio, min_excess_s)
                if run.steps == 0:
                    raise ValueError(f"{round_dir / label} rate {rate:g}: no engine step inside the run "
                                     f"(the wrong --ray-logs?)")
                rows.append({"round": name, "system": label, "rate": rate, "steps": run.steps,
                             "prefill_steps": run.prefill_steps, "busy_s": run.busy_s,
                             "stalls": [asdict(s) | {"excess_s": s.excess_s} for s in run.stalls]})
    return rows


def stall_model(rows: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """The simulator's stalls (HostSpec.stall_per_prefill_step, stall_excess_s) from runs' rows:
    stalls per step that prefilled, and every stall's excess. A stall is a prefill's: on runs
    85-88, 63 stalls in 523,000 steps, every one in a step that prefilled."""
    prefills = sum(r["prefill_steps"] for r in rows)
    if prefills == 0:
        raise ValueError("no run here prefilled: there is nothing to take a stall's chance from")
    excess = sorted(s["excess_s"] for r in rows for s in r["stalls"])
    return {"stall_per_prefill_step": len(excess) / prefills, "stall_excess_s": excess}


def write_stalls(path: Path, live_path: Path, rows: Sequence[Mapping[str, Any]], ratio: float = DEFAULT_RATIO,
                 min_excess_s: float = DEFAULT_MIN_EXCESS_S) -> None:
    """The sweep's rows (`sweep_stalls`) and the rule they were found by, as JSON at `path`."""
    write_json(path, {"live": str(live_path), "ratio": ratio, "min_excess_s": min_excess_s, "runs": list(rows)})


def stall_words(ratio: float = DEFAULT_RATIO, min_excess_s: float = DEFAULT_MIN_EXCESS_S) -> str:
    """What a stall is, in words."""
    return f"at least {ratio:g}x and {min_excess_s:g} s over its calibrated time"


def stalled_runs(rows: Sequence[Mapping[str, Any]]) -> set[tuple[str, str, float]]:
    """(round, system, rate) of every run that held a stall."""
    return {(r["round"], r["system"], r["rate"]) for r in rows if r["stalls"]}


def stalls_table(rows: Sequence[Mapping[str, Any]]) -> str:
    """Per system and rate: runs, steps, stalls, the longest and their excess in all."""
    keys = list(dict.fromkeys((r["system"], r["rate"]) for r in rows))
    out = []
    for system, rate in keys:
        runs = [r for r in rows if (r["system"], r["rate"]) == (system, rate)]
        stalls = [s for r in runs for s in r["stalls"]]
        longest = max(stalls, key=lambda s: s["excess_s"], default=None)
        out.append([system, f"{rate:g}", len(runs), sum(r["steps"] for r in runs),
                    f"{len(stalls)} in {sum(bool(r['stalls']) for r in runs)}",
                    "" if longest is None else f"{longest['elapsed_s']:.2f} s ({longest['predicted_s']:.2f})",
                    f"{sum(s['excess_s'] for s in stalls):.2f}"])
    return format_table(["system", "rate", "runs", "steps", "stalls in runs", "longest (calibrated)",
                         "excess s"], out)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.engine_stalls", description=__doc__.split("\n\n")[0])
    p.add_argument("--live", required=True, help="a rates sweep's summary.json (bench.compare --experiment rates)")
    p.add_argument("--ray-logs", action="append", default=[], metavar="DIR",
                   help="a Ray session's logs directory, for runs whose steps were not saved (repeatable)")
    p.add_argument("--ratio", type=float, default=DEFAULT_RATIO, help="times the calibrated step time")
    p.add_argument("--min-excess", type=float, default=DEFAULT_MIN_EXCESS_S, help="seconds over it")
    p.add_argument("--out", help=f"JSON of every run's stalls (default: {STALLS_FILE} beside --live)")
    args = p.parse_args(argv)
    live_path = Path(args.live)
    try:
        rows = sweep_stalls(live_path, [Path(d) for d in args.ray_logs], args.ratio, args.min_excess)
    except (FileNotFoundError, ValueError) as err:
        print(f"bench.engine_stalls: {err}", file=sys.stderr)
        return 2
    print(f"Engine steps of {live_path} {stall_words(args.ratio, args.min_excess)}\n")
    print(stalls_table(rows))
    for r in rows:
        for s in r["stalls"]:
            print(f"  {r['system']} rate {r['rate']:g} {r['round']}: {s['worker']} +{s['t_s']:.0f} s, "
                  f"{s['elapsed_s']:.2f} s against {s['predicted_s']:.2f} s ({s['num_prefill_tokens']} prefill "
                  f"tokens, {s['num_decode_reqs']} decodes)")
    out = Path(args.out) if args.out else live_path.parent / STALLS_FILE
    write_stalls(out, live_path, rows, args.ratio, args.min_excess)
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Engine steps live and simulated, over their calibrated time, by what the other engines did meanwhile.

    python -m bench.steps_beside --live DIR/summary.json [--system "hybrid adaptive"]
        [--host FORM] [--measurements hardware|own] [--growth shared|own] [--rounds N] [--out FILE.json]

The fidelity table (`bench.sim_fidelity`) says how far a simulated percentile lies from the live
one; it cannot say which step the host model prices wrong, and two errors of opposite sign can
meet in a figure that fits. This module sets each engine step of a live rates sweep (the engines'
own iteration details, `<round>/<system>/engine_steps.json`, saved by `bench.compare`) beside the
simulator's steps of the same workload (`simulate(..., keep_steps=True)`, each round with the
measurements `bench.sim_fidelity` takes, pooled over the sweep by default, and the host form
asked for), both over that step model's time for what the step computed, grouped by:
- the engine's role, and the step's kind: a prefill step (a prompt's chunk in it) or decode-only;
- what the other engines did over it: prefilling for more than half of it, in decode-only steps
  for more than half, idle throughout, or a mix;
- how many requests it decoded (its streams).

A step's time runs from its start to the next step's start on its engine when that one follows
within GAP_S, else to its end: vLLM times a step from its schedule to its outputs, and the engine
loop's work between two steps is the host's share the simulator folds into its steps.

Found with it (stop 52, runs 90 and 94-96): hybrid's engine that streams prefilled beside its
prefill-only engine's prefills at x1.06-1.38 of its calibrated steps (median by streams), as
beside that engine idle, where the host form that was then the default (decode-neighbour+mix) gave
x1.61-2.09: it priced such a prefill as one on the prefill-only engine beside streams. The
simulated router, learning that engine slow, sent twice live's share of prompts to the prefill
engine. Under own-streams+mix, the default since, the medians of run 96's 20 groups of 100 steps
or more (on both sides) came within 15% of live's, 19 of them within 11%.
"""
from __future__ import annotations

import argparse
import bisect
import json
import math
import statistics
import sys
from pathlib import Path
from typing import Any, Iterable, Iterator, Mapping, NamedTuple, Sequence

from bench.compare import rates_workload
from bench.engine_stalls import STEPS_FILE, decode_context, saved_steps
from bench.metrics import RequestRecord, write_json
from bench.pooled_measurements import (DEFAULT_GROWTH, DEFAULT_MEASUREMENTS, GROWTH_FORMS, ROUND_FORMS,
                                       hardware_only_error, round_measurements)
from bench.rate_rounds import round_summaries
from bench.simulator.config import build_cluster, build_policy
from bench.simulator.simulator import StepRecord, simulate
from bench.speed_scaled import run_window
from pd_serve.report import format_table
from schedulers.step_time import StepTimeModel

GAP_S = 0.05  # a next step starting within this of a step's end follows it (the engine stayed busy)
MIN_STEPS = 10  # a group with fewer steps on both sides is left out of the table
DECODE_BUCKETS = ((0, "0"), (1, "1"), (3, "2-3"), (7, "4-7"), (math.inf, "8+"))
NEIGHBOUR_STATES = ("prefill", "decode", "idle", "mixed")


class Timed(NamedTuple):
    """One step: its engine and role, when it started, its time (GAP_S rule), what it computed."""

    worker_id: str
    role: str
    start_s: float
    end_s: float
    time_s: float
    num_prefill_tokens: int
    num_decode_reqs: int


def timed(steps: Sequence[StepRecord], role: str) -> list[Timed]:
    """One engine's `steps` with their time: to the next step's start if it follows within
    GAP_S, else to its own end."""
    ordered = sorted(steps, key=lambda s: s.start_s)
    out = []
    for step, following in zip(ordered, [*ordered[1:], None]):
        end_s = step.end_s
        if following is not None and 0 <= following.start_s - step.end_s <= GAP_S:
            end_s = following.start_s
        out.append(Timed(step.worker_id, role, step.start_s, step.end_s, end_s - step.start_s,
                         step.num_prefill_tokens, step.num_decode_reqs))
    return out


def live_step_records(saved: Iterable[Mapping[str, Any]], window: tuple[float, float]) -> list[StepRecord]:
    """The saved engine steps (`bench.engine_stalls.saved_steps`: `t` when it ended, `elapsed_s`)
    that ended inside `window`, as the simulator's records."""
    start, end = window
    return [StepRecord(str(s["worker"]), s["t"] - s["elapsed_s"], s["t"], int(s["num_prefill_tokens"]),
                       int(s["num_decode_reqs"]))
            for s in saved if start <= s["t"] <= end]


def timed_by_worker(steps: Sequence[StepRecord], roles: Mapping[str, str]) -> dict[str, list[Timed]]:
    """Engine steps, live or simulated, each engine's timed (`timed`) with its role (`roles`:
    worker -> role)."""
    return {wid: timed([s for s in steps if s.worker_id == wid], role) for wid, role in roles.items()}


def worker_ratios(steps: Sequence[StepRecord], roles: Mapping[str, str], model: StepTimeModel,
                  context: int) -> dict[tuple[str, str, str, str], list[float]]:
    """`step_ratios` of engine steps, live or simulated, timed by engine (`timed_by_worker`)."""
    return step_ratios(timed_by_worker(steps, roles), model, context)


def window_ratios(saved: Sequence[Mapping[str, Any]], window: tuple[float, float], model: StepTimeModel,
                  context: int) -> dict[tuple[str, str, str, str], list[float]]:
    """`worker_ratios` of the saved engine steps (`bench.engine_stalls.saved_steps`, each with its
    worker's role) that ended inside `window`: a run's, or the probes' before it (`bench.step_scatter`)."""
    return worker_ratios(live_step_records(saved, window), {s["worker"]: s["role"] for s in saved}, model, context)


def neighbour_state(step: Timed, others: Sequence[Sequence[Timed]]) -> str:
    """What the other engines did over `step` (NEIGHBOUR_STATES): prefilling, or in decode-only
    steps, for more than half of it; nothing at all; else a mix. `others`: each other engine's
    steps, ordered by start."""
    prefill_s = decode_s = 0.0
    for steps in others:
        i = max(0, bisect.bisect_left(steps, step.start_s, key=lambda s: s.start_s) - 1)
        for other in steps[i:]:
            if other.start_s >= step.end_s:
                break
            overlap = min(step.end_s, other.end_s) - max(step.start_s, other.start_s)
            if overlap <= 0:
                continue
            if other.num_prefill_tokens > 0:
                prefill_s += overlap
            elif other.num_decode_reqs > 0:
                decode_s += overlap
    length = step.end_s - step.start_s
    if prefill_s == decode_s == 0:
        return "idle"
    if prefill_s > length / 2:
        return "prefill"
    if decode_s > length / 2:
        return "decode"
    return "mixed"


def decode_bucket(num_decodes: int) -> str:
    return next(name for top, name in DECODE_BUCKETS if num_decodes <= top)


def step_ratios(by_worker: Mapping[str, Sequence[Timed]], model: StepTimeModel,
                context: int) -> dict[tuple[str, str, str, str], list[float]]:
    """(role, step kind, neighbour state, decodes bucket) -> each step's time over the model's
    time for what it computed (the decodes priced at `context` tokens each)."""
    groups: dict[tuple[str, str, str, str], list[float]] = {}
    for key, step, predicted_s in priced_steps(by_worker, model, context):
        groups.setdefault(key, []).append(step.time_s / predicted_s)
    return groups


def priced_steps(by_worker: Mapping[str, Sequence[Timed]], model: StepTimeModel,
                 context: int) -> Iterator[tuple[tuple[str, str, str, str], Timed, float]]:
    """Each step with its group (`step_ratios`) and the model's time for what it computed; steps
    of no time, or that the model prices at none, left out."""
    ordered = {wid: sorted(steps, key=lambda s: s.start_s) for wid, steps in by_worker.items()}
    for wid, steps in ordered.items():
        others = [s for other, s in ordered.items() if other != wid]
        for step in steps:
            predicted = model.predict(step.num_prefill_tokens, 0, [context] * step.num_decode_reqs)
            if predicted <= 0 or step.time_s <= 0:
                continue
            kind = "prefill" if step.num_prefill_tokens > 0 else "decode"
            key = (step.role, kind, neighbour_state(step, others), decode_bucket(step.num_decode_reqs))
            yield key, step, predicted


def merge(into: dict[Any, list[float]], groups: Mapping[Any, list[float]]) -> None:
    for key, values in groups.items():
        into.setdefault(key, []).extend(values)


def _quantile(values: Sequence[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def summary_rows(live: Mapping[Any, list[float]], sim: Mapping[Any, list[float]],
                 min_steps: int = MIN_STEPS) -> list[dict[str, Any]]:
    """One row per group with `min_steps` or more on either side: count, p50, p90 each side."""
    order = {state: i for i, state in enumerate(NEIGHBOUR_STATES)}
    buckets = {name: i for i, (_, name) in enumerate(DECODE_BUCKETS)}
    keys = sorted(set(live) | set(sim), key=lambda k: (k[0], k[1], order[k[2]], buckets[k[3]]))
    rows = []
    for key in keys:
        lv, sv = live.get(key, []), sim.get(key, [])
        if max(len(lv), len(sv)) < min_steps:
            continue
        row: dict[str, Any] = dict(zip(("role", "kind", "others", "decodes"), key))
        for side, values in (("live", lv), ("sim", sv)):
            row[side] = ({"steps": len(values), "p50": _quantile(values, 0.5), "p90": _quantile(values, 0.9)}
                         if values else {"steps": 0, "p50": None, "p90": None})
        rows.append(row)
    return rows


def spread(rows: Sequence[Mapping[str, Any]], side: str, min_steps: int = 100) -> float | None:
    """How far a step's time scatters: the median over the groups with `min_steps` or more on both
    sides of each group's p90 over its p50, on `side` ("live" or "sim"). The simulator's steps
    vary only with what they compute and what runs beside them; a live step also with the host,
    and a queue near capacity grows with that scatter."""
    ratios = [r[side]["p90"] / r[side]["p50"] for r in rows
              if min(r["live"]["steps"], r["sim"]["steps"]) >= min_steps and r[side]["p50"]]
    return statistics.median(ratios) if ratios else None


def steps_table(rows: Sequence[Mapping[str, Any]]) -> str:
    def x(v: float | None) -> str:
        return "-" if v is None else f"x{v:.2f}"

    def ratio(row: Mapping[str, Any]) -> str:
        lv, sv = row["live"]["p50"], row["sim"]["p50"]
        return "-" if lv is None or sv is None else f"{sv / lv:.2f}"

    return format_table(
        ["engine", "step", "other engines", "decodes", "live steps", "live p50", "live p90", "sim steps",
         "sim p50", "sim p90", "sim / live p50"],
        [[r["role"], r["kind"], r["others"], r["decodes"], r["live"]["steps"], x(r["live"]["p50"]),
          x(r["live"]["p90"]), r["sim"]["steps"], x(r["sim"]["p50"]), x(r["sim"]["p90"]), ratio(r)]
         for r in rows])


def sweep_steps(live_path: Path, label: str, host_form: str, num_rounds: int | None = None,
                progress: bool = True, measurements: str = DEFAULT_MEASUREMENTS,
                growth: str = DEFAULT_GROWTH) -> tuple[dict[Any, list[float]], dict[Any, list[float]]]:
    """Live and simulated step ratios (`step_ratios`) of `label` over the sweep's rounds (the
    first `num_rounds`), every rate, each round simulated with the measurements `bench.sim_fidelity`
    would take (`measurements` "hardware", its default: pooled over the sweep, `growth` as its
    --growth; "own": the round's own deployment's), the step ratios of both over that round's step model."""
    from bench.sim_fidelity import (SCATTER_FORMS, _default_model_dir, deployment_of, live_run_shape, run_scatter,
                                    sim_config_for, step_model_from_calibration, systems_of)
    from bench.step_scatter import sweep_scatter

    live = json.loads(live_path.read_text())
    systems = systems_of(live)
    if label not in systems:
        raise ValueError(f"{label!r} is not a system of {live_path} ({', '.join(systems)})")
    live_groups: dict[Any, list[float]] = {}
    sim_groups: dict[Any, list[float]] = {}
    names = live.get("round_dirs") or ["."]
    unsaved = [live_path.parent / name / label for name in names[:num_rounds]
               if not (live_path.parent / name / label / STEPS_FILE).is_file()]
    if unsaved:
        raise FileNotFoundError(f"{unsaved[0]} holds no engine steps (a sweep saved before 2026-12-06?)")
    summaries = round_summaries(live_path, live)
    measured = [s.get("measured") or {} for s in summaries]
    if any(label not in m for m in measured):
        raise ValueError(f"{live_path}: a round holds no measurements of {label!r}")
    per_round = round_measurements(summaries, systems, measurements, growth=growth)
    # a scattering form draws from the probe steps, pooled as the other measurements are
    scatter = sweep_scatter(live_path, names, measured, systems, measurements) if host_form in SCATTER_FORMS else None
    for k, (name, summary) in list(enumerate(zip(names, summaries)))[:num_rounds]:
        system_dir = live_path.parent / name / label
        saved = saved_steps(system_dir)
        cal = per_round[k][label]
        model = step_model_from_calibration(cal)
        deployment, model_dir = deployment_of(summary, label, systems[label]), _default_model_dir()
        for rate in live["rates"]:
            records = [RequestRecord.from_dict(d) for d in
                       json.loads((system_dir / f"rate_{rate:g}" / "records.json").read_text())]
            context = decode_context(records)
            merge(live_groups, window_ratios(saved, run_window(records), model, context))
            num_requests, output_tokens = live_run_shape(summary["summaries"][label][f"rate={rate:g}"])
            workload = rates_workload(rate, num_requests, output_tokens)
            draws = None if scatter is None else scatter[k].get(label)
            config = sim_config_for(label, deployment, cal, model_dir, host_form,
                                    scatter=run_scatter(host_form, draws, label, deployment, cal, model_dir,
                                                        model, workload))
            cluster = build_cluster(config, label, step_model=model)
            result = simulate(workload, cluster, build_policy(config, label, cluster),
                              speed_by_role=config.policies[label].speed_by_role, keep_steps=True)
            merge(sim_groups, worker_ratios(result.steps, {w.worker_id: w.role for w in cluster.workers},
                                            model, context))
        if progress:
            print(f"{name}: {label} live and simulated at {len(live['rates'])} rates", file=sys.stderr, flush=True)
    return live_groups, sim_groups


def main(argv: list[str] | None = None) -> int:
    from bench.sim_fidelity import DEFAULT_HOST_FORM, HOST_FORMS

    parser = argparse.ArgumentParser(prog="python -m bench.steps_beside", description=__doc__.split("\n\n")[0])
    parser.add_argument("--live", required=True, type=Path, help="a rates sweep's summary.json (bench.compare)")
    parser.add_argument("--system", default="hybrid adaptive", help="the system of the sweep to look at")
    parser.add_argument("--host", default=DEFAULT_HOST_FORM, choices=sorted(HOST_FORMS),
                        help="the simulator's host form (bench.simulator.host)")
    parser.add_argument("--measurements", choices=ROUND_FORMS, default=DEFAULT_MEASUREMENTS,
                        help="simulate each round with the sweep's measurements pooled as bench.sim_fidelity "
                             "pools them (hardware, the default) or with its own deployment's (own)")
    parser.add_argument("--growth", choices=GROWTH_FORMS, default=None,
                        help=f"with --measurements hardware: as bench.sim_fidelity --growth ({DEFAULT_GROWTH} "
                             "unless given)")
    parser.add_argument("--rounds", type=int, default=None, help="only the first N rounds")
    parser.add_argument("--out", type=Path, default=None, help="write the rows as JSON here")
    args = parser.parse_args(argv)
    if args.rounds is not None and args.rounds < 1:
        parser.error(f"--rounds must be at least 1, got {args.rounds}")
    wrong = hardware_only_error(args.measurements, {"growth": args.growth})
    if wrong:
        parser.error(wrong)
    try:
        live, sim = sweep_steps(args.live, args.system, args.host, args.rounds, measurements=args.measurements,
                                growth=args.growth or DEFAULT_GROWTH)
    except (FileNotFoundError, ValueError) as error:
        print(f"bench.steps_beside: {error}", file=sys.stderr)
        return 2
    rows = summary_rows(live, sim)
    print(f"\n{args.system} ({args.live}), host form {args.host}, {args.measurements} measurements: each engine "
          f"step's time over the calibrated model's for what it computed, median (p50) and p90, live beside "
          f"simulated\n")
    print(steps_table(rows))
    total = {side: sum(len(v) for v in groups.values()) for side, groups in (("live", live), ("sim", sim))}
    print(f"\n{total['live']:,} live steps, {total['sim']:,} simulated; groups under {MIN_STEPS} steps on both "
          f"sides left out; geometric mean of every step live x{_gmean(live):.2f}, sim x{_gmean(sim):.2f}")
    live_spread, sim_spread = spread(rows, "live"), spread(rows, "sim")
    if live_spread is not None and sim_spread is not None:
        print(f"a step's scatter, p90 over p50 (median over the groups of 100 steps or more on both sides): "
              f"live {live_spread:.2f}, sim {sim_spread:.2f}")
    if args.out is not None:
        write_json(args.out, {"live": str(args.live), "system": args.system, "host_form": args.host,
                              "measurements": args.measurements, "rows": rows,
                              "spread": {"live": live_spread, "sim": sim_spread}})
        print(f"wrote {args.out}")
    return 0


def _gmean(groups: Mapping[Any, list[float]]) -> float:
    values = [v for vs in groups.values() for v in vs]
    return math.exp(statistics.fmean(math.log(v) for v in values)) if values else math.nan


if __name__ == "__main__":
    sys.exit(main())

"""Simulator fidelity over the rounds of a rates sweep: pooled, and held to the live runs' own test.

    python -m bench.sim_fidelity --live DIR/summary.json     (DIR from bench.compare --rounds R)

One round serves 60 requests per system and rate. Its p99 TTFT is about its second-longest
request, and this 2-core host drifts by +-20% over seconds, so one round is a noisy target: the
same code on the same workload, deployed again half an hour later, agreed with itself within 20%
on 14 to 32 of the 36 figures (runs 25-26, every pair of their six rounds). Judged on one round,
the simulator cannot be told apart from that noise. Two views that can:

1. **Pooled.** The simulator serves each round's workload with that round's own measurements
   (what `bench.sim_fidelity` does for one round); its records over all rounds are summarized
   together and set against the live records of all rounds together (R x 60 requests per system
   and rate).
2. **Held out.** Each round, live and simulated, against the live pool of the *other* rounds.
   The live round's count is how well the live system predicts itself; the simulated round's
   count, beside it, is the same test passed by the simulator. A simulator that scores as the
   live rounds do is as close as this host lets anything be.

3. **Halves** (four rounds or more). The rounds split in two, each half pooled: the live halves
   against each other, and each simulated half against its own live half. A pooled figure is what
   the 20% target is judged on, and this shows how far a pool of half the rounds moves: on run 83
   (four rounds of 240) the live halves held each other to 43 and 39 of 48 figures, where the
   four rounds' pool pinned 46 of 48 to within 20% (its 95% bootstrap interval).

Both are also counted per rate (`by_rate`, `by_load_table`), with the rate's load: the rate over
the colocated capacity the sweep measured (`--rates auto`). At a load of 1 colocated's queue has
no steady state under Poisson arrivals, and disaggregated, with less capacity, is past its own: their
TTFTs over 240 requests follow the queue's random walk and a few percent of the host's speed, and
the live rounds of one sweep disagree there most (run 74 at a load of 1: disaggregated's p50 TTFT
1,057 and 727 ms in its two rounds, colocated's 234 and 159 ms; the live rounds held out got 14
of 24 figures within 20% there, and 24 of 24 at 0.7). Vidur states its fidelity at 85% of each
deployment's capacity; the counts per load say where the 20% target can be judged at all.

Nothing here is fitted: the simulated records are those `run_fidelity` makes from the
measurements taken before the runs: each round's own (`measurements="own"`, this function's
default), or pooled over the sweep's deployments (`bench.pooled_measurements`; the command line,
`bench.sim_fidelity`, takes the hardware pool by default). A host form that draws each prefill's
stretch (`--host stretch-draws`) draws round k's from seed k: with the hardware pool every round
is simulated from the same measurements, and one seed would repeat one realisation R times.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any, Collection, Mapping, Sequence

from bench.compare import RATES_SYSTEMS
from bench.fidelity_ranking import met_slo
from bench.live_spread import spread, spread_counts
from bench.metrics import RequestRecord, SloSpec, pooled_summary, summarize
from bench.pooled_measurements import (DEFAULT_GROWTH, DEFAULT_STRETCH, MEASUREMENTS, hardware_measurements_for,
                                       pooled_measurements)
from bench.rate_rounds import round_summaries
from bench.speed_scaled import SPEED_FORMS, run_window, sweep_slowdowns
from bench.host_speed import read_samples
from bench.sim_fidelity import METRICS, SCATTER_FORMS, TOLERANCE, compare_summaries, run_fidelity
from bench.step_scatter import sweep_scatter
from pd_serve.report import format_table

Key = tuple[str, float]  # (system label, rate)


def live_records(round_dir: Path, label: str, rate: float) -> list[RequestRecord]:
    """One round's live records of `label` at `rate` (bench.compare writes them per run)."""
    path = round_dir / label / f"rate_{rate:g}" / "records.json"
    if not path.is_file():
        raise FileNotFoundError(f"{path}: the round's records are missing; pooling needs every run's records")
    return [RequestRecord.from_dict(d) for d in json.loads(path.read_text())]


def count_ok(live: Mapping[Key, Mapping[str, Any]], other: Mapping[Key, Mapping[str, Any]],
             tolerance: float) -> tuple[int, int]:
    """(figures of `other` within `tolerance` of `live`, figures compared), over the keys both hold."""
    checks = [m["ok"] for key in live if key in other
              for m in compare_summaries(live[key], other[key], tolerance).values()]
    return sum(checks), len(checks)


def fidelity_over_rounds(rounds_path: Path, cal: Mapping[str, Any] | None, model: str, host_form: str,
                         tolerance: float = TOLERANCE, progress: bool = True,
                         systems: Mapping[str, str] = RATES_SYSTEMS,
                         measurements: str = "own", speed: str = "none",
                         stretch: str = DEFAULT_STRETCH, growth: str = DEFAULT_GROWTH,
                         stalled: Collection[tuple[str, str, float]] = (),
                         stall_events: Mapping[str, Any] | None = None, seed_offset: int = 0) -> dict[str, Any]:
    """Both views (module docstring) of the rounds summary at `rounds_path`, for `systems`
    (label -> deployment config, as `run_fidelity`). `measurements`: "own", each round simulated
    with what its deployment measured before its run, or "pooled", every round of a system with
    the median over all its rounds' measurements, or "hardware", the step model pooled over every
    system and round and the rest over the systems of the same workers (`bench.pooled_measurements`).
    `speed`: "probe" scales each run's measurements by the host's slowdown during it against
    during them (`bench.speed_scaled`; the sweep's `host_speed` samples), "none" leaves them.
    `stretch`: the hardware form's reading of the prefill's stretch (`bench.pooled_measurements`);
    `growth`: its pricing of further streams where a deployment ran no loops of the mix.
    `stalled`: (round, system, rate) of the live runs that held an engine stall
    (`bench.engine_stalls`), for the pool without them (`stall_free`). `stall_events`: engine
    stalls simulated as rare events (`bench.engine_stalls.stall_model`), round k's drawn from seed k.
    `seed_offset`: added to every seed a round draws from (`run_fidelity`)."""
    if speed not in SPEED_FORMS:
        raise ValueError(f"speed must be one of {SPEED_FORMS}, got {speed!r}")
    if measurements not in MEASUREMENTS:
        raise ValueError(f"measurements must be one of {MEASUREMENTS}, got {measurements!r}")
    top = json.loads(rounds_path.read_text())
    if top.get("experiment") != "rates-rounds":
        raise ValueError(f"{rounds_path}: not a `bench.compare --rounds R` summary")
    if len(top["round_dirs"]) < 2:
        raise ValueError(f"{rounds_path}: {len(top['round_dirs'])} round; the held-out view needs two or more")
    slo = SloSpec()  # bench.compare summarizes with the default SLOs
    summaries = round_summaries(rounds_path, top)
    measured = [live.get("measured") or {} for live in summaries]
    per_round: list[dict[str, Any]] | None = None
    if measurements == "pooled":
        per_round = [pooled_measurements(measured)] * len(measured)
    elif measurements == "hardware":
        per_round = hardware_measurements_for(measured, systems, stretch, growth)
    scatter_by_round: list[dict[str, Any]] | None = None
    if host_form in SCATTER_FORMS:  # the probe steps' scatter, pooled as the rest is
        scatter_by_round = sweep_scatter(rounds_path, top["round_dirs"], measured, systems, measurements)
    slowdowns_by_round: list[dict[Key, float]] | None = None
    if speed != "none":
        slowdowns_by_round = round_slowdowns(rounds_path, top, summaries, systems, measurements, speed)
    live_runs: list[dict[Key, list[RequestRecord]]] = []
    sim_runs: list[dict[Key, list[RequestRecord]]] = []
    own_rows: list[list[dict[str, Any]]] = []
    for k, (name, live) in enumerate(zip(top["round_dirs"], summaries)):
        round_dir = rounds_path.parent / name
        if per_round is not None:
            live = {**live, "measured": per_round[k]}
        if progress:
            print(f"{name}:", file=sys.stderr, flush=True)
        sim: dict[Key, list[RequestRecord]] = {}
        own_rows.append(run_fidelity(live, cal, model, systems=systems, live_dir=round_dir, tolerance=tolerance,
                                     progress=progress, host_form=host_form, sim_records=sim,
                                     speed=None if slowdowns_by_round is None else slowdowns_by_round[k],
                                     draw_seed=k, stalls=stall_events, seed_offset=seed_offset,
                                     scatter=None if scatter_by_round is None else scatter_by_round[k]))
        sim_runs.append(sim)
        live_runs.append({key: live_records(round_dir, *key) for key in sim})
    keys = [key for key in sim_runs[0] if all(key in run for run in sim_runs)]

    pooled_rows = []
    for label, rate in keys:
        live_pooled_records = [r for run in live_runs for r in run[(label, rate)]]
        live_pool = pooled_summary([run[(label, rate)] for run in live_runs], slo)
        sim_pool = pooled_summary([run[(label, rate)] for run in sim_runs], slo)
        pooled_rows.append({"system": label, "rate": rate, "requests": live_pool["num_requests"],
                            "metrics": compare_summaries(live_pool, sim_pool, tolerance),
                            "met_slo": {"live": met_slo(live_pool), "sim": met_slo(sim_pool)},
                            "spread": spread(live_pooled_records, tolerance)})

    held_out = []
    for k, name in enumerate(top["round_dirs"]):
        others = [run for j, run in enumerate(live_runs) if j != k]
        rest = pool_by_key(others, keys, slo)
        live_k = {key: summarize(live_runs[k][key], slo) for key in keys}
        sim_k = {key: summarize(sim_runs[k][key], slo) for key in keys}
        live_ok, n = count_ok(rest, live_k, tolerance)
        sim_ok, _ = count_ok(rest, sim_k, tolerance)
        own_ok = sum(m["ok"] for r in own_rows[k] for m in r["metrics"].values())
        held_out.append({"round": name, "checks": n, "live_round_ok": live_ok, "sim_round_ok": sim_ok,
                         "sim_vs_own_live_ok": own_ok,
                         "per_metric": _per_metric(rest, live_k, sim_k, tolerance),
                         "per_rate": _per_rate(rest, live_k, sim_k, tolerance)})
    return {"rounds": top["round_dirs"], "tolerance": tolerance, "host_form": host_form, "stall_events": stall_events,
            "measurements": measurements, "speed": speed, "stretch": stretch, "growth": growth,
            "host_slowdowns": None if slowdowns_by_round is None else
            [[[label, rate, f] for (label, rate), f in r.items()] for r in slowdowns_by_round],
            "pooled_rows": pooled_rows, "held_out": held_out,
            "pooled_within_tolerance": sum(m["ok"] for r in pooled_rows for m in r["metrics"].values()),
            "pooled_checks": sum(len(r["metrics"]) for r in pooled_rows),
            "pooled_spread": spread_counts(pooled_rows),
            "by_rate": by_rate(pooled_rows, held_out, (top.get("capacity") or {}).get("rps")),
            "halves": halves(top["round_dirs"], live_runs, sim_runs, keys, slo, tolerance),
            "stall_free": stall_free(top["round_dirs"], live_runs, sim_runs, keys, stalled, slo, tolerance),
            "round_rows": own_rows}


def pool_by_key(runs: Sequence[Mapping[Key, Sequence[RequestRecord]]], keys: Sequence[Key],
                slo: SloSpec) -> dict[Key, dict[str, Any]]:
    """Per key, the summary of `runs`' records pooled (the held-out and the halves views' pools)."""
    return {key: pooled_summary([run[key] for run in runs], slo) for key in keys}


def halves(names: Sequence[str], live_runs: Sequence[Mapping[Key, Sequence[RequestRecord]]],
           sim_runs: Sequence[Mapping[Key, Sequence[RequestRecord]]], keys: Sequence[Key], slo: SloSpec,
           tolerance: float) -> dict[str, Any] | None:
    """The halves view (module docstring): the first half of the rounds and the rest, each pooled
    over `keys`; None under four rounds (a half of one round is the held-out view's)."""
    if len(names) < 4:
        return None
    cut = len(names) // 2
    live_a, live_b = pool_by_key(live_runs[:cut], keys, slo), pool_by_key(live_runs[cut:], keys, slo)
    sim_a, sim_b = pool_by_key(sim_runs[:cut], keys, slo), pool_by_key(sim_runs[cut:], keys, slo)
    second_ok, checks = count_ok(live_a, live_b, tolerance)
    return {"first": list(names[:cut]), "second": list(names[cut:]), "checks": checks,
            "live_second_vs_first": second_ok,
            "live_first_vs_second": count_ok(live_b, live_a, tolerance)[0],
            "sim_first": count_ok(live_a, sim_a, tolerance)[0], "sim_second": count_ok(live_b, sim_b, tolerance)[0]}


def stall_free(names: Sequence[str], live_runs: Sequence[Mapping[Key, Sequence[RequestRecord]]],
               sim_runs: Sequence[Mapping[Key, Sequence[RequestRecord]]], keys: Sequence[Key],
               stalled: Collection[tuple[str, str, float]], slo: SloSpec, tolerance: float) -> list[dict[str, Any]]:
    """For each system and rate with a round that held an engine stall and a round that did not:
    live and simulated pooled over the rounds without one. This sizes what the stalls do to a
    figure; the target is judged on every round, since a stall is part of what the host serves."""
    rows = []
    for label, rate in keys:
        kept = [k for k, name in enumerate(names) if (name, label, rate) not in stalled]
        if len(kept) in (0, len(names)):
            continue
        live_pool = pooled_summary([live_runs[k][(label, rate)] for k in kept], slo)
        sim_pool = pooled_summary([sim_runs[k][(label, rate)] for k in kept], slo)
        rows.append({"system": label, "rate": rate, "rounds": [names[k] for k in kept],
                     "requests": live_pool["num_requests"],
                     "metrics": compare_summaries(live_pool, sim_pool, tolerance)})
    return rows


def halves_line(h: Mapping[str, Any] | None, tolerance: float) -> str | None:
    """One line of text for `halves`' result; None where there were too few rounds."""
    if h is None:
        return None
    first, second = "-".join((h["first"][0], h["first"][-1])), "-".join((h["second"][0], h["second"][-1]))
    return (f"halves ({first} and {second}, each pooled): the live halves within {tolerance:.0%} of each other "
            f"on {h['live_second_vs_first']} and {h['live_first_vs_second']} of {h['checks']} figures; "
            f"the simulated halves of their live halves on {h['sim_first']} and {h['sim_second']}")


def round_slowdowns(rounds_path: Path, top: Mapping[str, Any], summaries: Sequence[Mapping[str, Any]],
                    systems: Mapping[str, str], measurements: str, speed: str) -> list[dict[Key, float]]:
    """Per round, (system, rate) -> the host's slowdown during that live run (bench.speed_scaled),
    from the sweep's host probe and the runs' own start and end."""
    if not top.get("host_speed"):
        raise ValueError(f"{rounds_path}: the sweep ran without the host probe (bench.compare runs it "
                         f"since run 59); simulate it with --speed none")
    samples = read_samples(rounds_path.parent / top["host_speed"])
    measured = [live.get("measured") or {} for live in summaries]
    runs = [{(label, rate): run_window(live_records(rounds_path.parent / name, label, rate))
             for label in systems if label in live["summaries"] for rate in live["rates"]}
            for name, live in zip(top["round_dirs"], summaries)]
    return sweep_slowdowns(samples, measured, runs, measurements, speed)


def _per_metric(rest: Mapping[Key, Mapping[str, Any]], live_k: Mapping[Key, Mapping[str, Any]],
                sim_k: Mapping[Key, Mapping[str, Any]], tolerance: float) -> dict[str, dict[str, int]]:
    """Per compared metric: how many (system, rate) the live and the simulated round get within."""
    out: dict[str, dict[str, int]] = {name: {"live": 0, "sim": 0, "of": 0} for name, _ in METRICS}
    for key in rest:
        live_m = compare_summaries(rest[key], live_k[key], tolerance)
        sim_m = compare_summaries(rest[key], sim_k[key], tolerance)
        for name, _ in METRICS:
            out[name]["of"] += 1
            out[name]["live"] += live_m[name]["ok"]
            out[name]["sim"] += sim_m[name]["ok"]
    return out


def _per_rate(rest: Mapping[Key, Mapping[str, Any]], live_k: Mapping[Key, Mapping[str, Any]],
              sim_k: Mapping[Key, Mapping[str, Any]], tolerance: float) -> list[dict[str, Any]]:
    """Per rate, ascending: how many figures the live and the simulated round get within."""
    out = []
    for rate in sorted({rate for _, rate in rest}):
        at = {key: rest[key] for key in rest if key[1] == rate}
        live_ok, n = count_ok(at, live_k, tolerance)
        sim_ok, _ = count_ok(at, sim_k, tolerance)
        out.append({"rate": rate, "live": live_ok, "sim": sim_ok, "of": n})
    return out


def by_rate(pooled_rows: Sequence[Mapping[str, Any]], held_out: Sequence[Mapping[str, Any]],
            capacity_rps: float | None) -> list[dict[str, Any]]:
    """Per rate, ascending: its load (rate over the sweep's measured capacity, None where the rates
    were given), the pooled simulated figures within tolerance, and the held-out counts summed over
    the rounds, live and simulated."""
    out = []
    for rate in sorted({row["rate"] for row in pooled_rows}):
        checks = [m["ok"] for row in pooled_rows if row["rate"] == rate for m in row["metrics"].values()]
        held = [p for h in held_out for p in h["per_rate"] if p["rate"] == rate]
        out.append({"rate": rate, "load": rate / capacity_rps if capacity_rps else None,
                    "pooled_ok": sum(checks), "pooled_of": len(checks),
                    "held_out_live_ok": sum(p["live"] for p in held), "held_out_sim_ok": sum(p["sim"] for p in held),
                    "held_out_of": sum(p["of"] for p in held)})
    return out


def by_load_table(rows: Sequence[Mapping[str, Any]]) -> str:
    """Markdown: `by_rate`'s rows, one per rate."""
    body = [[f"{r['rate']:g}", "-" if r["load"] is None else f"{r['load']:.2f}",
             f"{r['pooled_ok']} / {r['pooled_of']}", f"{r['held_out_live_ok']} / {r['held_out_of']}",
             f"{r['held_out_sim_ok']} / {r['held_out_of']}"] for r in rows]
    return format_table(["rate req/s", "load", "simulated, pooled", "held out: live rounds", "held out: simulated"],
                        body)


def held_out_table(held_out: Sequence[Mapping[str, Any]]) -> str:
    """Markdown: per round, figures within tolerance of the other rounds' live pool, live round
    against simulated round, overall and per metric."""
    names = [name for name, _ in METRICS]
    body = []
    for h in held_out:
        line = [h["round"], f"{h['live_round_ok']} / {h['checks']}", f"{h['sim_round_ok']} / {h['checks']}"]
        line += [f"{h['per_metric'][n]['live']} / {h['per_metric'][n]['sim']}" for n in names]
        line.append(f"{h['sim_vs_own_live_ok']} / {h['checks']}")
        body.append(line)
    return format_table(["round", "live round", "simulated round"]
                        + [f"{n.replace('_s', '')} live / sim" for n in names]
                        + ["simulated vs its own live round"], body)

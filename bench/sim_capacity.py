"""The simulator's capacity for a live sweep's deployments, beside the capacity measured live.

    python -m bench.sim_capacity --live DIR/summary.json [--measurements hardware|own] [--seeds 1] [--stretch counts|flat]
        [--growth shared|own] [--host FORM]

`bench.compare --rates auto` sets its rates from the colocated deployment's capacity, measured
live by a closed loop (bench.capacity). Past that capacity a queue that drains and one that
does not are a few percent apart, so the first thing to ask of the simulator's figures at high
load is whether it puts the capacity where the live loop did. This serves the same closed loop
(same mix and seed; `--seeds N` adds N - 1 further draws of the mix, to show how much the draw
alone moves it) in the simulator, for every system of the sweep and every round, with the
measurements `bench.sim_fidelity` would use, and prints each capacity. Nothing is fitted.
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path
from typing import Any, Mapping, Sequence


from bench.capacity import steady_capacity
from bench.compare import DEFAULT_OUTPUT_TOKENS, capacity_workload
from bench.pooled_measurements import (DEFAULT_GROWTH, DEFAULT_STRETCH, GROWTH_FORMS, ROUND_FORMS, STRETCH_FORMS,
                                       hardware_only_error, round_measurements)
from bench.rate_rounds import round_summaries
from bench.sim_fidelity import (DEFAULT_HOST_FORM, HOST_FORMS, NO_STEPS_HOST_FORM, SCATTER_FORMS,
                                _default_model_dir, deployment_of, host_form_for, scattered_config, simulate_system,
                                step_model_from_calibration, sweep_system_dirs, systems_of)
from bench.step_scatter import sweep_scatter
from pd_serve.report import format_table


def simulated_capacity(label: str, deployment: Mapping[str, Any], cal: Mapping[str, Any], model: str,
                       output_tokens: int, num_requests: int | None = None, seed_offset: int = 0,
                       host_form: str = NO_STEPS_HOST_FORM,
                       scatter: Mapping[str, Sequence[float]] | None = None) -> float:
    """Req/s of `deployment`'s closed loop (bench.compare.capacity_workload) simulated on `cal`,
    the host in `host_form` (bench.sim_fidelity.HOST_FORMS; a scattering form's steps drawn from
    `scatter`, bench.step_scatter, from a seed of the mix's draw)."""
    wl, concurrency = capacity_workload(dict(deployment), output_tokens, num_requests, seed_offset)
    step_model = step_model_from_calibration(cal)
    config = scattered_config(label, deployment, cal, model, host_form, step_model, wl, scatter,
                              draw_seed=seed_offset, scatter_seed=seed_offset)
    records = simulate_system(config, label, step_model, wl).records
    return steady_capacity(records, concurrency, label).rps


def capacity_rows(live_path: Path, measurements: str = "hardware", seeds: int = 1,
                  model: str | None = None, stretch: str = DEFAULT_STRETCH,
                  host_form: str = NO_STEPS_HOST_FORM, growth: str = DEFAULT_GROWTH) -> list[list[str]]:
    """One row per system and round: the simulated capacity per draw of the mix."""
    if seeds < 1:
        raise ValueError(f"seeds must be >= 1, got {seeds}")
    live = json.loads(live_path.read_text())
    model = model or _default_model_dir()
    output_tokens = DEFAULT_OUTPUT_TOKENS
    # The live loop's length (32 requests before run 61, 128 since), where the sweep measured one.
    num_requests = (live.get("capacity") or {}).get("num_requests")
    rows = []
    summaries = round_summaries(live_path, live)
    try:
        per_round = round_measurements(summaries, systems_of(live), measurements, stretch, growth)
    except ValueError as error:
        raise ValueError(f"{live_path}: {error}") from None
    scatter = None
    if host_form in SCATTER_FORMS:  # the probe steps' scatter, pooled as the measurements are
        measured = [s.get("measured") or {} for s in summaries]
        scatter = sweep_scatter(live_path, live.get("round_dirs") or ["."], measured, systems_of(live), measurements)
    if measurements == "hardware":  # one pool for every round
        per_round = per_round[:1]
    for k, records in enumerate(per_round):
        for label, path in systems_of(live).items():
            if label not in records:
                continue
            deployment = deployment_of(summaries[k], label, path)  # the first round's for the pool
            caps = [simulated_capacity(label, deployment, records[label], model, output_tokens, num_requests, s,
                                       host_form, None if scatter is None else scatter[k].get(label))
                    for s in range(seeds)]
            spread = "" if seeds == 1 else f"{min(caps):.2f}-{max(caps):.2f} (median {statistics.median(caps):.2f})"
            rows.append([label, "all, pooled" if measurements == "hardware" else str(k), f"{caps[0]:.2f}", spread])
    return rows


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.sim_capacity", description=__doc__.splitlines()[0])
    ap.add_argument("--live", required=True, help="a bench.compare rates summary.json (one round or --rounds)")
    ap.add_argument("--measurements", choices=ROUND_FORMS, default="hardware",
                    help="the measurements pooled as bench.sim_fidelity pools them (hardware), or each round's own")
    ap.add_argument("--seeds", type=int, default=1, help="draws of the mix: the first is the live loop's")
    ap.add_argument("--stretch", choices=STRETCH_FORMS, default=None,
                    help="with --measurements hardware: the prefill's stretch as bench.sim_fidelity --stretch "
                         f"reads it ({DEFAULT_STRETCH} unless given)")
    ap.add_argument("--growth", choices=GROWTH_FORMS, default=None,
                    help="with --measurements hardware: a deployment's further decode streams priced as "
                         f"bench.sim_fidelity --growth prices them ({DEFAULT_GROWTH} unless given)")
    ap.add_argument("--host", choices=sorted(HOST_FORMS), default=None,
                    help=f"the host model's form, as bench.sim_fidelity --host (default {DEFAULT_HOST_FORM}, or "
                         f"{NO_STEPS_HOST_FORM} for a sweep that saved no engine steps)")
    args = ap.parse_args(argv)
    wrong = hardware_only_error(args.measurements, {"stretch": args.stretch, "growth": args.growth})
    if wrong:
        print(f"bench.sim_capacity: {wrong}", file=sys.stderr)
        return 2
    live_path = Path(args.live)
    live = json.loads(live_path.read_text())
    try:
        args.host = host_form_for(args.host, sweep_system_dirs(live_path, live), "bench.sim_capacity")
        rows = capacity_rows(live_path, args.measurements, args.seeds, stretch=args.stretch or DEFAULT_STRETCH,
                             host_form=args.host, growth=args.growth or DEFAULT_GROWTH)
    except (ValueError, FileNotFoundError) as err:  # a record or folder without what the form reads, named
        print(f"bench.sim_capacity: {err}", file=sys.stderr)
        return 2
    cap = live.get("capacity")
    print("live: " + (f"{cap['system']} {cap['rps']:.2f} req/s (closed loop of {cap['concurrency']}, "
                      f"{cap['num_requests']} requests, steady part {cap['steady_s']:.1f} s)"
                      if cap else "the sweep's rates were given, not measured"))
    print(format_table(["system", "round", "simulated req/s, the live loop's draw", f"over {args.seeds} draws"], rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())

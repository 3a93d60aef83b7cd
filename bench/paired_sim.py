"""The simulator's answer to a paired run: does it call the winner, and by how much?

`python -m bench.paired_sim --live DIR/summary.json` replays a `bench.paired` run: the same
workload at each rate, once with the deployment's own policy (route auto) and once with the
colocated policy on the same workers (route colocated), on the measurements the live deployment
took before its pairs. It sets the simulated requests within both SLOs and the simulated
auto / colocated goodput ratio beside the live pairs'.

A ratio is what a user of the simulator acts on (which system, and is it worth it), and within a
pair the host's drift cancels out of the live one; the absolute figures are `bench.sim_fidelity`'s.
`--speed probe` simulates each run of each pair on its own: the measurements scaled by how much
slower the host ran during that run than while they were measured (`bench.speed_scaled`, from
the run's `bench.host_speed` samples); the simulated counts are then the pairs' medians and the
ratio is pooled over the pairs, as the live one is.
"""
from __future__ import annotations

import argparse
import copy
import json
import statistics
import sys
from pathlib import Path
from typing import Any, Mapping

from bench.compare import DEFAULT_OUTPUT_TOKENS, load_yaml, rates_workload
from bench.fidelity_ranking import TIE, order
from bench.host_speed import read_samples
from bench.metrics import SloSpec, num_within_slos, pooled_summary, write_json, write_markdown
from bench.paired import ROUTES
from bench.speed_scaled import scaled_calibration, slowdowns
from bench.sim_fidelity import (DEFAULT_HOST_FORM, HOST_FORMS, NO_STEPS_HOST_FORM, _default_model_dir,
                                host_form_for, sim_config_for, simulate_system, step_model_from_calibration)


def route_configs(deployment: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """Route -> the deployment config that serves every request on it: auto is the deployment
    as it is; colocated is its workers under the colocated policy (the router's route policy)."""
    colocated = copy.deepcopy(dict(deployment))
    colocated["scheduler"] = {k: v for k, v in colocated.get("scheduler", {}).items() if k != "params"}
    colocated["scheduler"]["policy"] = "colocated"
    return {"colocated": colocated, "auto": copy.deepcopy(dict(deployment))}


MEASUREMENTS = {"before": "measured", "after": "measured_after"}  # --measurements -> summary key
SPEEDS = ("none", "probe")


def pair_slowdowns(live: Mapping[str, Any], live_dir: Path,
                   measurements: str = "before") -> list[list[dict[str, float]]]:
    """Per rate, per pair, per route: how many times slower the host ran during that run than
    while the deployment was measured (`measurements`), from the run's host probe."""
    if not live.get("host_speed"):
        raise ValueError("this paired run was recorded without the host probe (bench.paired runs it since "
                         "stop 34): simulate it with --speed none")
    reference = (live.get(MEASUREMENTS[measurements]) or {}).get("window_s")
    if not reference:
        raise ValueError(f"the measurements {measurements} the pairs have no window_s to compare the host with")
    samples = read_samples(live_dir / live["host_speed"])
    # each pair as speed_scaled.slowdowns takes a round: (route, rate) -> that run's window
    num_pairs = min((len(row["windows_s"][route]) for row in live["rows"] for route in ROUTES), default=0)
    runs = [{(route, row["rate"]): tuple(row["windows_s"][route][p]) for row in live["rows"] for route in ROUTES}
            for p in range(num_pairs)]
    per_pair = slowdowns(samples, runs, lambda p, route: [reference], "pair")
    return [[{route: per_pair[p][(route, row["rate"])] for route in ROUTES} for p in range(num_pairs)]
            for row in live["rows"]]


def simulated_rows(live: Mapping[str, Any], deployment: Mapping[str, Any], model: str,
                   host_form: str = NO_STEPS_HOST_FORM, measurements: str = "before",
                   slowdowns: list[list[dict[str, float]]] | None = None) -> list[dict[str, Any]]:
    """Per live rate: each route's simulated requests within both SLOs and goodput, and the
    simulated auto / colocated ratio beside the live pooled one and its per-pair range.
    `measurements`: the deployment's measurements from before the pairs or after them.
    `slowdowns` (pair_slowdowns): simulate each run of each pair on the measurements scaled by
    its own; the counts are then the pairs' medians and the goodputs pooled over the pairs."""
    key = MEASUREMENTS[measurements]
    if key not in live:
        raise ValueError(f"the paired summary holds no measurements of its deployment {measurements} the "
                         "pairs: run bench.paired without --no-measure")
    cal, slo = live[key], SloSpec()
    routes = route_configs(deployment)
    rows = []
    for i, (rate, live_row) in enumerate(zip(live["rates"], live["rows"])):
        workload = rates_workload(rate, int(live["num_requests"]), int(live.get("output_tokens", DEFAULT_OUTPUT_TOKENS)))
        factors = slowdowns[i] if slowdowns is not None else [{route: None for route in ROUTES}]
        runs: dict[str, list] = {route: [] for route in ROUTES}
        for pair in factors:
            for route in ROUTES:
                run_cal = cal if pair[route] is None else scaled_calibration(cal, pair[route])
                config = sim_config_for(route, routes[route], run_cal, model, host_form)
                records = simulate_system(config, route, step_model_from_calibration(run_cal), workload).records
                runs[route].append(list(records))
        row: dict[str, Any] = {"rate": rate}
        if slowdowns is not None:
            row["host_slowdowns"] = factors
        for route in ROUTES:
            row[f"{route}_ok_sim"] = statistics.median(num_within_slos(r, slo) for r in runs[route])
            row[f"{route}_ok_live"] = statistics.median(live_row[f"{route}_ok"])  # the pairs' middle
            row[f"{route}_goodput_sim"] = pooled_summary(runs[route], slo)["goodput_rps"] or 0.0
        base = row["colocated_goodput_sim"]
        row["ratio_sim"] = row["auto_goodput_sim"] / base if base else None
        row["ratio_live"] = live_row["auto_vs_colocated"]
        pair_ratios = [r for r in live_row["pair_ratios"] if r is not None]
        row["ratio_live_pairs"] = [min(pair_ratios), max(pair_ratios)] if pair_ratios else None
        rows.append(row)
    return rows


def same_winner(ratio_live: float | None, ratio_sim: float | None, tie: float = TIE) -> str:
    """Whether the simulated auto / colocated ratio calls the live winner: "tie live" where the
    live ratio lies within `tie` of 1 (any simulated answer matches it, as `bench.fidelity_ranking`
    scores a pair), else "yes" or "no"; "-" where either ratio is missing. Without the band a
    live x1.004 against a simulated x0.998 read as a wrong call."""
    if ratio_live is None or ratio_sim is None:
        return "-"
    live = order(ratio_live, 1.0, tie)
    if live == 0:
        return "tie live"
    return "yes" if order(ratio_sim, 1.0) == live else "no"


def rows_markdown(rows: list[dict[str, Any]], num_requests: int) -> str:
    def fmt(v: Any) -> str:
        return "-" if v is None else f"{v:.3f}" if isinstance(v, float) else str(v)

    def count(v: float) -> str:
        return f"{v:g}"
    header = ["rate (req/s)", f"colocated within both SLOs (of {num_requests}) live median / sim",
              "auto live median / sim", "auto / colocated live (pairs' range)", "sim", "same winner"]
    body = []
    for r in rows:
        live_range = r["ratio_live_pairs"]
        body.append([f"{r['rate']:g}", f"{count(r['colocated_ok_live'])} / {count(r['colocated_ok_sim'])}",
                     f"{count(r['auto_ok_live'])} / {count(r['auto_ok_sim'])}",
                     fmt(r["ratio_live"]) + (f" ({live_range[0]:.2f}-{live_range[1]:.2f})" if live_range else ""),
                     fmt(r["ratio_sim"]), same_winner(r["ratio_live"], r["ratio_sim"])])
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    return "\n".join(lines + ["| " + " | ".join(cells) + " |" for cells in body])


def deployment_of(live: Mapping[str, Any]) -> dict[str, Any]:
    """The deployment the pairs ran on: as `bench.paired` recorded it (since stop 53), else its
    config file as it reads now."""
    recorded = live.get("deployment")
    return copy.deepcopy(recorded) if recorded is not None else load_yaml(live["config"])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.paired_sim", description=__doc__.splitlines()[0])
    ap.add_argument("--live", required=True, help="a bench.paired summary.json")
    ap.add_argument("--host", default=None, choices=sorted(HOST_FORMS),
                    help=f"the simulator's host form (bench.sim_fidelity --host; default {NO_STEPS_HOST_FORM}: "
                         f"bench.paired saves no engine steps for the default, {DEFAULT_HOST_FORM}, to scatter by)")
    ap.add_argument("--measurements", default="before", choices=sorted(MEASUREMENTS),
                    help="the deployment's measurements from before the pairs or after them")
    ap.add_argument("--speed", default="none", choices=SPEEDS,
                    help="probe: simulate each run of each pair on the measurements scaled by the host's "
                         "slowdown during it (bench.host_speed)")
    ap.add_argument("--out", help="write the rows as JSON here, and the table beside it as .md")
    args = ap.parse_args(argv)
    live_path = Path(args.live)
    if not live_path.is_file():
        ap.error(f"no such file: {live_path}")
    live = json.loads(live_path.read_text())
    if live.get("experiment") != "paired":
        ap.error(f"{live_path} is not a bench.paired summary")
    args.host = host_form_for(args.host, [live_path.parent], "bench.paired_sim")
    try:
        slowdowns = None if args.speed == "none" else pair_slowdowns(live, live_path.parent, args.measurements)
        rows = simulated_rows(live, deployment_of(live), _default_model_dir(), args.host, args.measurements,
                              slowdowns)
    except ValueError as err:
        ap.error(str(err))
    table = rows_markdown(rows, int(live["num_requests"]))
    print(table)
    if args.out:
        write_json(args.out, {"live": str(live_path), "host_form": args.host, "measurements": args.measurements,
                              "speed": args.speed, "rows": rows})
        write_markdown(Path(args.out).with_suffix(".md"), table)
    return 0


if __name__ == "__main__":
    sys.exit(main())

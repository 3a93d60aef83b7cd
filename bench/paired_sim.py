"""The simulator's answer to a paired run: does it call the winner, and by how much?

`python -m bench.paired_sim --live DIR/summary.json` replays a `bench.paired` run: the same
workload at each rate, once with the deployment's own policy (route auto) and once with the
colocated policy on the same workers (route colocated), on the measurements the live deployment
took before its pairs. It sets the simulated requests within both SLOs and the simulated
auto / colocated goodput ratio beside the live pairs'.

A ratio is what a user of the simulator acts on (which system, and is it worth it), and within a
pair the host's drift cancels out of the live one; the absolute figures are `bench.sim_fidelity`'s.
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
from bench.metrics import SloSpec, num_within_slos, summarize, write_json, write_markdown
from bench.paired import ROUTES
from bench.sim_fidelity import (DEFAULT_HOST_FORM, HOST_FORMS, _default_model_dir, sim_config_for,
                                simulate_system, step_model_from_calibration)


def route_configs(deployment: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """Route -> the deployment config that serves every request on it: auto is the deployment
    as it is; colocated is its workers under the colocated policy (the router's route policy)."""
    colocated = copy.deepcopy(dict(deployment))
    colocated["scheduler"] = {k: v for k, v in colocated.get("scheduler", {}).items() if k != "params"}
    colocated["scheduler"]["policy"] = "colocated"
    return {"colocated": colocated, "auto": copy.deepcopy(dict(deployment))}


MEASUREMENTS = {"before": "measured", "after": "measured_after"}  # --measurements -> summary key


def simulated_rows(live: Mapping[str, Any], deployment: Mapping[str, Any], model: str,
                   host_form: str = DEFAULT_HOST_FORM, measurements: str = "before") -> list[dict[str, Any]]:
    """Per live rate: each route's simulated requests within both SLOs and goodput, and the
    simulated auto / colocated ratio beside the live pooled one and its per-pair range.
    `measurements`: the deployment's measurements from before the pairs or after them."""
    key = MEASUREMENTS[measurements]
    if key not in live:
        raise ValueError(f"the paired summary holds no measurements of its deployment {measurements} the "
                         "pairs: run bench.paired without --no-measure")
    cal, slo = live[key], SloSpec()
    step_model = step_model_from_calibration(cal)
    configs = {route: sim_config_for(route, cfg, cal, model, host_form) for route, cfg in route_configs(deployment).items()}
    rows = []
    for rate, live_row in zip(live["rates"], live["rows"]):
        workload = rates_workload(rate, int(live["num_requests"]), int(live.get("output_tokens", DEFAULT_OUTPUT_TOKENS)))
        row: dict[str, Any] = {"rate": rate}
        for route in ROUTES:
            records = list(simulate_system(configs[route], route, step_model, workload).records)
            row[f"{route}_ok_sim"] = num_within_slos(records, slo)
            row[f"{route}_ok_live"] = statistics.median(live_row[f"{route}_ok"])  # the pairs' middle
            row[f"{route}_goodput_sim"] = summarize(records, slo)["goodput_rps"] or 0.0
        base = row["colocated_goodput_sim"]
        row["ratio_sim"] = row["auto_goodput_sim"] / base if base else None
        row["ratio_live"] = live_row["auto_vs_colocated"]
        pair_ratios = [r for r in live_row["pair_ratios"] if r is not None]
        row["ratio_live_pairs"] = [min(pair_ratios), max(pair_ratios)] if pair_ratios else None
        rows.append(row)
    return rows


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
        same = None if r["ratio_sim"] is None or r["ratio_live"] is None else \
            (r["ratio_sim"] > 1) == (r["ratio_live"] > 1)
        body.append([f"{r['rate']:g}", f"{count(r['colocated_ok_live'])} / {r['colocated_ok_sim']}",
                     f"{count(r['auto_ok_live'])} / {r['auto_ok_sim']}",
                     fmt(r["ratio_live"]) + (f" ({live_range[0]:.2f}-{live_range[1]:.2f})" if live_range else ""),
                     fmt(r["ratio_sim"]), "-" if same is None else ("yes" if same else "no")])
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    return "\n".join(lines + ["| " + " | ".join(cells) + " |" for cells in body])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.paired_sim", description=__doc__.splitlines()[0])
    ap.add_argument("--live", required=True, help="a bench.paired summary.json")
    ap.add_argument("--host", default=DEFAULT_HOST_FORM, choices=sorted(HOST_FORMS))
    ap.add_argument("--measurements", default="before", choices=sorted(MEASUREMENTS),
                    help="the deployment's measurements from before the pairs or after them")
    ap.add_argument("--out", help="write the rows as JSON here, and the table beside it as .md")
    args = ap.parse_args(argv)
    live_path = Path(args.live)
    if not live_path.is_file():
        ap.error(f"no such file: {live_path}")
    live = json.loads(live_path.read_text())
    if live.get("experiment") != "paired":
        ap.error(f"{live_path} is not a bench.paired summary")
    try:
        rows = simulated_rows(live, load_yaml(live["config"]), _default_model_dir(), args.host, args.measurements)
    except ValueError as err:
        ap.error(str(err))
    table = rows_markdown(rows, int(live["num_requests"]))
    print(table)
    if args.out:
        write_json(args.out, {"live": str(live_path), "host_form": args.host,
                              "measurements": args.measurements, "rows": rows})
        write_markdown(Path(args.out).with_suffix(".md"), table)
    return 0


if __name__ == "__main__":
    sys.exit(main())

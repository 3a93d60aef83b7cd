"""Two routing policies on one deployment, run by turns: a paired A/B that host noise cannot fake.

`python -m bench.paired --rates auto --loads 0.9,1.1 --num-requests 240 --pairs 4 --out DIR`
deploys configs/adaptive.yaml once and serves the rates experiment's workload (bench.compare) at
each rate twice per pair: once with every request on route "colocated" (the colocated policy:
the least loaded worker, as configs/colocated.yaml routes) and once on route "auto" (the
deployment's own policy, adaptive). The two runs of a pair are back to back, on the same
engines, with the same arrival times and lengths (distinct prompts, so neither rides the other's
prefix cache), and the pairs alternate which goes first.

Why: `bench.compare` deploys each system afresh and runs them minutes apart. On this shared
2-core host the same colocated deployment met both SLOs for 79 of 240 requests in one round and
130 in the next at the same rate (run 58, `results/rates_v61`), so a policy's 5-10% can be lost
in the round-to-round spread. Here the only difference between a pair's runs is the route
chosen for each request, and each pair's ratio is taken within a few minutes.

Writes DIR/pair_<k>/<route>/rate_<r>/ (records, summary) and DIR/summary.json + summary.md:
per rate, the requests within both SLOs in each pair, the pooled goodput of each route, and
auto's goodput over colocated's, pooled and per pair. Unless --no-measure, summary.json also
holds what the simulator needs of the deployment, measured before the pairs and again after
them (bench.sim_fidelity.measure_deployment; the two show how far the host drifted), so
`python -m bench.paired_sim --live DIR/summary.json` can set the simulator's ratio beside the
live one. `bench.host_speed` times its kernel through the whole run (DIR/host_speed.jsonl; each
measurement records its window), and each row gives the kernel's median during every run, per
route and pair: a pair whose one run met a slower host is told apart from a policy that lost
(`bench.paired_sim --speed probe` scales each run's measurements by it).
"""
from __future__ import annotations

import argparse
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import Any, Sequence

from bench.capacity import parse_loads, rates_at, steady_capacity
from bench.compare import (DEFAULT_OUTPUT_TOKENS, HOST_SPEED_FILE, capacity_workload, load_yaml, measured_now,
                           rates_workload)
from bench.host_speed import HostSpeedProbe, Sample, read_samples, window_ms
from bench.metrics import RequestRecord, SloSpec, num_within_slos, pooled_summary, write_summary
from bench.run import run_workload, write_run
from bench.simulate import parse_rates
from bench.speed_scaled import run_window

ROUTES = ("colocated", "auto")  # the baseline first: its goodput is the ratios' denominator


def route_order(pair: int) -> tuple[str, str]:
    """Which route runs first alternates with the pair, so neither always meets the host second."""
    return ROUTES if pair % 2 == 0 else ROUTES[::-1]


def paired_rows(runs: dict[tuple[int, str, float], list[RequestRecord]], rates: Sequence[float],
                slo: SloSpec, samples: Sequence[Sample] = ()) -> list[dict[str, Any]]:
    """One row per rate: each route's requests within both SLOs per pair and pooled goodput
    (over the pairs' summed durations), and auto's goodput over colocated's, pooled and per pair.
    `samples` (bench.host_speed's): each run's window and the kernel's median time in it, per
    route and pair: the host can drift by half within a pair (paired_v5: 1.74 ms for one route's
    run, 2.44 for the other's a minute before)."""
    pairs = sorted({k for k, _, _ in runs})
    rows = []
    for rate in rates:
        row: dict[str, Any] = {"rate": rate}
        for route in ROUTES:
            per_pair = [runs[(k, route, rate)] for k in pairs]
            row[f"{route}_ok"] = [num_within_slos(recs, slo) for recs in per_pair]
            row[f"{route}_goodput_rps"] = pooled_summary(per_pair, slo)["goodput_rps"] or 0.0
        base = row["colocated_goodput_rps"]
        row["auto_vs_colocated"] = row["auto_goodput_rps"] / base if base else None
        row["pair_ratios"] = [a / c if c else None for a, c in zip(row["auto_ok"], row["colocated_ok"])]
        row["auto_wins"] = sum(a > c for a, c in zip(row["auto_ok"], row["colocated_ok"]))
        row["auto_losses"] = sum(a < c for a, c in zip(row["auto_ok"], row["colocated_ok"]))
        if samples:
            row["windows_s"] = {route: [list(run_window(runs[(k, route, rate)])) for k in pairs] for route in ROUTES}
            row["kernel_ms"] = {route: [window_ms(samples, [w]) for w in ws] for route, ws in row["windows_s"].items()}
        rows.append(row)
    return rows


def rows_markdown(rows: Sequence[dict[str, Any]], num_requests: int) -> str:
    lines = [f"| rate (req/s) | colocated within both SLOs (of {num_requests}) | auto | auto / colocated, "
             f"pooled | per pair | auto won / lost | host kernel ms per pair, colocated / auto |",
             "|---|---|---|---|---|---|---|"]
    for r in rows:
        ratio = "-" if r["auto_vs_colocated"] is None else f"{r['auto_vs_colocated']:.3f}"
        per_pair = ", ".join("-" if x is None else f"{x:.2f}" for x in r["pair_ratios"])
        ms = r.get("kernel_ms") or {}
        kernel = ", ".join(" / ".join("-" if x is None else f"{x:.2f}" for x in pair)
                           for pair in zip(*(ms[route] for route in ROUTES))) if ms else "-"
        lines.append(f"| {r['rate']:g} | {', '.join(map(str, r['colocated_ok']))} | "
                     f"{', '.join(map(str, r['auto_ok']))} | {ratio} | {per_pair} | "
                     f"{r['auto_wins']} / {r['auto_losses']} | {kernel} |")
    return "\n".join(lines)


def measure_capacity_on(dep: Any, cfg: dict, output_tokens: int, out: Path, slo: SloSpec):
    """The deployment's capacity on route "colocated" (bench.compare.capacity_workload)."""
    wl, concurrency = capacity_workload(cfg, output_tokens)
    records = run_workload(dep.stream, wl, dep.vocab_size, "colocated", salt=1)
    write_run(out / "capacity", "colocated capacity", records, slo)
    return steady_capacity(records, concurrency, "colocated")


def run_pairs(dep: Any, rates: Sequence[float], pairs: int, num_requests: int, output_tokens: int,
              out: Path, slo: SloSpec) -> dict[tuple[int, str, float], list[RequestRecord]]:
    """Serve the rates workload at each rate on both routes, `pairs` times; each run's records
    under out/pair_<k>/<route>/rate_<r>/. Every run gets its own salt, so no prompt repeats."""
    runs: dict[tuple[int, str, float], list[RequestRecord]] = {}
    salt = 100
    for k in range(pairs):
        for rate in rates:
            wl = replace(rates_workload(rate, num_requests, output_tokens), name=f"rate={rate:g}")
            for route in route_order(k):
                salt += 1
                t0 = time.perf_counter()
                recs = run_workload(dep.stream, wl, dep.vocab_size, route, progress=False, salt=salt)
                runs[(k, route, rate)] = recs
                write_run(out / f"pair_{k}" / route / f"rate_{rate:g}", f"{route} rate={rate:g}", recs, slo)
                print(f"pair {k + 1}/{pairs} rate {rate:g} {route}: {num_within_slos(recs, slo)} of "
                      f"{len(recs)} within both SLOs ({time.perf_counter() - t0:.0f} s)", file=sys.stderr, flush=True)
    return runs


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.paired", description=__doc__.splitlines()[0])
    ap.add_argument("--config", default="configs/adaptive.yaml",
                    help="a deployment whose own policy (route auto) is set against route colocated")
    ap.add_argument("--rates", default="auto",
                    help="req/s separated by commas, or 'auto' for --loads of the capacity measured on "
                         "route colocated on this deployment")
    ap.add_argument("--loads", default="0.9,1.1")
    ap.add_argument("--num-requests", type=int, default=240)
    ap.add_argument("--output-tokens", type=int, default=DEFAULT_OUTPUT_TOKENS)
    ap.add_argument("--pairs", type=int, default=4, help="runs of each route at each rate")
    ap.add_argument("--out", default="results/paired")
    ap.add_argument("--no-measure", action="store_true",
                    help="skip measuring the deployment for the simulator before and after the pairs "
                         "(bench.paired_sim; about a minute each)")
    args = ap.parse_args(argv)
    if args.pairs < 1 or args.num_requests < 1:
        ap.error("--pairs and --num-requests must be >= 1")
    try:
        fixed = None if args.rates == "auto" else parse_rates(args.rates)
        loads = parse_loads(args.loads) if fixed is None else None
    except ValueError as err:
        ap.error(str(err))
    cfg = load_yaml(args.config)
    slo, out = SloSpec(), Path(args.out)

    from pd_serve import deploy
    from pd_serve.deployment import init_ray
    init_ray()
    with HostSpeedProbe(out / HOST_SPEED_FILE), deploy(cfg) as dep:
        print(f"{cfg.get('name')}: ready in {dep.start_s:.0f}s", file=sys.stderr, flush=True)
        # the configuration as it ran, every default filled in: bench.paired_sim replays this, not
        # the config file as it reads later (as bench.compare records `deployments`)
        origin: dict[str, Any] = {"deployment": dep.config.model_dump(mode="json")}
        if not args.no_measure:
            origin["measured"] = measured_now(dep)  # what bench.paired_sim replays the pairs with
        if fixed is None:
            capacity = measure_capacity_on(dep, cfg, args.output_tokens, out, slo)
            rates = rates_at(loads, capacity)
            origin.update(capacity=capacity.to_dict(), loads=loads)
            print(capacity.line() + "; rates " + ", ".join(f"{r:g}" for r in rates), file=sys.stderr, flush=True)
        else:
            rates = fixed
        runs = run_pairs(dep, rates, args.pairs, args.num_requests, args.output_tokens, out, slo)
        if not args.no_measure:
            origin["measured_after"] = measured_now(dep)
    probe = out / HOST_SPEED_FILE  # absent only if the probe's process never started: no kernel column then
    rows = paired_rows(runs, rates, slo, read_samples(probe) if probe.exists() else ())
    table = rows_markdown(rows, args.num_requests)
    write_summary(out, {"experiment": "paired", "config": args.config, "rates": rates, "pairs": args.pairs,
                        "num_requests": args.num_requests, "output_tokens": args.output_tokens, **origin,
                        "host_speed": HOST_SPEED_FILE, "rows": rows}, table)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Colocated vs disaggregated vs adaptive on one machine and one workload, one after another.

Experiments (`--experiment`):
  rates        a Poisson mixed-length workload at several rates on configs/colocated.yaml,
               configs/disaggregated.yaml, configs/adaptive.yaml (2 workers, adaptive) and
               configs/hybrid.yaml (prefill + both, adaptive): goodput table
  mixed-batch  the seeds' experiment: 8 x 512 against 1 x 4096 + 7 x 512, eight at once, on one
               engine without chunking, one engine with chunking, disaggregated, and adaptive
  chunk-sweep  one engine, max_num_batched_tokens 4096/2048/1024/512, with and without
               long_prefill_token_threshold: long-request TTFT, short-request p99 TTFT and
               throughput relative to the largest chunk, beside the seed's table

`python -m bench.compare --experiment rates --rates 0.5,1,2 --out results/compare`
writes summary.json, summary.md and PNG plots into --out, and prints the tables with ratios.
`--rates auto --loads 0.25,0.5,0.75` first measures the colocated baseline's capacity on this
host for the experiment's request mix (bench/capacity.py) and serves each load as that fraction
of it: fixed rates are light load on one host and overload on another.
`--rounds 2` runs the whole rates sweep twice, each round deploying every system afresh in a
rotated order (into --out/round_<k>), and pools the rounds (bench/rate_rounds.py): one noisy
minute then moves one round's counts, which the pooled table shows beside its goodput.
`--systems colocated,adaptive,tuned=my.yaml` serves only those systems (a name above, or
label=config for a deployment of your own; at least one baseline, which the ratios are over).
"""
from __future__ import annotations

import argparse
import collections
import copy
import statistics
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import Any, Callable

import yaml

from bench.capacity import (CONCURRENCY_PER_ENGINE, REQUESTS_PER_SLOT, Capacity, parse_loads, rates_at,
                            steady_capacity)
from bench.engine_stalls import STALLS_FILE, STEPS_FILE, stall_words, stalls_table, sweep_stalls, write_stalls
from bench.host_speed import HostSpeedProbe
from bench.metrics import (SloSpec, can_plot, markdown_table, plot_rate_sweep, plot_ttft_cdf,
                           summarize, write_json, write_markdown, write_summary)
from bench.rate_rounds import comparison_rows, pool_rounds, rotated
from bench.run import run_workload, write_run
from bench.simulate import parse_rates
from bench.workloads import Workload, make_workload, mixed_batch, uniform_batch
from pd_serve.gc_pauses import GcPauses

HOST_SPEED_FILE = "host_speed.jsonl"  # the host's speed through the run (bench.host_speed), in --out
SEED_CHUNK_TABLE = {  # max_num_batched_tokens: (long TTFT ms, short p99 TTFT ms, throughput %)
    4096: (320, 720, 100), 2048: (580, 420, 96), 1024: (1050, 240, 91), 512: (2100, 160, 84)}
SEED_MIXED = {"uniform": {"mean": 95, "p50": 90, "p99": 130}, "mixed": {"mean": 380, "p50": 310, "p99": 760}}


def load_yaml(path: str) -> dict:
    return yaml.safe_load(Path(path).read_text())


def single_engine(chunk: int | None, long_threshold: int = 0) -> dict:
    """One worker that prefills and decodes; `chunk=None` turns chunked prefill off."""
    engine: dict[str, Any] = {"max_model_len": 8192, "block_size": 32, "kv_cache_gib": 1, "max_num_seqs": 8}
    if chunk is None:
        engine.update(enable_chunked_prefill=False, max_num_batched_tokens=8192)
    else:
        engine.update(max_num_batched_tokens=chunk, long_prefill_token_threshold=long_threshold)
    return {"name": f"single-{chunk or 'nochunk'}-{long_threshold}", "model": "default",
            "workers": {"both": {"count": 1, "engine": engine}},
            "transfer": {"probe_at_start": False, "handshake_warmup": False},
            "scheduler": {"policy": "colocated", "calibrate": False}}


def baseline(path: str) -> dict:
    """A shipped config as a fixed-policy baseline: no calibration or probe needed."""
    cfg = load_yaml(path)
    cfg["scheduler"] = {**cfg.get("scheduler", {}), "calibrate": False}
    if cfg["scheduler"].get("policy") == "adaptive":
        raise ValueError(f"{path} is adaptive; use it as is")
    cfg.setdefault("transfer", {})["probe_at_start"] = False
    return cfg


def run_config(cfg: dict, workloads: list, slo: SloSpec,
               on_ready: Callable[[Any], None] | None = None,
               on_done: Callable[[Any], None] | None = None, salt_base: int = 0) -> dict[str, list]:
    """Deploy once, call `on_ready(deployment)` (while it is idle), run each workload in turn
    (distinct prompts: salt `salt_base` + its position + 1), call `on_done(deployment)`, shut down."""
    from pd_serve import deploy

    out = {}
    t0 = time.perf_counter()
    with deploy(copy.deepcopy(cfg)) as dep:
        print(f"  {cfg.get('name')}: ready in {dep.start_s:.0f}s", file=sys.stderr, flush=True)
        if on_ready is not None:
            on_ready(dep)
        for k, wl in enumerate(workloads):
            out[wl.name] = run_workload(dep.stream, wl, dep.vocab_size, "auto", salt=salt_base + k + 1)
        if on_done is not None:
            on_done(dep)
    print(f"  {cfg.get('name')}: done in {time.perf_counter() - t0:.0f}s", file=sys.stderr, flush=True)
    return out


def process_reports(dep: Any, client: GcPauses) -> tuple[dict[str, dict], dict[str, dict]]:
    """Every process's garbage-collection pauses (pd_serve/gc_pauses.py: this client's since
    `client` was installed, the router's and each worker's since they started) and the router's
    and each worker's event-loop stalls (pd_serve/loop_stalls.py), from one router status."""
    import ray

    router = dep.status()
    gc = {"client": client.summary(), "router": router["gc"],
          **{wid: ray.get(w.gc_pauses.remote()) for wid, w in dep.workers.items()}}
    loop = {"router": router["loop"], **{wid: ray.get(w.loop_stalls.remote()) for wid, w in dep.workers.items()}}
    return gc, loop


def write_predictions(dep: Any, path: Path) -> None:
    """The router's log of every request it predicted (for `bench.prediction_split`)."""
    import ray

    write_json(path, ray.get(dep.router.prediction_errors.remote()))


def write_engine_steps(dep: Any, path: Path) -> None:
    """Every step each engine timed since it started (vLLM's iteration details, kept by
    pd_serve.engine_stats): what `bench.engine_stalls` finds the stalls in."""
    import ray

    write_json(path, {wid: {"role": dep.infos[wid].role if wid in dep.infos else None,
                            "steps": ray.get(w.steps.remote())} for wid, w in dep.workers.items()})


def loop_line(report: dict[str, dict]) -> str:
    """Each process's stall count and longest stall, and the OS's word for its kept stalls
    (pd_serve/os_clocks.py: 'no cpu', 'steal', 'ran', 'other thread', 'page faults', 'asleep'), on one line."""
    def verdicts(r: dict) -> str:
        counts = collections.Counter(s.get("os_verdict") for s in r.get("stalls", []) if s.get("os_verdict"))
        return "".join(f", {word} {n}" for word, n in counts.most_common())
    return "; ".join(f"{name} {r['num_stalls']} (longest {r['max_stall_s'] * 1e3:.0f} ms{verdicts(r)})"
                     for name, r in report.items())


def gc_line(report: dict[str, dict]) -> str:
    """The longest pause and the full collections of each process, on one line."""
    return "; ".join(f"{name} {r['max_pause_s'] * 1e3:.0f} ms ({r['collections'].get('2', {}).get('count', 0)} full)"
                     for name, r in report.items())


# ---- experiments -------------------------------------------------------------------------------

# The rates experiment (bench.sim_fidelity replays it in the simulator): label -> config, the
# fixed-policy ones run as baselines; its length buckets (weight, min tokens, max tokens).
RATES_SYSTEMS = {"colocated": "configs/colocated.yaml", "disaggregated": "configs/disaggregated.yaml",
                 "adaptive": "configs/adaptive.yaml", "hybrid adaptive": "configs/hybrid.yaml"}
RATES_BASELINES = ("colocated", "disaggregated")
RATES_BUCKETS = {"short": (0.75, 64, 512), "medium": (0.2, 1024, 2048), "long": (0.05, 3000, 4000)}
RATES_SEED = 7
DEFAULT_OUTPUT_TOKENS = 32


def rates_workload(rate: float, num_requests: int, output_tokens: int = DEFAULT_OUTPUT_TOKENS) -> Workload:
    """The Poisson bucket mix the rates experiment serves at `rate`."""
    return make_workload("bucket_mix", num_requests=num_requests, rate_per_s=rate, seed=RATES_SEED,
                         output_tokens=output_tokens, buckets=RATES_BUCKETS)


def parse_systems(text: str) -> dict[str, str]:
    """`--systems`: label -> config path, in the order given. Each item is a name of
    RATES_SYSTEMS or `label=path` (a config of one's own); at least one baseline."""
    systems: dict[str, str] = {}
    for item in (i.strip() for i in text.split(",")):
        label, sep, path = (part.strip() for part in item.partition("="))
        if not sep:
            if label not in RATES_SYSTEMS:
                raise ValueError(f"--systems: unknown system {label!r}; the named ones are "
                                 f"{', '.join(RATES_SYSTEMS)}, or give label=config.yaml")
            path = RATES_SYSTEMS[label]
        elif not label or not Path(path).is_file():
            raise ValueError(f"--systems: {item!r} must be label=path of an existing config file")
        if label in systems:
            raise ValueError(f"--systems: {label!r} given twice")
        systems[label] = path
    if not any(label in RATES_BASELINES for label in systems):
        raise ValueError(f"--systems: name at least one baseline ({', '.join(RATES_BASELINES)}); "
                         f"the table's ratios are over the better of them")
    return systems


def rates_systems(paths: dict[str, str] = RATES_SYSTEMS) -> dict[str, dict]:
    """The rates experiment's deployments (label -> config path). Every one calibrates its
    step-time model at start-up (the baselines' fixed policies do not use it):
    `bench.sim_fidelity` simulates each system with what its own deployment measured, minutes
    before the live run."""
    systems = {label: baseline(path) if label in RATES_BASELINES else load_yaml(path)
               for label, path in paths.items()}
    for cfg in systems.values():
        cfg.setdefault("scheduler", {})["calibrate"] = True
    return systems


def present_baselines(systems: dict[str, str]) -> tuple[str, ...]:
    """The baselines among `systems` (parse_systems guarantees one)."""
    return tuple(label for label in RATES_BASELINES if label in systems)


def capacity_workload(cfg: dict, output_tokens: int, num_requests: int | None = None,
                      seed_offset: int = 0) -> tuple[Workload, int]:
    """The closed loop that measures a deployment's capacity on the rates experiment's mix:
    CONCURRENCY_PER_ENGINE requests in flight per engine of `cfg` (bench/capacity.py), and
    REQUESTS_PER_SLOT requests per slot unless `num_requests` says; `seed_offset` draws another mix."""
    concurrency = CONCURRENCY_PER_ENGINE * sum(int(w.get("count", 1)) for w in cfg["workers"].values())
    wl = make_workload("bucket_mix", num_requests=num_requests or REQUESTS_PER_SLOT * concurrency,
                       concurrency=concurrency, seed=RATES_SEED + 1000 + seed_offset,
                       output_tokens=output_tokens, buckets=RATES_BUCKETS)
    return replace(wl, name="capacity"), concurrency


def measure_capacity(args: argparse.Namespace, slo: SloSpec) -> Capacity:
    """The colocated baseline's capacity for the rates experiment's request mix, from its own
    deployment: a closed loop of CONCURRENCY_PER_ENGINE requests per engine (bench/capacity.py)."""
    label = RATES_BASELINES[0]
    cfg = rates_systems()[label]
    wl, concurrency = capacity_workload(cfg, args.output_tokens)
    print(f"measuring the capacity of {label}: closed loop of {concurrency}, {wl.num_requests} requests",
          file=sys.stderr, flush=True)
    records = run_config(cfg, [wl], slo, salt_base=10_000)["capacity"]
    write_run(Path(args.out) / "capacity", f"{label} capacity", records, slo)
    capacity = steady_capacity(records, concurrency, label)
    print(capacity.line(), file=sys.stderr, flush=True)
    return capacity


def sweep_rates(args: argparse.Namespace, slo: SloSpec) -> tuple[list[float], dict]:
    """--rates as given, or with --rates auto --loads' fractions of the measured capacity; and
    what the summary records about where they came from."""
    if args.rates != "auto":
        try:
            return parse_rates(args.rates), {}
        except ValueError as err:
            raise ValueError(f"--rates must be 'auto' or rates > 0 separated by commas: {err}") from None
    loads = parse_loads(args.loads)
    capacity = measure_capacity(args, slo)
    rates = rates_at(loads, capacity)
    print("rates: " + ", ".join(f"{load:g} of capacity = {r:g} req/s" for load, r in zip(loads, rates)),
          file=sys.stderr, flush=True)
    return rates, {"capacity": capacity.to_dict(), "loads": loads}


def exp_rates(args: argparse.Namespace, slo: SloSpec) -> dict:
    """One sweep into --out; with --rounds R > 1, R sweeps into --out/round_<k>, pooled
    (bench/rate_rounds.py). Every round serves the same rates (with --rates auto, from one
    capacity measurement before the first), so that the rounds pool."""
    if args.rounds < 1:
        raise ValueError(f"--rounds must be >= 1, got {args.rounds}")
    rates, origin = sweep_rates(args, slo)
    origin["systems"] = args.systems
    if args.rounds == 1:
        return {**rates_round(args, slo, rates, Path(args.out))[0], **origin}
    rounds = []
    for k in range(args.rounds):
        print(f"round {k + 1} of {args.rounds}", file=sys.stderr, flush=True)
        out = Path(args.out) / f"round_{k}"
        result, records = rates_round(args, slo, rates, out, first=k, salt_base=100 * k)
        write_json(out / "summary.json", result)
        write_markdown(out / "summary.md", rows_markdown(result["rows"]))
        rounds.append(records)
    pooled = pool_rounds(rounds, rates, slo, present_baselines(args.systems))
    if can_plot():
        sweep = {s: [(r, pooled["summaries"][s][f"rate={r:g}"]) for r in rates] for s in pooled["summaries"]}
        plot_rate_sweep(sweep, Path(args.out) / "rate_sweep.png", title=f"rate sweep, {args.rounds} rounds pooled")
    return {**pooled, "round_dirs": [f"round_{k}" for k in range(args.rounds)], **origin}


def measured_now(dep: Any) -> dict[str, Any]:
    """What the simulator needs of a live deployment (bench.sim_fidelity.measure_deployment),
    with the window it was measured in (wall clock, the host probe's: bench.speed_scaled)."""
    from bench.sim_fidelity import measure_deployment  # it imports this module's rates experiment
    t0 = time.time()
    return {**measure_deployment(dep), "window_s": [t0, time.time()]}


def rates_round(args: argparse.Namespace, slo: SloSpec, rates: list[float], out: Path, first: int = 0,
                salt_base: int = 0) -> tuple[dict, dict[str, dict[str, list]]]:
    """Every rates system deployed in turn, from the `first`-th on (rotated), serving each rate.
    Returns the sweep's summary and its records (system -> workload name -> records)."""
    systems = rates_systems(args.systems)
    workloads = [rates_workload(r, args.num_requests, args.output_tokens) for r in rates]
    workloads = [replace(wl, name=f"rate={r:g}") for wl, r in zip(workloads, rates)]
    results: dict[str, dict[str, Any]] = {}
    records_by_system: dict[str, dict[str, list]] = {}
    measured: dict[str, dict[str, Any]] = {}
    # the configuration each deployment served, every default filled in: a replay months later
    # simulates what ran, not what the config file and the defaults say by then (run 95's
    # one-factor router was replayed by role once stop 51 made that the default)
    deployments: dict[str, dict[str, Any]] = {}
    sweep: dict[str, list] = {}
    gc_pauses: dict[str, dict] = {}
    loop_stalls: dict[str, dict] = {}
    order = rotated(list(systems), first)
    for label in order:
        cfg = systems[label]
        client = GcPauses()

        def ready(dep: Any, label: str = label, client: GcPauses = client) -> None:
            measured[label] = measured_now(dep)
            deployments[label] = dep.config.model_dump(mode="json")
            client.install()

        def done(dep: Any, label: str = label, client: GcPauses = client) -> None:
            client.uninstall()
            write_predictions(dep, out / label / "predictions.json")
            write_engine_steps(dep, out / label / STEPS_FILE)
            gc_pauses[label], loop_stalls[label] = process_reports(dep, client)
            print(f"    longest GC pause: {gc_line(gc_pauses[label])}", file=sys.stderr, flush=True)
            print(f"    event-loop stalls: {loop_line(loop_stalls[label])}", file=sys.stderr, flush=True)
        records = run_config(cfg, workloads, slo, on_ready=ready, on_done=done, salt_base=salt_base)
        records_by_system[label] = records
        results[label] = {wl: summarize(recs, slo) for wl, recs in records.items()}
        sweep[label] = [(r, results[label][f"rate={r:g}"]) for r in rates]
        for wl, recs in records.items():
            write_run(out / label / wl.replace("=", "_"), f"{label} {wl}", recs, slo)
    results = {label: results[label] for label in systems}  # the table's order, whatever the run's
    rows = comparison_rows(results, rates, present_baselines(args.systems), lambda s, key, sm: {
        "p99_ttft_s": sm["ttft_s"]["p99"], "p50_ttft_s": sm["ttft_s"]["p50"], "p99_tpot_s": sm["tpot_s"]["p99"],
        "throughput_rps": sm["throughput_rps"], "routes": sm["routes"]})
    if can_plot():
        plot_rate_sweep(sweep, out / "rate_sweep.png")
    return ({"experiment": "rates", "rates": rates, "rows": rows, "summaries": results, "measured": measured,
             "deployments": deployments, "gc_pauses": gc_pauses, "loop_stalls": loop_stalls, "system_order": order},
            records_by_system)


def exp_mixed_batch(args: argparse.Namespace, slo: SloSpec) -> dict:
    systems = {"colocated, no chunking": single_engine(None),
               "colocated, chunk 2048 + threshold 512": single_engine(2048, 512),
               "disaggregated": baseline("configs/disaggregated.yaml"),
               "adaptive (hybrid)": load_yaml("configs/hybrid.yaml")}
    reps = args.repeats
    workloads = []
    for k in range(reps):
        for wl in (uniform_batch(output_tokens=args.output_tokens), mixed_batch(output_tokens=args.output_tokens)):
            workloads.append(replace(wl, name=f"{wl.name}#{k}"))
    rows, cdf = [], {}
    for label, cfg in systems.items():
        records = run_config(cfg, workloads, slo)
        all_records = [r for rs in records.values() for r in rs]
        write_run(Path(args.out) / label.replace(" ", "_").replace(",", ""), label, all_records, slo)
        for kind in ("uniform", "mixed"):
            recs = [r for name, rs in records.items() if name.startswith(kind) for r in rs]
            short = [r for r in recs if r.input_tokens == 512 and r.ok]
            long = [r for r in recs if r.input_tokens > 512 and r.ok]
            ttft = sorted(r.ttft_s for r in short)
            rows.append({"system": label, "batch": kind,
                         "short_mean_ttft_ms": statistics.mean(ttft) * 1e3,
                         "short_p50_ttft_ms": _pct(ttft, 50) * 1e3, "short_p99_ttft_ms": _pct(ttft, 99) * 1e3,
                         "short_mean_itl_ms": statistics.mean(g for r in short for g in r.itl_s) * 1e3,
                         "long_ttft_ms": statistics.mean(r.ttft_s for r in long) * 1e3 if long else None,
                         "routes": sorted({r.route for r in recs}),
                         "num_failed": sum(1 for r in recs if not r.ok)})
            cdf[f"{label} / {kind}"] = short
    if can_plot():
        plot_ttft_cdf(cdf, Path(args.out) / "mixed_batch_ttft_cdf.png")
    return {"experiment": "mixed-batch", "repeats": reps, "rows": rows, "seed": SEED_MIXED}


def exp_chunk_sweep(args: argparse.Namespace, slo: SloSpec) -> dict:
    rows = []
    for threshold in (0, 512):
        base_tput = None
        for chunk in (4096, 2048, 1024, 512):
            if threshold and threshold >= chunk:
                continue
            workloads = [replace(mixed_batch(output_tokens=args.output_tokens), name=f"mixed#{k}")
                         for k in range(args.repeats)]
            records = run_config(single_engine(chunk, threshold), workloads, slo)
            recs = [r for rs in records.values() for r in rs if r.ok]
            short = sorted(r.ttft_s for r in recs if r.input_tokens == 512)
            long = [r.ttft_s for r in recs if r.input_tokens > 512]
            # throughput: output tokens per second over each batch's wall time, averaged
            tputs = [sum(r.output_tokens for r in rs) / (max(r.finish_s for r in rs) - min(r.arrival_s for r in rs))
                     for rs in records.values()]
            tput = statistics.mean(tputs)
            base_tput = base_tput or tput
            seed = SEED_CHUNK_TABLE.get(chunk)
            rows.append({"chunk": chunk, "long_prefill_token_threshold": threshold,
                         "long_ttft_ms": statistics.mean(long) * 1e3, "short_p99_ttft_ms": _pct(short, 99) * 1e3,
                         "throughput_rel": tput / base_tput, "seed_long_ttft_ms": seed and seed[0],
                         "seed_short_p99_ttft_ms": seed and seed[1], "seed_throughput_pct": seed and seed[2]})
    return {"experiment": "chunk-sweep", "repeats": args.repeats, "rows": rows}


def _pct(sorted_values: list[float], q: float) -> float:
    if not sorted_values:
        return float("nan")
    k = (len(sorted_values) - 1) * q / 100
    lo, hi = int(k), min(int(k) + 1, len(sorted_values) - 1)
    return sorted_values[lo] + (sorted_values[hi] - sorted_values[lo]) * (k - lo)


def rows_markdown(rows: list[dict]) -> str:
    keys = [k for k in rows[0] if k not in ("summaries",)]
    lines = ["| " + " | ".join(keys) + " |", "|" + "|".join("---" for _ in keys) + "|"]
    for r in rows:
        lines.append("| " + " | ".join(_fmt(r[k]) for k in keys) + " |")
    return "\n".join(lines)


def _fmt(v: Any) -> str:
    # one decimal from 10 up: a rate of 10.3 req/s read "10" in every sweep's table before stop 63
    if isinstance(v, float):
        return f"{v:.3f}" if abs(v) < 10 else f"{v:.1f}"
    return "-" if v is None else str(v)


EXPERIMENTS = {"rates": exp_rates, "mixed-batch": exp_mixed_batch, "chunk-sweep": exp_chunk_sweep}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--experiment", default="rates", choices=sorted(EXPERIMENTS))
    ap.add_argument("--rates", default="0.25,0.5,1",
                    help="rates: req/s separated by commas, or 'auto' for --loads of the measured capacity")
    ap.add_argument("--loads", default="0.25,0.5,0.75",
                    help="with --rates auto: fractions of the colocated baseline's measured capacity")
    ap.add_argument("--num-requests", type=int, default=30)
    ap.add_argument("--output-tokens", type=int, default=DEFAULT_OUTPUT_TOKENS)
    ap.add_argument("--repeats", type=int, default=3, help="mixed-batch and chunk-sweep: batches per system")
    ap.add_argument("--rounds", type=int, default=1,
                    help="rates: sweeps, each deploying every system afresh in a rotated order, pooled")
    ap.add_argument("--systems", default=",".join(RATES_SYSTEMS),
                    help="rates: the systems to serve, in order: names of the default ones, or "
                         "label=config.yaml for your own; at least one of the baselines "
                         f"({', '.join(RATES_BASELINES)})")
    ap.add_argument("--out", default="results/compare")
    args = ap.parse_args(argv)
    try:
        args.systems = parse_systems(args.systems)
    except ValueError as err:
        ap.error(str(err))
    slo = SloSpec()
    from pd_serve.deployment import init_ray
    init_ray()  # one Ray for every deployment of the run: each deploy() then only adds actors
    out = Path(args.out)
    with HostSpeedProbe(out / HOST_SPEED_FILE):
        result = EXPERIMENTS[args.experiment](args, slo)
    result["host_speed"] = HOST_SPEED_FILE
    table = rows_markdown(result["rows"])
    if "capacity" in result:
        table = f"{Capacity(**result['capacity']).line()}; loads {result['loads']}\n\n{table}"
    write_summary(out, result, table)
    if args.experiment == "rates":
        report_stalls(out / "summary.json")
    return 0


def report_stalls(summary_path: Path) -> None:
    """The sweep's engine stalls (bench.engine_stalls), printed and saved beside its summary."""
    try:
        rows = sweep_stalls(summary_path)
    except (FileNotFoundError, ValueError) as err:  # the sweep's results stand without it
        print(f"engine stalls not found: {err}", file=sys.stderr, flush=True)
        return
    print(f"\nengine steps {stall_words()} (bench.engine_stalls):\n{stalls_table(rows)}",
          file=sys.stderr, flush=True)
    write_stalls(summary_path.parent / STALLS_FILE, summary_path, rows)


if __name__ == "__main__":
    sys.exit(main())

"""`python -m bench.simulate`: compare routing policies on a simulated deployment.

    python -m bench.simulate --config configs/sim_llama3_8b_h100_ib.yaml \\
        [--policy colocated,adaptive] [--rates 1,2,4] [--workload sharegpt] [--num-requests 500] \\
        [--hardware h200] [--link eth_25g] [--model llama-3-70b] [--tp 2] [--out DIR] [--records]

Prints one table per request rate (a row per policy entry of the config) and, with
`--per-bucket` or for batch workloads, each run's rows per length bucket. Writes
`summary.json` and `summary.md` to `--out` (default `sim_results/<config name>`), every run's
`RequestRecord`s with `--records`, and PNG plots (TTFT CDF per rate, p99 TTFT and goodput
against rate) when matplotlib is installed.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any, Sequence

from bench.metrics import (bucket_table, can_plot, markdown_table, plot_rate_sweep, plot_ttft_cdf,
                           records_to_dicts, write_json, write_markdown)
from bench.simulator.config import (SimConfig, SimConfigError, read_sim_config_dict,
                                    sim_config_from_dict)
from bench.simulator.presets import LINK_PRESETS
from bench.simulator.sweep import SweepRun, run_sweep
from bench.workloads import WORKLOAD_NAMES


def parse_rates(text: str) -> list[float]:
    """"1,2,4.5" -> [1.0, 2.0, 4.5]; ValueError for anything not a positive number."""
    rates = []
    for item in text.split(","):
        try:
            rate = float(item)
        except ValueError:
            raise ValueError(f"bad rate {item.strip()!r}: expected a number of requests per second") from None
        if not rate > 0:
            raise ValueError(f"bad rate {item.strip()!r}: must be > 0")
        rates.append(rate)
    return rates


def load_with_overrides(args: argparse.Namespace) -> SimConfig:
    """The config file with the command line's hardware, link, model and TP on top."""
    data = read_sim_config_dict(args.config)
    if not isinstance(data, dict):
        return sim_config_from_dict(data, args.config)
    for key, value in (("hardware", args.hardware), ("model", args.model), ("tensor_parallel_size", args.tp)):
        if value is not None:
            data[key] = value
    if args.link is not None:
        data["link"] = {"preset": args.link, "shared": bool((data.get("link") or {}).get("shared", False))}
    if args.hardware is not None:
        data.pop("gpu_memory_gib", None)  # the new hardware's own memory
    return sim_config_from_dict(data, args.config)


def describe(config: SimConfig) -> str:
    link = config.link.spec()
    engine = config.engine_spec("both")
    return (f"{config.name}: {config.model} on {config.hardware} x{config.tensor_parallel_size} per engine, "
            f"link {link.name} ({link.bandwidth_bytes_per_s / 1e9:.3g} GB/s, "
            f"alpha {link.alpha_s * 1e3:.2g} ms), "
            f"{engine.num_kv_blocks} KV blocks of {engine.block_size} tokens per engine, "
            f"token budget {engine.max_num_batched_tokens}")


def rate_label(rate: float | None) -> str:
    return "batch" if rate is None else f"{rate:g} req/s"


def report(runs: Sequence[SweepRun], per_bucket: bool) -> str:
    """Markdown: per rate a table of policy entries, a line of routes per run, bucket tables."""
    parts = []
    for rate in dict.fromkeys(r.rate_per_s for r in runs):
        at_rate = [r for r in runs if r.rate_per_s == rate]
        parts.append(f"### {rate_label(rate)}\n")
        parts.append(markdown_table({r.label: r.summary for r in at_rate}, "policy"))
        parts.append("")
        for r in at_rate:
            routes = ", ".join(f"{k} {v}" for k, v in r.summary["routes"].items())
            parts.append(f"- {r.label} ({r.policy} on {r.workers}): routes {routes}; "
                         f"{r.result.num_preemptions} preemptions; simulated {r.result.end_s:.1f} s "
                         f"in {r.wall_s:.2f} s")
        parts.append("")
        if per_bucket or rate is None:
            for r in at_rate:
                parts.append(f"{r.label}, per bucket:\n")
                parts.append(bucket_table(r.summary))
                parts.append("")
    return "\n".join(parts)


def write_outputs(out_dir: Path, config: SimConfig, runs: Sequence[SweepRun], text: str,
                  with_records: bool = False) -> list[Path]:
    """summary.json, summary.md, records/<label>_<rate>.json if asked, and plots if possible."""
    written = [write_json(out_dir / "summary.json", {"config": config.model_dump(mode="json"),
                                                     "runs": [r.to_dict() for r in runs]}),
               write_markdown(out_dir / "summary.md", f"# {describe(config)}\n\n{text}")]
    if with_records:
        for r in runs:
            name = f"{r.label}_{'batch' if r.rate_per_s is None else f'{r.rate_per_s:g}'}.json"
            written.append(write_json(out_dir / "records" / name, records_to_dicts(r.records)))
    if not can_plot():
        return written
    rates = list(dict.fromkeys(r.rate_per_s for r in runs))
    for rate in rates:
        name = "ttft_cdf.png" if rate is None else f"ttft_cdf_rate_{rate:g}.png"
        by_label = {r.label: r.records for r in runs if r.rate_per_s == rate}
        written.append(plot_ttft_cdf(by_label, out_dir / name, f"{config.name}: TTFT, {rate_label(rate)}"))
    if len(rates) > 1:
        sweep: dict[str, list[tuple[float, Any]]] = {}
        for r in runs:
            sweep.setdefault(r.label, []).append((r.rate_per_s, r.summary))
        written.append(plot_rate_sweep(sweep, out_dir / "rate_sweep.png", config.name))
    return written


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m bench.simulate", description=__doc__.splitlines()[0])
    parser.add_argument("--config", required=True, help="a configs/sim_*.yaml file")
    parser.add_argument("--policy", help="comma-separated policy entries of the config (default: all)")
    parser.add_argument("--rates", help="comma-separated request rates, req/s (default: the config's)")
    parser.add_argument("--workload", choices=WORKLOAD_NAMES, help="replace the config's workload")
    parser.add_argument("--num-requests", type=int, help="requests per run")
    parser.add_argument("--seed", type=int, help="workload seed")
    parser.add_argument("--hardware", help="override the config's hardware (a100, h100, h200, cpu)")
    parser.add_argument("--link", choices=sorted(LINK_PRESETS), help="override the config's link preset")
    parser.add_argument("--model", help="override the config's model")
    parser.add_argument("--tp", type=int, help="override tensor_parallel_size")
    parser.add_argument("--per-bucket", action="store_true", help="also print each run per length bucket")
    parser.add_argument("--records", action="store_true",
                        help="also write every run's request records (records/<label>_<rate>.json)")
    parser.add_argument("--out", help="output directory (default sim_results/<config name>)")
    return parser


def main(argv: list[str] | None = None) -> int:
    """Run the sweep and report; 0 on success, 2 on bad input."""
    args = _parser().parse_args(argv)
    try:
        config = load_with_overrides(args)
        rates = parse_rates(args.rates) if args.rates else None
        labels = [p.strip() for p in args.policy.split(",")] if args.policy else None
        params = {k: v for k, v in (("num_requests", args.num_requests), ("seed", args.seed))
                  if v is not None}
        runs = run_sweep(config, labels, rates, args.workload, **params)
    except (SimConfigError, ValueError) as error:
        print(f"bench.simulate: {error}", file=sys.stderr)
        return 2
    text = report(runs, args.per_bucket)
    print(describe(config))
    print()
    print(text)
    out_dir = Path(args.out or Path("sim_results") / config.name)
    written = write_outputs(out_dir, config, runs, text, args.records)
    print(f"wrote {', '.join(str(p) for p in written)}")
    if not can_plot():
        print("plots skipped: matplotlib is not installed (pip install matplotlib)")
    return 0


if __name__ == "__main__":
    sys.exit(main())

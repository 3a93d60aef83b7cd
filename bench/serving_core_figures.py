"""Figures for the README: deployment start time; TTFT and mean inter-token latency of a
4,000-token prompt on each route; KV transfer seconds and GB/s for it.

`python -m bench.serving_core_figures [--config configs/hybrid.yaml] [--runs 3] [--json PATH]`
Routes are measured interleaved (colocated, disaggregated, colocated, ...) on fresh prompts, so
both see the same machine load; medians are reported.
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

from pd_serve.prompts import random_prompt
from pd_serve.report import format_table


def _prompt(num_tokens: int, salt: int) -> list[int]:
    return random_prompt(num_tokens, f"figures/{salt}")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--config", default="configs/hybrid.yaml")
    ap.add_argument("--prompt-tokens", type=int, default=4000)
    ap.add_argument("--max-tokens", type=int, default=32)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--json", default="results/serving_core_figures.json")
    args = ap.parse_args(argv)

    from pd_serve import deploy

    t0 = time.perf_counter()
    with deploy(args.config) as dep:
        start_s = time.perf_counter() - t0
        print(f"deployment ready in {start_s:.1f}s (engines: "
              + ", ".join(f"{w} {i.start_s:.1f}s" for w, i in dep.infos.items()) + ")", flush=True)
        runs: dict[str, list] = {"colocated": [], "disaggregated": []}
        for k in range(args.runs):
            for route in runs:
                salt = 100 * k + len(runs[route]) + (0 if route == "colocated" else 50)
                r = dep.generate(prompt_token_ids=_prompt(args.prompt_tokens, salt),
                                 max_tokens=args.max_tokens, ignore_eos=True, route=route)
                runs[route].append(r)
                print(f"  run {k + 1}/{args.runs} {route:<13} TTFT {r.ttft_s * 1e3:7.1f} ms", flush=True)
    rows, record = [], {"config": args.config, "deployment_start_s": start_s,
                        "prompt_tokens": args.prompt_tokens, "max_tokens": args.max_tokens, "routes": {}}
    for route, rs in runs.items():
        ttft = statistics.median(r.ttft_s for r in rs)
        itl = statistics.median(statistics.mean(r.itl_s) for r in rs)
        kv_s = [r.kv_transfer_s for r in rs if r.kv_transfer_s]
        kv_bytes = statistics.median(r.kv_transfer_bytes for r in rs)
        kv_med = statistics.median(kv_s) if kv_s else None
        gbps = kv_bytes / kv_med / 1e9 if kv_med else None
        rows.append([route, ttft * 1e3, itl * 1e3, kv_bytes / 2**20, kv_med * 1e3 if kv_med else None, gbps])
        record["routes"][route] = {"ttft_s": ttft, "mean_itl_s": itl, "kv_transfer_bytes": kv_bytes,
                                   "kv_transfer_s": kv_med, "kv_gb_per_s": gbps,
                                   "ttft_s_runs": [r.ttft_s for r in rs]}
    print()
    print(f"deployment start: {start_s:.1f} s; {args.prompt_tokens}-token prompt, {args.max_tokens} "
          f"output tokens, median of {args.runs} runs")
    print(format_table(["route", "TTFT ms", "mean ITL ms", "KV MiB", "KV transfer ms", "KV GB/s"], rows))
    out = Path(args.json)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(record, indent=2))
    print(f"\nwrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Where the CPU goes while a deployment serves, and what it does to the engines' steps.

    python -m bench.cpu_contention [--config configs/colocated.yaml] [--rates 0.5,2] [--json PATH]

On a CPU host the engines share cores with everything else a request passes through: this
process (the client), the router actor, each worker's actor (vLLM's AsyncLLM front-end) and Ray.
For each rate of the rates experiment's workload (`bench.compare.rates_workload`) this prints
the CPU seconds each process used per streamed token, how many outputs each worker's stream to
the router carried per item (pd_serve/output_streams.py), and the engines' decode-only steps under
that load (vLLM's own execution time) beside what the start-up calibration predicts for them:
the slowdown the simulator, which has no shared cores, does not see.
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from bench.compare import load_yaml, rates_workload
from bench.host_cpu import cpu_seconds
from bench.metrics import write_json
from bench.run import run_workload
from pd_serve.report import format_table

CONTEXT_GUESS = 300  # the rates workload's typical short prompt + output, for the model's side


def process_ids(dep: Any) -> dict[str, int]:
    """Client, router, each worker's actor and its engine processes, and Ray's GCS and raylet."""
    import psutil
    import ray

    pids = {"client": os.getpid(),
            "router": ray.get(dep.router.__ray_call__.remote(lambda self: os.getpid()))}
    for wid, handle in dep.workers.items():
        pids[f"{wid} actor"] = ray.get(handle.__ray_call__.remote(lambda self: os.getpid()))
        for i, child in enumerate(ray.get(handle.child_pids.remote())):
            pids[f"{wid} engine {i}"] = child
    for proc in psutil.process_iter(["cmdline"]):
        line = " ".join(proc.info["cmdline"] or [])
        for name in ("gcs_server", "raylet"):
            if name in line.split(" ")[0]:
                pids.setdefault(name, proc.pid)
    return pids


def _outputs_sent(dep: Any) -> dict[str, dict[str, int]]:
    """Each worker's outputs sent to the router so far, and in how many stream items."""
    import ray

    return dict(zip(dep.workers, ray.get([h.outputs_sent.remote() for h in dep.workers.values()])))


def decode_steps(steps: list[dict]) -> dict[int, list[float]]:
    """Execution seconds of decode-only steps, by batch size."""
    by_batch: dict[int, list[float]] = {}
    for s in steps:
        if s["num_prefill_tokens"] == 0 and s["num_decode_reqs"] > 0:
            by_batch.setdefault(s["num_decode_reqs"], []).append(s["elapsed_s"])
    return by_batch


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.cpu_contention", description=__doc__.splitlines()[0])
    ap.add_argument("--config", default="configs/colocated.yaml")
    ap.add_argument("--rates", default="0.5,2")
    ap.add_argument("--num-requests", type=int, default=60)
    ap.add_argument("--json", default="results/cpu_contention.json")
    args = ap.parse_args(argv)
    import ray

    from pd_serve import deploy

    cfg = load_yaml(args.config)
    cfg.setdefault("scheduler", {})["calibrate"] = True  # the model the steps are compared with
    out: dict[str, Any] = {"config": args.config, "rates": {}}
    with deploy(cfg) as dep:
        model = dep.calibration.model
        pids = process_ids(dep)
        for k, rate in enumerate(float(r) for r in args.rates.split(",")):
            sent_before = _outputs_sent(dep)
            before, t0 = cpu_seconds(pids), time.time()
            records = run_workload(dep.stream, rates_workload(rate, args.num_requests), dep.vocab_size,
                                   "auto", salt=k + 1)
            wall, after = time.time() - t0, cpu_seconds(pids)
            sent_after = _outputs_sent(dep)
            tokens = sum(len(r.token_times) for r in records)
            used = {n: after[n] - before[n] for n in pids}
            tpots = [r.tpot_s for r in records if r.tpot_s is not None]
            ttfts = [r.ttft_s for r in records if r.ttft_s is not None]
            print(f"\nrate {rate:g} req/s: {wall:.1f} s, {tokens} tokens streamed; mean TPOT "
                  f"{statistics.fmean(tpots) * 1e3:.1f} ms, p50 TTFT {statistics.median(ttfts) * 1e3:.1f} ms")
            print(format_table(["process", "CPU s", "share of a core", "CPU ms per token"],
                               [[n, f"{s:.1f}", f"{s / wall:.0%}", f"{s / tokens * 1e3:.2f}"]
                                for n, s in used.items()]))
            per_item = {w: (sent_after[w]["items"] - sent_before[w]["items"])
                        / max(1, sent_after[w]["batches"] - sent_before[w]["batches"]) for w in sent_after}
            print("outputs per Ray stream item (output_streams.py): "
                  + ", ".join(f"{w} {n:.2f}" for w, n in per_item.items()))
            steps = dict(zip(dep.workers, ray.get([h.steps.remote(t0) for h in dep.workers.values()])))
            rows = []
            for wid, worker_steps in steps.items():
                for batch, elapsed in sorted(decode_steps(worker_steps).items()):
                    if len(elapsed) >= 10:
                        predicted = model.predict(0, 0, [CONTEXT_GUESS] * batch)
                        rows.append([wid, batch, len(elapsed), f"{statistics.median(elapsed) * 1e3:.1f}",
                                     f"{predicted * 1e3:.1f}", f"{statistics.median(elapsed) / predicted:.2f}"])
            print(format_table(["worker", "decode batch", "steps", "median ms under load",
                                f"calibrated ms (context {CONTEXT_GUESS})", "ratio"], rows))
            out["rates"][f"{rate:g}"] = {"wall_s": wall, "tokens": tokens, "cpu_s": used,
                                         "outputs_per_stream_item": per_item,
                                         "mean_tpot_s": statistics.fmean(tpots),
                                         "p50_ttft_s": statistics.median(ttfts),
                                         "decode_steps": rows}
    write_json(Path(args.json), out)
    print(f"\nwrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

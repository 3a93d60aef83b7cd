"""Live runner: replay a workload against a deployment and record every request.

`python -m bench.run --config configs/hybrid.yaml --workload sharegpt --num-requests 40 --rate 1
 [--route auto] [--out results/run]` deploys the config (a local Ray cluster on CPU), sends the
workload at its arrival times (or as a closed loop at a concurrency), and writes `records.json`
(every request: TTFT, each inter-token latency, TPOT, E2E, route, transfer bytes and seconds,
predicted TTFT), `summary.json` and `summary.md`. A progress bar shows requests done.

Times are taken at the client: arrival is when the request is sent, tokens when they arrive.
"""
from __future__ import annotations

import argparse
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Callable

from bench.metrics import (RequestRecord, SloSpec, markdown_table, records_to_dicts, summarize,
                           write_json, write_markdown)
from pd_serve.prompts import random_prompt
from bench.workloads import WORKLOAD_NAMES, RequestSpec, Workload, make_workload

# stream(prompt_token_ids, max_tokens, route) -> iterator of items as Deployment.stream yields them
StreamFn = Callable[..., Any]


def prompt_for(spec: RequestSpec, vocab_size: int, salt: int = 0) -> list[int]:
    """Random token ids, reproducible per (request id, salt): two requests share a first block
    with probability ~256^-32, so no prefix-cache hit makes a request look cheaper than it is."""
    return random_prompt(spec.input_tokens, f"{spec.request_id}/{salt}", vocab_size)


def _serve_one(stream: StreamFn, spec: RequestSpec, vocab_size: int, route: str, salt: int) -> RequestRecord:
    rec = RequestRecord(spec.request_id, spec.input_tokens, spec.output_tokens, arrival_s=time.time(),
                        bucket=spec.bucket)
    try:
        for item in stream(prompt_token_ids=prompt_for(spec, vocab_size, salt),
                           max_tokens=spec.output_tokens, ignore_eos=True, route=route):
            now = time.time()
            if item["type"] == "token":
                rec.token_times.extend([now] * len(item["token_ids"]))
                if rec.first_token_s is None:
                    rec.first_token_s = now
            else:
                r = item["result"]
                rec.finish_s = now
                rec.route, rec.kv_transfer_bytes, rec.kv_transfer_s = r.route, r.kv_transfer_bytes, r.kv_transfer_s
                rec.predicted_ttft_s = r.predicted_ttft_s
                rec.prefill_worker, rec.decode_worker = r.prefill_worker, r.decode_worker
                rec.served_id = r.request_id
                rec.fallback = r.fallback
                rec.output_tokens = len(r.token_ids)
    except Exception as err:  # recorded, counted as failed in the summary, never dropped
        rec.ok, rec.error = False, f"{type(err).__name__}: {err}"
    return rec


def run_workload(stream: StreamFn, workload: Workload, vocab_size: int, route: str = "auto",
                 progress: bool = True, salt: int = 0) -> list[RequestRecord]:
    """Send `workload` through `stream`; open loop at the arrival times, or a closed loop."""
    from tqdm import tqdm

    bar = tqdm(total=workload.num_requests, desc=workload.name, unit="req", disable=not progress,
               file=sys.stderr)
    records: list[RequestRecord] = []
    lock = threading.Lock()

    def one(spec: RequestSpec) -> None:
        rec = _serve_one(stream, spec, vocab_size, route, salt)
        with lock:
            records.append(rec)
            bar.update(1)

    if workload.is_closed_loop:
        with ThreadPoolExecutor(max_workers=workload.concurrency) as pool:
            list(pool.map(one, workload.requests))
    else:
        t0 = time.time()
        with ThreadPoolExecutor(max_workers=min(64, max(1, workload.num_requests))) as pool:
            for spec in sorted(workload.requests, key=lambda r: r.arrival_s):
                delay = t0 + spec.arrival_s - time.time()
                if delay > 0:
                    time.sleep(delay)
                pool.submit(one, spec)
    bar.close()
    return sorted(records, key=lambda r: r.arrival_s)


def write_run(out: str | Path, label: str, records: list[RequestRecord], slo: SloSpec,
              extra: dict | None = None) -> dict:
    out = Path(out)
    summary = summarize(records, slo)
    write_json(out / "records.json", records_to_dicts(records))
    write_json(out / "summary.json", {"label": label, **(extra or {}), "summary": summary})
    write_markdown(out / "summary.md", markdown_table({label: summary}))
    return summary


def build_workload(args: argparse.Namespace) -> Workload:
    params: dict[str, Any] = {}
    if args.num_requests is not None:
        params["num_requests"] = args.num_requests
    if args.rate is not None:
        params["rate_per_s"] = args.rate
    if args.concurrency is not None:
        params["concurrency"] = args.concurrency
    if args.trace:
        return make_workload("trace", path=args.trace)
    return make_workload(args.workload, **params)


def add_workload_args(ap: argparse.ArgumentParser) -> None:
    ap.add_argument("--workload", default="sharegpt", choices=sorted(WORKLOAD_NAMES))
    ap.add_argument("--num-requests", type=int, default=None)
    ap.add_argument("--rate", type=float, default=None, help="requests per second (Poisson)")
    ap.add_argument("--concurrency", type=int, default=None, help="closed loop at this concurrency")
    ap.add_argument("--trace", default=None, help="CSV with arrival_s,input_tokens,output_tokens")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--config", default="configs/hybrid.yaml")
    ap.add_argument("--route", default="auto", choices=["auto", "colocated", "disaggregated"])
    ap.add_argument("--out", default="results/run")
    add_workload_args(ap)
    args = ap.parse_args(argv)
    try:
        workload = build_workload(args)
    except ValueError as err:
        print(f"bench.run: {err}", file=sys.stderr)
        return 2

    from pd_serve import deploy

    with deploy(args.config) as dep:
        slo = SloSpec(tuple(tuple(b) for b in dep.config.scheduler.slo.ttft_buckets),
                      dep.config.scheduler.slo.tpot_s)
        records = run_workload(dep.stream, workload, dep.vocab_size, args.route)
    summary = write_run(args.out, args.config, records, slo, {"workload": workload.name, "route": args.route})
    print(markdown_table({f"{args.config} ({args.route})": summary}))
    print(f"\nwrote {args.out}/records.json, summary.json, summary.md")
    return 0 if summary["num_failed"] == 0 else 1


if __name__ == "__main__":
    sys.exit(main())

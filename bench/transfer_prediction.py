"""How well the link model predicts real vLLM KV transfers: the probe alone, the probe plus the
warm-up transfers' median excess ("constant", the start-up model before run 33), the start-up
model (the probe plus the line `engine_excess` fits to the warm-ups' excess), and the online
model after it has seen the transfers so far.

`python -m bench.transfer_prediction [--config configs/hybrid.yaml] [--runs 5] [--json PATH]`
Sizes are interleaved (1,500, 4,000, 1,500, ...) on fresh prompts so both see the same machine;
the table gives per size the median actual transfer, each model's median prediction and the
median absolute relative error (the issue's target: 30% for the start-up model). It also
reports, from the decode worker's NIXL telemetry, how much of each transfer was spent posting
it: on CPU the whole of it (the READ completes inside the post).
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
from transfer.link_model import LinkFit, OnlineLinkModel, constant_excess

MODELS = ("probe", "constant", "start-up", "online")


def _entry(links: dict, pair: tuple[str, str]) -> dict:
    """One pair's entry of the router's `link_models()`: its model and engine overhead."""
    return next(m for m in links["models"] if (m["prefill_id"], m["decode_id"]) == pair)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--config", default="configs/hybrid.yaml")
    ap.add_argument("--sizes", default="1500,4000", help="prompt lengths in tokens")
    ap.add_argument("--runs", type=int, default=5, help="transfers per size")
    ap.add_argument("--json", default="results/transfer_prediction.json")
    args = ap.parse_args(argv)
    sizes = [int(s) for s in args.sizes.split(",")]

    import ray

    from pd_serve import deploy

    with deploy(args.config) as dep:
        if not dep.link_probes:
            print("this config probes no prefill->decode link (transfer.probe_at_start)", file=sys.stderr)
            return 2
        probe = dep.link_probes[0]
        pair = (probe.prefill_id, probe.decode_id)
        probe_fit: LinkFit = probe.fit
        start_entry = _entry(dep.links_at_start, pair)
        start = OnlineLinkModel.from_dict(start_entry["model"])
        overhead = start_entry["engine_overhead_s"]
        per_byte = start_entry.get("engine_s_per_byte") or 0.0
        print(f"link {pair[0]}->{pair[1]}: probe alpha {probe_fit.alpha_s * 1e3:.3f} ms, "
              f"beta {probe_fit.beta_bytes_per_s / 1e9:.2f} GB/s; the engine adds "
              f"{(overhead or 0) * 1e3:.2f} ms + {per_byte * 2**20 * 1e3:.3f} ms/MiB", flush=True)
        warm = start_entry.get("warmup_transfers", [])
        print("  warm-up transfers (MiB: ms, excess over the probe ms): " + ", ".join(
            f"{b / 2**20:.1f}: {t * 1e3:.2f}, {(t - probe_fit.predict(b)) * 1e3:+.2f}" for b, t in warm),
            flush=True)
        # The start-up model before run 33, kept beside the line to compare the two on one run.
        constant = constant_excess(probe_fit, warm).on(probe_fit)
        records = []
        t_first = time.time()
        for k in range(args.runs):
            for n in sizes:
                links_now = ray.get(dep.router.link_models.remote())
                online = OnlineLinkModel.from_dict(_entry(links_now, pair)["model"])
                r = dep.generate(prompt_token_ids=random_prompt(n, f"transfer-prediction/{n}/{k}"),
                                 max_tokens=2, route="disaggregated")
                if r.route != "disaggregated" or not r.kv_transfer_s:
                    raise RuntimeError(f"request of {n} tokens made no measured transfer: {r}")
                b = r.kv_transfer_bytes
                records.append({"tokens": n, "bytes": b, "actual_s": r.kv_transfer_s,
                                "probe_s": probe_fit.predict(b), "constant_s": constant.predict(b),
                                "start-up_s": start.predict(b),
                                "online_s": online.predict(b)})
                print(f"  {n:>6} tokens {b / 2**20:6.1f} MiB: actual {r.kv_transfer_s * 1e3:6.2f} ms, "
                      + ", ".join(f"{m} {records[-1][m + '_s'] * 1e3:6.2f}" for m in MODELS), flush=True)
        telemetry = ray.get(dep.workers[pair[1]].transfers.remote(t_first))

    rows, summary = [], {}
    for n in sizes:
        rs = [r for r in records if r["tokens"] == n]
        actual = statistics.median(r["actual_s"] for r in rs)
        errors = {m: statistics.median(abs(r[m + "_s"] - r["actual_s"]) / r["actual_s"] for r in rs)
                  for m in MODELS}
        summary[n] = {"median_actual_s": actual, "median_abs_rel_error": errors}
        rows.append([n, f"{rs[0]['bytes'] / 2**20:.1f}", f"{actual * 1e3:.2f}"]
                    + [f"{statistics.median(r[m + '_s'] for r in rs) * 1e3:.2f} ({errors[m]:.0%})"
                       for m in MODELS])
    print(format_table(["tokens", "MiB", "actual ms"] + [f"{m} ms (error)" for m in MODELS], rows))
    inline = [t for t in telemetry if t.get("post_s") is not None and t["post_s"] >= 0.99 * t["duration_s"]]
    posted = [t for t in telemetry if t.get("post_s") is not None]
    if posted:
        print(f"NIXL telemetry: {len(inline)} of {len(posted)} transfers completed inside their post call "
              f"(post time >= 99% of the transfer time); descriptors per transfer: "
              f"{sorted({t['num_descriptors'] for t in posted})}")
    out = Path(args.json)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"pair": pair, "probe_fit": probe_fit.to_dict(),
                               "engine_overhead_s": overhead, "engine_s_per_byte": per_byte,
                               "summary": summary,
                               "records": records, "telemetry": telemetry}, indent=2))
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

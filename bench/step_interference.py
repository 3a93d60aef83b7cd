"""What other work on a CPU host does to one engine's steps.

    python -m bench.step_interference [--config configs/colocated.yaml] [--repeats 2] [--json PATH]

Runs the start-up calibration's probes (`pd_serve.calibration`: prefills of 128-2,048 tokens,
decode batches at short and long contexts) on the deployment's first engine, three ways, in
turn, `--repeats` times:
- alone: every other engine idle;
- together: the second engine runs the same probes at the same time (what serving looks like);
- busy loop: alone, beside one busy-looping Python process that no core is reserved for (what
  the request path's CPU looks like to the engine).
Prints the median step time per probe and mode, and each mode over `alone`. Every engine's
model runs on its own core (pd-serve pins it), so on a host with a core per engine and one to
spare, these ratios would be 1.
"""
from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
from typing import Any

from bench.compare import load_yaml
from bench.metrics import write_json
from pd_serve.report import format_table

MODES = ("alone", "together", "busy loop")


def probe_medians(result: dict[str, list]) -> dict[str, float]:
    """Median seconds per probe of one `EngineWorker.calibrate` result: lone prefills by size,
    decode-only steps by batch and context."""
    by_probe: dict[str, list[float]] = {}
    for s in result["samples"]:
        if s["prefill_tokens"] == 0:
            key = f"decode {len(s['decode_contexts'])} x {s['decode_contexts'][0]}"
        elif not s["decode_contexts"] and s["prefill_context"] == 0:
            key = f"prefill {s['prefill_tokens']}"
        else:
            continue
        by_probe.setdefault(key, []).append(s["duration_s"])
    return {k: statistics.median(v) for k, v in by_probe.items()}


def run_mode(mode: str, workers: list[Any], salt: int) -> dict[str, float]:
    import ray

    if mode == "together":
        return probe_medians(ray.get([w.calibrate.remote(salt + k) for k, w in enumerate(workers)])[0])
    busy = subprocess.Popen([sys.executable, "-c", "while True: pass"]) if mode == "busy loop" else None
    try:
        return probe_medians(ray.get(workers[0].calibrate.remote(salt)))
    finally:
        if busy is not None:
            busy.kill()
            busy.wait()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.step_interference", description=__doc__.splitlines()[0])
    ap.add_argument("--config", default="configs/colocated.yaml", help="a deployment with at least 2 workers")
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--json", default="results/step_interference.json")
    args = ap.parse_args(argv)
    if args.repeats < 1:
        ap.error("--repeats must be >= 1")
    from pd_serve import deploy

    cfg = load_yaml(args.config)
    cfg.setdefault("scheduler", {})["calibrate"] = False  # the probes run here, three ways
    runs: dict[str, list[dict[str, float]]] = {m: [] for m in MODES}
    with deploy(cfg) as dep:
        workers = list(dep.workers.values())
        if len(workers) < 2:
            ap.error(f"{args.config} has {len(workers)} worker; 'together' needs 2")
        salt = 1000
        for rep in range(args.repeats):
            for mode in MODES:  # interleaved, so the machine's drift hits every mode alike
                salt += 10
                runs[mode].append(run_mode(mode, workers, salt))
                print(f"repeat {rep + 1}/{args.repeats}: {mode} done", file=sys.stderr, flush=True)
    probes = sorted(runs["alone"][0], key=lambda k: (k.split()[0], [int(x) for x in k.split()[1:] if x.isdigit()]))
    medians = {m: {p: statistics.median(r[p] for r in runs[m] if p in r) for p in probes} for m in MODES}
    rows = [[p] + [f"{medians[m][p] * 1e3:.1f}" for m in MODES]
            + [f"{medians[m][p] / medians['alone'][p]:.2f}" for m in MODES[1:]] for p in probes]
    print(format_table(["probe", *(f"{m} ms" for m in MODES), *(f"{m} / alone" for m in MODES[1:])], rows))
    write_json(args.json, {"config": args.config, "repeats": args.repeats, "runs": runs, "medians_s": medians})
    print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

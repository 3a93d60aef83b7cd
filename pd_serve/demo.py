"""`make demo` / `pd-serve demo`: a local deployment on the default model serving a few requests
on each route, printing what happened (route, workers, TTFT, inter-token latency, KV moved)."""
from __future__ import annotations

import argparse
import sys
import time

from pd_serve.prompts import random_prompt
from pd_serve.report import RESULT_HEADERS, format_table, result_row


def _prompt(num_tokens: int, salt: int) -> list[int]:
    return random_prompt(num_tokens, f"demo/{salt}")


def run_demo(config: str, max_tokens: int = 16) -> int:
    from pd_serve import deploy

    print(f"deploying {config} (a local Ray cluster and the default model on CPU) ...", flush=True)
    t0 = time.perf_counter()
    with deploy(config) as dep:
        print(f"ready in {dep.start_s:.1f}s: " + ", ".join(
            f"{w} ({i.role}, engine {i.start_s:.1f}s)" for w, i in dep.infos.items())
            + f"; start-up {dep.phases_text()}")
        if dep.handshake_s:
            print("NIXL handshakes pre-warmed: " + ", ".join(
                f"{k} {v * 1e3:.0f} ms" for k, v in dep.handshake_s.items()))
        plan = [("short text", "auto", {"prompt": "Prefill and decode, together or apart?"}),
                ("short", "auto", {"prompt_token_ids": _prompt(200, 1)})]
        for salt, route in enumerate(("colocated", "disaggregated", "auto"), start=2):
            plan.append(("long 4000", route, {"prompt_token_ids": _prompt(4000, salt)}))
        rows = []
        for label, route, prompt in plan:
            r = dep.generate(max_tokens=max_tokens, route=route, ignore_eos=True, **prompt)
            rows.append(result_row(label, route, r))
            print(f"  {label:<10} route={route:<13} -> {r.route:<13} {r.decision_reason}", flush=True)
        print()
        print(format_table(RESULT_HEADERS, rows))
        st = dep.status()
        print("\nroute decisions:", {k: v for k, v in st["counters"].items()})
        print("KV cache usage after the requests:",
              {w: round(s["load"].get("kv_cache_usage", 0.0), 3) for w, s in st["workers"].items()})
    print(f"\ndone in {time.perf_counter() - t0:.1f}s; every actor and engine process stopped.")
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="pd-serve demo", description=__doc__)
    ap.add_argument("--config", default="configs/hybrid.yaml")
    ap.add_argument("--max-tokens", type=int, default=16)
    args = ap.parse_args(argv)
    return run_demo(args.config, args.max_tokens)


if __name__ == "__main__":
    sys.exit(main())

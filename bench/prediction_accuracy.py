"""How well the router's predicted TTFT matches the actual, live, over a mixed workload.

`python -m bench.prediction_accuracy [--config configs/hybrid.yaml] [--requests 24] [--concurrency 2]`
prints per request the route, predicted and actual TTFT, the part of it inside the engines
(predicted and measured by vLLM's own timestamps; disaggregated: prefill worker + decode worker)
and the path outside them (predicted: the router's recent median; measured), and the median
absolute relative error per route and overall. The integration test runs `run_mixed_workload` on
a live deployment.
"""
from __future__ import annotations

import argparse
import statistics
import sys
import threading
from dataclasses import dataclass

from pd_serve.prompts import random_prompt
from pd_serve.report import format_table

LENGTHS = (120, 600, 1500, 2500, 3500)


@dataclass
class Outcome:
    request_id: str
    num_prompt_tokens: int
    route: str
    predicted_ttft_s: float | None
    ttft_s: float
    reason: str

    @property
    def rel_error(self) -> float | None:
        if self.predicted_ttft_s is None or self.ttft_s <= 0:
            return None
        return abs(self.predicted_ttft_s - self.ttft_s) / self.ttft_s


def _prompt(n: int, salt: int) -> list[int]:
    return random_prompt(n, f"accuracy/{salt}")


def run_mixed_workload(dep, num_requests: int = 24, concurrency: int = 2, max_tokens: int = 8,
                       salt: int = 0) -> list[Outcome]:
    """`num_requests` prompts cycling through LENGTHS, `concurrency` clients at a time, route auto."""
    outcomes: list[Outcome] = []
    errors: list[BaseException] = []
    lock = threading.Lock()
    next_i = iter(range(num_requests))

    def client() -> None:
        for i in next_i:
            n = LENGTHS[(i * 3 + i // len(LENGTHS)) % len(LENGTHS)]
            try:
                r = dep.generate(prompt_token_ids=_prompt(n, salt * 1000 + i), max_tokens=max_tokens,
                                 ignore_eos=True, route="auto")
            except BaseException as err:  # kept: a failure must surface, not vanish in a thread
                errors.append(err)
                return
            with lock:
                outcomes.append(Outcome(r.request_id, n, r.route, r.predicted_ttft_s, r.ttft_s, r.decision_reason))

    threads = [threading.Thread(target=client) for _ in range(concurrency)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]
    return outcomes


def median_rel_error(outcomes: list[Outcome], route: str | None = None) -> float:
    errs = [o.rel_error for o in outcomes if o.rel_error is not None and route in (None, o.route)]
    return statistics.median(errs) if errs else float("nan")


def _split_ms(entry: dict | None, ttft_s: float) -> list[float | None]:
    """[engines predicted, engines measured, path predicted, path measured] in ms (None: the
    router logged no prediction or an engine kept no timestamps)."""
    if entry is None:
        return [None] * 4
    path_predicted_s = entry["predicted"].get(f"{entry['route']}.path_s", 0.0)
    engines_s = entry["engines_s"]
    return [(entry["predicted_ttft_s"] - path_predicted_s) * 1e3,
            engines_s and engines_s * 1e3, path_predicted_s * 1e3,
            engines_s and (ttft_s - engines_s) * 1e3]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--config", default="configs/hybrid.yaml")
    ap.add_argument("--requests", type=int, default=24)
    ap.add_argument("--concurrency", type=int, default=2)
    ap.add_argument("--explain", action="store_true", help="print each decision's reason too")
    args = ap.parse_args(argv)

    import ray

    from pd_serve import deploy

    with deploy(args.config) as dep:
        if dep.calibration:
            print("calibration:", dep.calibration.summary())
        outcomes = run_mixed_workload(dep, args.requests, args.concurrency)
        logged = {e["request_id"]: e for e in ray.get(dep.router.prediction_errors.remote())}
    rows = [[o.num_prompt_tokens, o.route, o.predicted_ttft_s and o.predicted_ttft_s * 1e3,
             o.ttft_s * 1e3, o.rel_error, *_split_ms(logged.get(o.request_id), o.ttft_s)]
            for o in outcomes]
    print(format_table(["prompt tok", "route", "predicted ms", "actual ms", "rel error",
                        "engines predicted ms", "engines ms", "path predicted ms", "path ms"], rows))
    if args.explain:
        for i, o in enumerate(outcomes):
            print(f"{i:>3} {o.num_prompt_tokens:>5} {o.route:<13} {o.ttft_s * 1e3:7.1f} ms: {o.reason}")
    for route in ("colocated", "disaggregated", None):
        print(f"median |pred - actual| / actual ({route or 'all'}): {median_rel_error(outcomes, route):.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

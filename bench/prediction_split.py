"""Where a live run's TTFT predictions went wrong: each route's TTFT split into its parts,
predicted against measured, per system and rate.

`python -m bench.prediction_split DIR` reads what `bench.compare --experiment rates` wrote:
DIR/<system>/predictions.json (the router's log: every request's named predictions and each
worker's TTFT inside its engine, by vLLM's own timestamps) and DIR/<system>/rate_<r>/records.json
(joined on the server's request id). The parts:

    colocated:      engine = queue + prefill on the worker       | path = the rest
    disaggregated:  P = queue + prefill on the prefill worker
                    D = transfer + D's steps until it takes the KV + wait for D + first step
                        on D (the KV read runs inside D's engine, so D's own TTFT holds it)
                                                                 | path = the rest

Printed: per (system, rate, route, prompt bucket) the number of requests and the median of
each part predicted and measured (ms), and the median of measured minus predicted: the part
whose difference is largest is where the prediction misses.
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path
from typing import Any, Iterable

from pd_serve.report import format_table

SHORT_TOKENS = 512  # the bucket mix's short prompts are at most this long


def parts(entry: dict[str, Any]) -> dict[str, tuple[float, float | None]] | None:
    """Part name -> (predicted s, measured s or None) for one logged request; None when the
    workers kept no in-engine times for it."""
    route, p, engine = entry["route"], entry["predicted"], entry["engine_s"]
    pred = {k.split(".", 1)[1]: v for k, v in p.items() if k.startswith(route + ".")}
    if route == "colocated":
        measured_engine = engine.get("decode")
        if measured_engine is None:
            return None
        out = {"engine": (pred["queue_s"] + pred["prefill_s"], measured_engine)}
        inside = measured_engine
    else:
        on_p, on_d = engine.get("prefill"), engine.get("decode")
        if on_p is None or on_d is None:
            return None
        out = {"P": (pred["queue_s"] + pred["prefill_s"], on_p),
               "D": (pred["transfer_s"] + pred.get("kv_load_s", 0.0) + pred["decode_wait_s"]
                     + pred["first_step_s"], on_d)}
        inside = on_p + on_d
    out["path"] = (pred["path_s"], entry["ttft_s"] - inside)
    out["ttft"] = (entry["predicted_ttft_s"], entry["ttft_s"])
    return out


def bucket(num_prompt_tokens: int) -> str:
    return "short" if num_prompt_tokens <= SHORT_TOKENS else "long"


def split_rows(entries: Iterable[dict[str, Any]], label: str) -> list[list[Any]]:
    """One row per (route, bucket): label, route, bucket, n, then per part its predicted,
    measured and median (measured - predicted) in ms."""
    groups: dict[tuple[str, str], list[dict]] = {}
    for e in entries:
        split = parts(e)
        if split is not None:
            groups.setdefault((e["route"], bucket(e["num_prompt_tokens"])), []).append(split)
    rows = []
    for (route, b), splits in sorted(groups.items()):
        row: list[Any] = [label, route, b, len(splits)]
        for name in ("ttft", "engine", "P", "D", "path"):
            pairs = [s[name] for s in splits if name in s]
            if not pairs:
                row.append("")
                continue
            med = lambda xs: statistics.median(xs) * 1e3  # noqa: E731
            row.append(f"{med([p for p, _ in pairs]):.0f} / {med([m for _, m in pairs]):.0f} "
                       f"({med([m - p for p, m in pairs]):+.0f})")
        rows.append(row)
    return rows


def load_system(system_dir: Path) -> list[tuple[str, list[dict]]]:
    """(rate label, logged entries of that rate's requests) for each rate dir under it."""
    log = {e["request_id"]: e for e in json.loads((system_dir / "predictions.json").read_text())}
    out = []
    for rate_dir in sorted(system_dir.glob("rate_*")):
        records = json.loads((rate_dir / "records.json").read_text())
        ids = [r.get("served_id") for r in records]
        if not any(ids):
            raise ValueError(f"{rate_dir}/records.json has no served_id: written before 2026-12-02?")
        out.append((rate_dir.name, [log[i] for i in ids if i in log]))
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("dir", help="a bench.compare rates output directory (or one of its round_<k>)")
    args = ap.parse_args(argv)
    root = Path(args.dir)
    systems = sorted(p.parent for p in root.glob("*/predictions.json"))
    if not systems:
        print(f"no <system>/predictions.json under {root}", file=sys.stderr)
        return 2
    rows = [row for s in systems for rate, entries in load_system(s)
            for row in split_rows(entries, f"{s.name} {rate}")]
    print("ms: predicted / measured (median of measured - predicted)")
    print(format_table(["system rate", "route", "prompt", "n", "TTFT", "engine", "P", "D", "path"], rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())

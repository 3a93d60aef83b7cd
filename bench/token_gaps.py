"""What a live run's decode steps ran beside: every gap between two streamed tokens, by what the
engines were doing meanwhile.

    python -m bench.token_gaps results/rates [--json PATH]

Reads the records a `bench.compare --experiment rates` run wrote (DIR/<system>/rate_<r>/
records.json) and classes each inter-token gap of a request by what overlapped it:
- on its own decode worker: another request (`own+`) or none;
- on any other worker: a request decoding (`nb-decode`), else one prefilling (`nb-prefill`),
  else nothing (`alone`).
A request occupies its prefill worker from arrival to first token (its decode worker when it
was colocated) and its decode worker from first token to its last. The table gives each class's
mean / median gap and count per system and rate. On a CPU host this is the interference between
engines that the simulator's host model has to carry (`bench.simulator.host`); run 12, for
instance, took 2.4-3.6 ms a token with the other engine idle and 5.2-6.9 ms while it decoded.
"""
from __future__ import annotations

import argparse
import bisect
import json
import statistics
import sys
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

from bench.metrics import RequestRecord, write_json
from pd_serve.report import format_table

CLASSES = ("alone", "nb-prefill", "nb-decode", "own+alone", "own+nb-prefill", "own+nb-decode")
QUIET_MAX_BATCH = 5  # quiet_excess_by_batch's last row: this many streams and more


def busy_intervals(records: Sequence[RequestRecord]) -> dict[str, list[tuple[float, float, str]]]:
    """Per worker, the (start, end, 'p' or 'd') intervals its requests occupied it."""
    busy: dict[str, list[tuple[float, float, str]]] = {}
    for r in records:
        if not r.ok or r.first_token_s is None or r.finish_s is None or not r.decode_worker:
            continue
        busy.setdefault(r.prefill_worker or r.decode_worker, []).append((r.arrival_s, r.first_token_s, "p"))
        busy.setdefault(r.decode_worker, []).append((r.first_token_s, r.finish_s, "d"))
    return busy


def classify_gaps(records: Sequence[RequestRecord]) -> dict[str, list[float]]:
    """Every inter-token gap (seconds) by class (CLASSES); see the module docstring."""
    busy = busy_intervals(records)
    out: dict[str, list[float]] = {c: [] for c in CLASSES}
    for r in records:
        if not r.ok or not r.decode_worker:
            continue
        own = busy.get(r.decode_worker, [])
        for a, b in zip(r.token_times, r.token_times[1:]):
            kinds = {k for w, spans in busy.items() if w != r.decode_worker
                     for s, e, k in spans if s < b and e > a}
            shared = sum(1 for s, e, _ in own if s < b and e > a) > 1  # itself and another
            neighbour = "nb-decode" if "d" in kinds else "nb-prefill" if "p" in kinds else "alone"
            out[("own+" if shared else "") + neighbour].append(b - a)
    return out


def quiet_excess_by_batch(records: Sequence[RequestRecord], predict_step_s: Callable[[list[int]], float],
                          max_batch: int = QUIET_MAX_BATCH) -> dict[int, dict[str, float]]:
    """How much longer a decode step took than `predict_step_s(contexts)` (the calibrated step
    model), by its batch, over the gaps in which nothing else ran on the host: no request
    anywhere between its arrival and its first token (prefilling, queued, or its KV moving) and
    no other worker decoding. Batch: the requests streaming from the same decode worker at the
    gap's end (`max_batch` and more in one row), contexts their prompt + tokens so far.
    Per batch: median_s, count.

    This is what `bench.host_cpu`'s bursts measure before a run (its `step_excess_by_batch`),
    taken from the run itself: Poisson arrivals, the workload's own prompt lengths. Run 43's
    disaggregated decoder took +1.2 / +2.2 / +2.9 ms over its model at 1 / 2 / 3 streams in these
    gaps (3.07 req/s), where the bursts of 128-token prompts before it measured +1.5 / +1.1."""
    busy = busy_intervals(records)
    streams = [(r.decode_worker, r.token_times, r.input_tokens) for r in records
               if r.ok and r.decode_worker and len(r.token_times) > 1]
    by_batch: dict[int, list[float]] = {}
    for worker, times, _ in streams:
        for a, b in zip(times, times[1:]):
            if any(s < b and e > a and (k == "p" or w != worker)
                   for w, spans in busy.items() for s, e, k in spans):
                continue
            contexts = [p + bisect.bisect_left(ts, b) for w, ts, p in streams if w == worker and ts[0] < b <= ts[-1]]
            by_batch.setdefault(min(len(contexts), max_batch), []).append(b - a - predict_step_s(contexts))
    return {n: {"median_s": statistics.median(v), "count": len(v)} for n, v in sorted(by_batch.items())}


def gap_summary(gaps: Mapping[str, Sequence[float]]) -> dict[str, dict[str, Any]]:
    """Per class with any gap: mean_s, median_s, count."""
    return {c: {"mean_s": statistics.fmean(v), "median_s": statistics.median(v), "count": len(v)}
            for c, v in gaps.items() if v}


def run_dirs(root: Path) -> list[tuple[str, str, Path]]:
    """(system, rate directory, records.json) of a bench.compare rates run, sorted."""
    return sorted((p.parent.parent.name, p.parent.name, p) for p in root.glob("*/rate_*/records.json"))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.token_gaps", description=__doc__.splitlines()[0])
    ap.add_argument("run", help="a bench.compare --experiment rates output directory")
    ap.add_argument("--json", default=None, help="also write the summaries here")
    args = ap.parse_args(argv)
    found = run_dirs(Path(args.run))
    if not found:
        print(f"bench.token_gaps: no */rate_*/records.json under {args.run}", file=sys.stderr)
        return 2
    rows, out = [], {}
    for system, rate, path in found:
        records = [RequestRecord.from_dict(d) for d in json.loads(path.read_text())]
        summary = gap_summary(classify_gaps(records))
        out.setdefault(system, {})[rate] = summary
        rows.append([system, rate.removeprefix("rate_")] + [
            f"{summary[c]['mean_s'] * 1e3:.2f} / {summary[c]['median_s'] * 1e3:.2f} ({summary[c]['count']})"
            if c in summary else "-" for c in CLASSES])
    print("Inter-token gaps, mean / median ms (count), by what overlapped them\n")
    print(format_table(["system", "req/s"] + list(CLASSES), rows))
    if args.json:
        write_json(args.json, out)
        print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

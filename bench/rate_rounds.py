"""The rates experiment repeated in rounds, pooled: one comparison that a slow minute cannot decide.

On a shared 2-core host a decode step drifts by about +-20% over seconds and a deployment's
calibration by as much between start-ups (docs/MEASUREMENTS.md, runs 12-16); one sweep runs each system once,
minutes apart from the others, so one or two requests near their SLO fall either way and a
60-request cell moves by 2-3% between identical runs. `bench.compare --experiment rates --rounds
R` runs the whole sweep R times, each round deploying every system afresh in a rotated order
(a system runs first in one round, last in another), and pools the rounds here:

    goodput(system, rate) = requests meeting both SLOs over all rounds
                            / the summed durations of the system's runs at that rate

and keeps each round's count beside it, so the table shows the spread the pooled figure hides.
Each round's output is a whole single-round record (DIR/round_<k>/), which `bench.sim_fidelity`
and `bench.token_gaps` read as they read any sweep.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

from bench.metrics import RequestRecord, SloSpec, num_within_slos, pooled_summary

# records per round: system label -> workload name ("rate=<r>") -> that run's records
RoundRecords = Mapping[str, Mapping[str, Sequence[RequestRecord]]]


def round_summaries(live_path: Path, live: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Each round's summary of the sweep whose top summary `live` was read from `live_path`
    (DIR/round_<k>/summary.json); a single-round sweep's is `live` itself."""
    names = live.get("round_dirs")
    if not names:
        return [dict(live)]
    return [json.loads((Path(live_path).parent / name / "summary.json").read_text()) for name in names]


def rotated(labels: Sequence[str], k: int) -> list[str]:
    """`labels` starting at position k (mod len): round k's order."""
    k %= len(labels)
    return list(labels[k:]) + list(labels[:k])


def comparison_rows(summaries: Mapping[str, Mapping[str, Mapping[str, Any]]], rates: Sequence[float],
                    baselines: Sequence[str],
                    columns: Callable[[str, str, Mapping[str, Any]], dict[str, Any]]) -> list[dict[str, Any]]:
    """One row per (rate, system): its goodput, `columns(system, key, summary)`, and its goodput
    over the best of `baselines` at that rate. `summaries`: system -> "rate=<r>" -> summary."""
    rows = []
    for rate in rates:
        key = f"rate={rate:g}"
        good = {s: summaries[s][key]["goodput_rps"] or 0.0 for s in summaries}
        best_base = max(good[b] for b in baselines)
        for s, by_rate in summaries.items():
            rows.append({"rate": rate, "system": s, "goodput_rps": good[s], **columns(s, key, by_rate[key]),
                         "goodput_vs_best_baseline": good[s] / best_base if best_base else None})
    return rows


def pool_rounds(rounds: Sequence[RoundRecords], rates: Sequence[float], slo: SloSpec,
                baselines: Sequence[str]) -> dict[str, Any]:
    """Pooled summaries and comparison rows (against the best of `baselines`) of several rounds of
    one rate sweep."""
    if not rounds:
        raise ValueError("no rounds to pool")
    summaries: dict[str, dict[str, Any]] = {}
    counts: dict[str, dict[str, list[int]]] = {}
    for label in rounds[0]:
        summaries[label], counts[label] = {}, {}
        for rate in rates:
            key = f"rate={rate:g}"
            runs = [rnd[label][key] for rnd in rounds]
            summaries[label][key] = pooled_summary(runs, slo)
            counts[label][key] = [num_within_slos(run, slo) for run in runs]

    def columns(s: str, key: str, sm: Mapping[str, Any]) -> dict[str, Any]:
        return {"met_slo_per_round": " / ".join(str(n) for n in counts[s][key]),
                "met_slo": sum(counts[s][key]), "requests": sm["num_requests"],
                "p99_ttft_s": sm["ttft_s"]["p99"], "p50_ttft_s": sm["ttft_s"]["p50"],
                "p99_tpot_s": sm["tpot_s"]["p99"], "routes": sm["routes"]}
    return {"experiment": "rates-rounds", "rounds": len(rounds), "rates": list(rates),
            "rows": comparison_rows(summaries, rates, baselines, columns),
            "summaries": summaries, "met_slo_per_round": counts}

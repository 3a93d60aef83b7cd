"""The rates experiment repeated in rounds, pooled: one comparison that a slow minute cannot decide.

On a shared 2-core host a decode step drifts by about +-20% over seconds and a deployment's
calibration by as much between start-ups (README, runs 12-16); one sweep runs each system once,
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

from typing import Any, Mapping, Sequence

from bench.metrics import RequestRecord, SloSpec, run_duration_s, summarize

BASELINES = ("colocated", "disaggregated")

# records per round: system label -> workload name ("rate=<r>") -> that run's records
RoundRecords = Mapping[str, Mapping[str, Sequence[RequestRecord]]]


def rotated(labels: Sequence[str], k: int) -> list[str]:
    """`labels` starting at position k (mod len): round k's order."""
    k %= len(labels)
    return list(labels[k:]) + list(labels[:k])


def pool_rounds(rounds: Sequence[RoundRecords], rates: Sequence[float], slo: SloSpec) -> dict[str, Any]:
    """Pooled summaries and comparison rows of several rounds of one rate sweep."""
    if not rounds:
        raise ValueError("no rounds to pool")
    systems = list(rounds[0])
    summaries: dict[str, dict[str, Any]] = {}
    counts: dict[str, dict[str, list[int]]] = {}
    for label in systems:
        summaries[label], counts[label] = {}, {}
        for rate in rates:
            key = f"rate={rate:g}"
            runs = [rnd[label][key] for rnd in rounds]
            records = [r for run in runs for r in run]
            summaries[label][key] = summarize(records, slo, duration_s=sum(run_duration_s(run) for run in runs))
            counts[label][key] = [sum(1 for r in run if r.ok and slo.meets(r)) for run in runs]
    rows = []
    for rate in rates:
        key = f"rate={rate:g}"
        good = {s: summaries[s][key]["goodput_rps"] or 0.0 for s in systems}
        best_base = max(good[b] for b in BASELINES if b in good)
        for s in systems:
            sm = summaries[s][key]
            rows.append({"rate": rate, "system": s, "goodput_rps": good[s],
                         "met_slo_per_round": " / ".join(str(n) for n in counts[s][key]),
                         "met_slo": sum(counts[s][key]), "requests": sm["num_requests"],
                         "p99_ttft_s": sm["ttft_s"]["p99"], "p50_ttft_s": sm["ttft_s"]["p50"],
                         "p99_tpot_s": sm["tpot_s"]["p99"], "routes": sm["routes"],
                         "goodput_vs_best_baseline": good[s] / best_base if best_base else None})
    return {"experiment": "rates-rounds", "rounds": len(rounds), "rates": list(rates), "rows": rows,
            "summaries": summaries, "met_slo_per_round": counts}

"""One system's measurements over the rounds of a sweep, pooled: the median of each figure.

`bench.compare --rounds R` deploys each system afresh every round and measures it while idle just
before its run (`bench.sim_fidelity.measure_deployment`): the step model, the link, the request
path and its CPU, and the host's probes. Each of these is a handful of short probes on a 2-core
host that drifts, and one round's probe can be far off the run it precedes: in run 49's first
round, the adaptive deployment measured its prefills x2.17 slower beside 4 streams where the same
engines, as colocated minutes before, measured x1.73, and its simulated p50 TTFT came out 37-42%
high. A model is usually calibrated once per hardware and engine configuration, not per run
(Vidur profiles each operator once); the pooled form does that with the probes this sweep took:
every round of a system is simulated with the median, figure by figure, of what all its rounds
measured. Nothing is taken from the runs' results, only from the probes before them; a round's
run is simulated with probes taken after it too, which is what a calibration shared over runs is.

The median is taken of every number in the record, at the same place in each round's record:
- plain numbers (coefficients, link alpha and beta, path times, step excesses);
- measured (count, value) points, where every round measured the same counts (the load stretch,
  the step excess at large batches): the median value at each count;
- anything else (names, texts, the probes' raw samples, points measured at different counts):
  the first round's, as it was.
The step model's four coefficients are pooled one by one, so the pooled model is no single
round's fit (the four are fitted jointly and trade off a little); `bench.sim_fidelity
--measurements` runs either form, and the two can be set side by side.
"""
from __future__ import annotations

import statistics
from typing import Any, Mapping, Sequence

# What `bench.fidelity_rounds` simulates each round with: its own deployment's measurements, or
# this module's pool over all rounds.
MEASUREMENTS = ("own", "pooled")
# Keys whose values are raw samples or probe detail, not figures the simulator reads: kept as the
# first round's (their medians would mean nothing).
RAW_KEYS = frozenset({"samples", "load_probe", "load_probe_beside", "calibration", "router_calibration",
                      "hf_config", "model_spec", "kv_geometry", "probe_fit", "router_links"})


def pooled_record(records: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """The figure-by-figure median of one system's measurement records (module docstring)."""
    if not records:
        raise ValueError("pooled_record needs at least one record")
    pooled = _pool(list(records), key=None)
    assert isinstance(pooled, dict)
    return pooled


def pooled_measurements(rounds: Sequence[Mapping[str, Mapping[str, Any]]]) -> dict[str, dict[str, Any]]:
    """Per system label, the pooled record over the rounds that measured it (each round's
    summary `measured`: label -> record)."""
    labels = [label for r in rounds for label in r]
    return {label: pooled_record([r[label] for r in rounds if label in r]) for label in dict.fromkeys(labels)}


def _pool(values: list[Any], key: str | None) -> Any:
    first = values[0]
    if key in RAW_KEYS:
        return first
    if _is_number(first) and all(_is_number(v) for v in values):
        if all(v == first for v in values):  # counts (cores, block size) stay as they are
            return first
        return float(statistics.median(values))
    if isinstance(first, Mapping) and all(isinstance(v, Mapping) for v in values):
        return {k: _pool([v[k] for v in values], k) if all(k in v for v in values) else first[k] for k in first}
    if _is_points(first) and all(_is_points(v) for v in values):
        counts = [tuple(p[0] for p in v) for v in values]
        if all(c == counts[0] for c in counts):
            return [[n, float(statistics.median(v[i][1] for v in values))] for i, n in enumerate(counts[0])]
    return first


def _is_number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _is_points(v: Any) -> bool:
    """A list of (count, value) pairs, as the host's measured points are stored."""
    return (isinstance(v, (list, tuple)) and len(v) > 0
            and all(isinstance(p, (list, tuple)) and len(p) == 2 and _is_number(p[0]) and _is_number(p[1])
                    for p in v))

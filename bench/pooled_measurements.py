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

The hardware form (`hardware_measurements`) pools wider, by what a figure describes:
- the step model describes the model on this hardware, the same engines in every system: its
  coefficients are the median over every record of the sweep, all systems and all rounds;
- the rest (request path, host probes, link) describes a deployment's shape: it is pooled over
  the records of every system whose workers are the same (colocated and adaptive both run two
  `both` engines of one configuration), all rounds.
Why (2026-12-03, this 2-core host): one deployment calibrated three times in a row measured
52-54, 51-66, 50-66 and 46-68 linear GFLOP/s (adaptive, colocated, adaptive without its link
probe, colocated with one); no system calibrates slower than another, and one calibration is
+-15% of the engines' speed. Runs 50 and 51 had put adaptive at 50-65 against colocated's 53-83
from one calibration per round; simulated with those, adaptive at 5-6 req/s came out 2-30x too
slow. The host probes' decode-step excesses (`bench.host_cpu`: a measured decode step less what the
deployment's own calibration predicted for it) are re-expressed against the pooled step model
before they are pooled, so that calibrated step plus excess is still the step the probe measured:
only the prefill speed and the first calibration's noise are pooled away, not the decode steps
each deployment was seen to take. Without that, run 52's disaggregated deployment, calibrated
at 8.6 ms of step overhead against the pool's 6.3, had its decode steps simulated 2 ms short
(mean TPOT 31-42% low, against 16-33% with its own measurements).
Runs 50-52, within 20% pooled / held out: own 13, 12, 23 of 36 / 30, 18, 43 of 72; pooled 13,
12, 22 / 22, 23, 39; hardware 18, 14, 22 / 35, 25, 41. Built on those runs, then tried on a
fresh one, run 53: own 25 / 31, pooled 24 / 44, hardware 26 / 48 (the live rounds held each
other to 45). It is the default (`DEFAULT_MEASUREMENTS`).

The prefill's stretch beside streams (`bench.host_load`) is, in the hardware form, one factor
for every count of streams by default (`flat_stretch`: every probe of the alike deployments over
its own deployment's probes alone), not the median at each count (`--stretch counts`): five
probes per count scatter more than the counts differ. Within 20%, pooled of 24 / held out of 48:
runs 59 and 60, on which it was chosen, 20 / 34 and 7 / 15 against 18 / 32 and 6 / 12; run 61,
fresh, 15 / 29 against 12 / 21 (the live rounds held each other to 29). The hardware form keeps
every one of those ratios as well (`stretch_ratios`, the host's `<key>_draws`), for the host form
that draws each prefill's stretch among them (`bench.simulator.host`, stretch-draws).

The length probe (`bench.length_stretch`, read by the host forms by length) is, in the hardware
form, pooled over the alike deployments too (`pooled_length_probe`: the median factor at each
length, every part in the engine alone and beside streams), where the other forms keep the first
round's (stop 62).

A decode step's further streams are priced, where one engine decodes, by loops of the workload's
own prompt mix (`bench.decode_growth`, the host's `step_excess_mix`); colocated runs no such loops
(two engines decode), and its bursts' short streams miss how a step grows with long contexts. In
the hardware form a shape without loops takes the sweep's other shapes' (`with_shared_decode_growth`,
`--growth shared`, the default since stop 63; `--growth own` keeps its bursts'). Runs 114-117 under
probe-steps, four seeds each: 123 of 144 figures within 20% pooled against 118, held out 201.5 of
288 against 197.25; colocated's and adaptive's mean TPOT within 20% on 31 of 32 against 23. On
run 117, measured after the change was built: 31.75 / 55.5 against 30.75 / 52.25.
"""
from __future__ import annotations

import json
import statistics
from dataclasses import replace
from pathlib import Path
from typing import Any, Mapping, Sequence

import yaml

from bench.host_cpu import BURST_OUTPUT_TOKENS, BURST_PROMPT_TOKENS
from schedulers.step_time import COEFFICIENTS

# The context of a stream in `bench.host_cpu`'s bursts, halfway through its longest output: what
# an excess is re-expressed at (the attention and KV terms move a decode step by microseconds
# over these contexts; the per-step overhead is what differs between calibrations).
EXCESS_CONTEXT_TOKENS = BURST_PROMPT_TOKENS + BURST_OUTPUT_TOKENS[-1] // 2

# How the hardware form reads the prefill's stretch beside streams (`flat_stretch`).
STRETCH_FORMS = ("counts", "flat")
DEFAULT_STRETCH = "flat"
# The probe records (and the points they give) of each stretch: beside streams on the engine the
# router picks, and on a prefill-only engine.
STRETCH_PROBES = (("load_stretch", "load_probe"), ("load_stretch_beside", "load_probe_beside"))

# How the hardware form prices a decode step's further streams where a deployment has no loops of
# the workload's mix of its own (`with_shared_decode_growth`): from the sweep's deployments that
# measured them (shared), or from its own bursts (own)
GROWTH_FORMS = ("own", "shared")
DEFAULT_GROWTH = "shared"
# What `bench.fidelity_rounds` simulates each round with: its own deployment's measurements, or
# this module's pool over all rounds.
MEASUREMENTS = ("own", "pooled", "hardware")
DEFAULT_MEASUREMENTS = "hardware"
# What the tools that simulate a sweep round by round offer (`round_measurements`: bench.sim_capacity,
# bench.steps_beside); "pooled" is the hardware form without the step model's wider pool.
ROUND_FORMS = ("hardware", "own")
# Keys whose values are raw samples or probe detail, not figures the simulator reads: kept as the
# first round's (their medians would mean nothing).
RAW_KEYS = frozenset({"samples", "load_probe", "load_probe_beside", "prefill_beside_probe", "decode_growth_probe",
                      "length_probe", "length_probe_beside",
                      "calibration", "router_calibration", "hf_config", "model_spec", "kv_geometry", "probe_fit",
                      "router_links", "window_s"})


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


def stretch_ratios(records: Sequence[Mapping[str, Any]], probe: str = "load_probe") -> list[float]:
    """Every probe of `records` sent beside streams (`probe`'s samples, `bench.host_load`): its
    TTFT over the median TTFT of its own record's probes sent alone, all counts pooled, sorted.
    A record without probes sent alone gives none."""
    ratios = []
    for rec in records:
        samples = ((rec.get("host") or {}).get(probe) or {}).get("samples") or {}
        alone = samples.get("0") or samples.get(0)
        if not alone:
            continue
        base = statistics.median(alone)
        ratios += [t / base for n, ts in samples.items() if int(n) > 0 for t in ts]
    return sorted(ratios)


def flat_stretch(records: Sequence[Mapping[str, Any]], probe: str = "load_probe") -> float | None:
    """One stretch for every count of streams, from the `probe` samples (`bench.host_load`) of
    all `records`: the median over every probe sent beside streams of its TTFT over the median
    TTFT of its own record's probes sent alone; never below 1. None where no record has both.

    Why: each count's point is the median of five probes, and one deployment's went 2.21, 1.34
    and 1.83 at 2, 4 and 8 streams (run 60, colocated), a drop no load explains; across the
    colocated and adaptive deployments of runs 59-60 the points at one count ran 1.3-2.9.
    Pooled per count over those deployments of runs 59, 60 and 61 they were 1.55 / 1.66 / 1.72,
    2.24 / 1.84 / 1.63 and 1.48 / 1.86 / 1.61 at 2 / 4 / 8 streams: no steady growth with the
    count (likely because what takes the prefill's core share is the other engine's loop,
    spinning once it steps at all, more than the tokens streamed), so the counts are pooled."""
    return _median_stretch(stretch_ratios(records, probe))


def _median_stretch(ratios: Sequence[float]) -> float | None:
    """The flat stretch of `ratios` (`stretch_ratios`): their median, never below 1; None for none."""
    return max(1.0, float(statistics.median(ratios))) if ratios else None


def with_flat_stretch(record: Mapping[str, Any], factors: Mapping[str, float | None]) -> dict[str, Any]:
    """`record` with each measured stretch's points (`STRETCH_PROBES`) all at `factors[key]`."""
    host = dict(record.get("host") or {})
    for key, _ in STRETCH_PROBES:
        if host.get(key) and factors.get(key) is not None:
            host[key] = [[n, factors[key]] for n, _ in host[key]]
    return {**record, "host": host}


def with_stretch_draws(record: Mapping[str, Any], draws: Mapping[str, Sequence[float]]) -> dict[str, Any]:
    """`record` with each measured stretch's draws (`<key>_draws`, `STRETCH_PROBES`) at
    `draws[key]` where there are any: what the stretch-draws host form draws from."""
    host = dict(record.get("host") or {})
    for key, _ in STRETCH_PROBES:
        if draws.get(key):
            host[f"{key}_draws"] = list(draws[key])
    return {**record, "host": host}


def hardware_measurements(rounds: Sequence[Mapping[str, Mapping[str, Any]]],
                          shape_of: Mapping[str, str],
                          stretch: str = DEFAULT_STRETCH,
                          growth: str = DEFAULT_GROWTH) -> list[dict[str, dict[str, Any]]]:
    """Per round, label -> the record to simulate it with (module docstring, the hardware form):
    the step model's coefficients pooled over every record, the other figures over the records
    of the labels of the same `shape_of[label]` (any key naming a deployment's workers);
    `stretch` "flat": the prefill's stretch one factor over the shape's probes (`flat_stretch`);
    `growth` "shared": a shape without loops of the mix takes the other shapes' (`with_shared_decode_growth`).
    Raises ValueError where the records are not of one model, or a label has no shape."""
    if stretch not in STRETCH_FORMS:
        raise ValueError(f"stretch must be one of {STRETCH_FORMS}, got {stretch!r}")
    if growth not in GROWTH_FORMS:
        raise ValueError(f"growth must be one of {GROWTH_FORMS}, got {growth!r}")
    records = [(label, rec) for r in rounds for label, rec in r.items()]
    if not records:
        raise ValueError("hardware_measurements needs at least one record")
    missing = sorted({label for label, _ in records if label not in shape_of})
    if missing:
        raise ValueError(f"no deployment shape for {', '.join(missing)}")
    models = {repr(rec.get("model_spec") or rec.get("hf_config")) for _, rec in records}
    if len(models) > 1:
        raise ValueError(f"the records are of {len(models)} different models; one step model cannot be pooled over them")
    step = {k: float(statistics.median(rec[k] for _, rec in records)) for k in COEFFICIENTS}
    records = [(label, excesses_against(rec, step)) for label, rec in records]
    by_shape = {}
    for shape in dict.fromkeys(shape_of[label] for label, _ in records):
        alike = [rec for label, rec in records if shape_of[label] == shape]
        by_shape[shape] = pooled_record(alike)
        ratios = {key: stretch_ratios(alike, probe) for key, probe in STRETCH_PROBES}
        if stretch == "flat":
            flat = {key: _median_stretch(r) for key, r in ratios.items()}
            by_shape[shape] = with_flat_stretch(by_shape[shape], flat)
        # every alike probe, for a form that draws the stretch instead of taking its median
        by_shape[shape] = with_stretch_draws(by_shape[shape], ratios)
        by_shape[shape] = with_pooled_length_probes(by_shape[shape], alike)
    if growth == "shared":
        by_shape = with_shared_decode_growth(by_shape)
    return [{label: {**by_shape[shape_of[label]], **step} for label in r} for r in rounds]


def round_measurements(summaries: Sequence[Mapping[str, Any]], systems: Mapping[str, str], measurements: str,
                       stretch: str = DEFAULT_STRETCH, growth: str = DEFAULT_GROWTH) -> list[dict[str, Any]]:
    """Per round (`bench.rate_rounds.round_summaries`: one for a single sweep), label -> the
    record the simulator uses, in one of ROUND_FORMS; `systems`: the sweep's
    (`bench.sim_fidelity.systems_of`); `stretch` and `growth`: the hardware form's readings
    (`hardware_measurements`)."""
    measured = [s.get("measured") or {} for s in summaries]
    if not any(measured):
        raise ValueError("the sweep recorded no measurements of its deployments")
    if measurements == "own":
        return measured
    if measurements == "hardware":
        return hardware_measurements_for(measured, systems, stretch, growth)
    raise ValueError(f"measurements must be one of {ROUND_FORMS}, got {measurements!r}")


def hardware_only_error(measurements: str, given: Mapping[str, str | None]) -> str | None:
    """What is wrong with the `given` options (name -> value, None where not given) that only the
    hardware form reads (`--stretch`, `--growth`), with the measurements form `measurements`; None
    where nothing is. Each round's own record holds its probes as measured: there is nothing to read."""
    for name, value in given.items():
        if value is not None and measurements != "hardware":
            return f"--{name} applies to --measurements hardware"
    return None


def with_shared_decode_growth(by_shape: Mapping[str, Mapping[str, Any]]) -> dict[str, dict[str, Any]]:
    """Each shape's pooled record (`by_shape`), those without `step_excess_mix` (the decode steps'
    excess in loops of the workload's own prompt mix, `bench.decode_growth`) given the median of
    the shapes' that have it at each count (`_pool`), marked `step_excess_mix_shared`; as they are
    where no shape has it. Re-expressed against the pooled step model already (`excesses_against`).

    Why (stop 63): the loops run only where one engine decodes (hybrid, disaggregated); colocated
    priced its further streams by the bursts' 128-token streams (`bench.host_cpu`), whose steps grew
    0.15-0.29 ms a stream beside a busy engine and none alone (run 116). Its live engines' decode-only
    steps grew 0.52-1.43 ms a stream over their calibration on run 115 and 0.67-0.98 on run 116 (each
    round, each state of the other engine), and the simulated ones by the bursts' ~0.1: at 4-7 streams
    they came out 0.78-0.86 of live, at 8 or more 0.66-0.68 (`bench.steps_beside`, run 116), and
    colocated's mean TPOT 10-31% low at 8.79-10.3 req/s. Hybrid's loops grew 0.6-0.75 ms a stream.
    A decode step's growth with its streams' contexts is the engine's on this host, measured in
    the same sweep."""
    measured = [rec["host"]["step_excess_mix"] for rec in by_shape.values()
                if (rec.get("host") or {}).get("step_excess_mix")]
    if not measured:
        return {shape: dict(rec) for shape, rec in by_shape.items()}
    shared = _pool(measured, "step_excess_mix")
    out = {}
    for shape, rec in by_shape.items():
        host = rec.get("host") or {}
        if not host or host.get("step_excess_mix"):
            out[shape] = dict(rec)
        else:
            out[shape] = {**rec, "host": {**host, "step_excess_mix": shared, "step_excess_mix_shared": True}}
    return out


def pooled_length_probe(probes: Sequence[Mapping[str, Any]]) -> dict[str, Any] | None:
    """One length probe (`bench.length_stretch`) from several deployments' of one route: at each
    length all of them probed, the median of their factors, and their parts in the engine pooled
    (each count's samples joined). None for none; the first where their routes differ.

    Why: one probe is a few prompts per length, and one deployment's points move more between
    rounds than between lengths: on run 114 the engines of colocated and adaptive read x1.60 /
    1.80 / 1.40, x1.53 / 1.77 / 1.60, x1.85 / 1.41 / 1.53 and x1.73 / 1.72 / 1.44 at 256 / 1,536 /
    3,584 tokens; the hardware form kept the first round's of the shape."""
    probes = [p for p in probes if p and p.get("points")]
    if not probes or len({p.get("route") for p in probes}) > 1:
        return dict(probes[0]) if probes else None
    lengths = [n for n, _ in probes[0]["points"] if all(n in {m for m, _ in p["points"]} for p in probes)]
    factors = [{m: f for m, f in p["points"]} for p in probes]
    out = {**probes[0], "points": [[n, float(statistics.median(f[n] for f in factors))] for n in lengths]}
    for key in ("engine_s", "ttft_s"):  # each probe's seconds, by length then by streams
        if all(key in p for p in probes):
            out[key] = {}
            for n in lengths:
                parts = [p[key].get(str(n)) or {} for p in probes]
                counts = dict.fromkeys(c for part in parts for c in part)
                out[key][str(n)] = {c: [t for part in parts for t in part.get(c, [])] for c in counts}
    return out


def with_pooled_length_probes(record: Mapping[str, Any], alike: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """`record` with its length probes (on an engine that streams, and on a prefill-only engine)
    pooled over the `alike` records (`pooled_length_probe`), where any measured one."""
    host = dict(record.get("host") or {})
    for key in ("length_probe", "length_probe_beside"):
        pooled = pooled_length_probe([(rec.get("host") or {}).get(key) for rec in alike])
        if pooled is not None:
            host[key] = pooled
    return {**record, "host": host}


def excesses_against(record: Mapping[str, Any], step: Mapping[str, float]) -> dict[str, Any]:
    """`record` with its host's decode-step excesses re-expressed against the step model of
    coefficients `step`: each plus what the record's own model predicts for a decode step of that
    many streams (at `bench.host_cpu`'s burst contexts; `bench.decode_growth`'s points at its
    loops' mean context) less what `step`'s predicts. A record with no host or no step model is
    returned as it is."""
    from bench.sim_fidelity import step_model_from_calibration  # it imports this module

    host = record.get("host")
    if not isinstance(host, Mapping) or not all(k in record for k in COEFFICIENTS):
        return dict(record)
    own = step_model_from_calibration(record)
    pooled = replace(own, **step)

    def shift(streams: int, context: int = EXCESS_CONTEXT_TOKENS) -> float:
        contexts = [context] * streams
        return own.predict(0, 0, contexts) - pooled.predict(0, 0, contexts)

    host = dict(host)
    for key, streams in (("step_excess_alone_s", 1), ("step_excess_1_s", 1), ("step_excess_2_s", 2),
                         ("step_excess_quiet_s", 1), ("step_excess_spin_s", 1)):
        if host.get(key) is not None:
            host[key] = host[key] + shift(streams)
    if host.get("step_excess_batch"):
        host["step_excess_batch"] = [[n, e + shift(int(n))] for n, e in host["step_excess_batch"]]
    if host.get("step_excess_mix"):  # bench.decode_growth's loops, at their requests' mean context
        context = round(host.get("step_excess_mix_context_tokens") or EXCESS_CONTEXT_TOKENS)
        host["step_excess_mix"] = [[n, e + shift(int(n), context)] for n, e in host["step_excess_mix"]]
    return {**record, "host": host}


def hardware_measurements_for(rounds: Sequence[Mapping[str, Mapping[str, Any]]],
                              systems: Mapping[str, str],
                              stretch: str = DEFAULT_STRETCH,
                              growth: str = DEFAULT_GROWTH) -> list[dict[str, dict[str, Any]]]:
    """`hardware_measurements` over the records of `systems` (label -> deployment config) only,
    each shaped by its config's workers (`deployment_shapes`)."""
    shapes = deployment_shapes(systems)
    return hardware_measurements([{label: rec for label, rec in r.items() if label in shapes} for r in rounds],
                                 shapes, stretch, growth)


def deployment_shapes(systems: Mapping[str, str]) -> dict[str, str]:
    """label -> its config's workers (roles, counts, engines, resources) as canonical JSON: the
    systems whose deployments are alike, whatever their policies."""
    return {label: json.dumps(yaml.safe_load(Path(path).read_text())["workers"], sort_keys=True)
            for label, path in systems.items()}


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

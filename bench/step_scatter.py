"""How an engine step's time scatters around its modelled time, measured before the run.

    python -m bench.step_scatter --live DIR/summary.json

The host model (`bench.simulator.host`) prices a step at the medians its probes measured, so a
simulated step varies only with what it computes and what runs beside it. A live step also
varies with the host: on run 96 a step's p90 over its p50 (within one group of
`bench.steps_beside`: the same role, kind, neighbours and streams) was 1.46 on hybrid and 1.56
on colocated, where the simulator's were 1.17 and 1.26. Near capacity a queue grows with its
service time's scatter, not only its median, and colocated's p50 TTFT at 10.3 req/s came out 40%
low with its steps' medians right.

The probes `bench.compare` runs on each deployment before its run (`measured`, inside its
`window_s`: the host bursts, the load, length, mix and neighbour probes) leave their engine steps
in the same `engine_steps.json` as the run's. Each such step's time (the `bench.steps_beside`
rule) over the calibrated model's, divided by the median of its group (`bench.steps_beside`'s
groups, those with MIN_GROUP_STEPS or more), is how far that step strayed from its kind's
median on this host that day: the scatter, with the medians (which the host model prices) taken
out. The `step-scatter` host form draws every simulated step's factor from these, one set for
steps with a prompt's chunk and one for decode-only steps; nothing of the run itself goes in.

A probe step that stalled (`bench.engine_stalls.is_stall`: 3x its calibrated time and 0.3 s over)
is left out of the scatter and kept as a stall instead: its seconds over the model, drawn as the
host's rare stalls (`stall_per_prefill_step`: the probes' stalls per step that prefilled,
`stall_excess_s`). A stall is the engine's process held off its core for a while, whatever the
step computes; as a factor it would stretch with the step it lands on. Run 101 (stop 56): one
probe step of 72 tokens took 0.55 s against 9 ms calibrated, a factor of 47 in the prefill set's
top draws; drawn on a 0.25 s prefill it made an 11.7 s step, and a simulated round's p99 TTFT
came out 14.2 s against 1.05 s live. Its probes' 13 stalls in 4,344 steps that prefilled (0.3%,
0.30-0.75 s) as stalls instead: no round simulated over twice its live p99 TTFT (4 before).
"""
from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
from pathlib import Path
from typing import Any, Iterable, Mapping, NamedTuple, Sequence

import numpy as np

from bench.engine_stalls import decode_context, is_stall, saved_steps, stall_words
from bench.steps_beside import live_step_records, merge, priced_steps, timed_by_worker, worker_ratios
from schedulers.step_time import StepTimeModel
from schedulers.types import ROLE_BOTH

MIN_GROUP_STEPS = 20  # a group's median from fewer steps is itself too noisy to divide by
NUM_DRAWS = 201  # the quantiles kept of each set (0, 0.5%, ..., 100%): the simulator's config stays small
# The decodes of a probe step are priced at this context: the host bursts' 128-token prompts with up to
# 64 tokens out, the loops of the mix longer. Each group is divided by its own median, so the context
# only shifts a group's ratios together.
PROBE_CONTEXT = 256
KINDS = ("prefill", "decode")
SCATTER_PREFIX = "step_scatter_"  # the host's keys of a kind's draws (the rest of `host_scatter`: its stalls)
# The prefill's stretch beside another engine's decode steps, read off the probe steps (`stretch_beside_decode`):
# not a host key; the probe-stretch form sets the host's load stretch to it (`bench.sim_fidelity.sim_config_for`)
STRETCH_KEY = "prefill_stretch_beside_decode"
# The lone stream's excess beside another engine's prefill, read off the probe steps (`excess_beside_prefill`):
# not a host key; the probe-excess forms set the host's step_excess_beside_prefill_s to it
EXCESS_KEY = "decode_excess_beside_prefill_s"
# The probe steps that give it: a one-stream decode-only step on an engine of both roles, the others prefilling
EXCESS_GROUP = (ROLE_BOTH, "decode", "prefill", "1")


class ProbeSteps(NamedTuple):
    """The probe steps of a deployment (or pooled): their ratios by group, stalls left out
    (`bench.steps_beside` groups), how many of them prefilled, each stall's seconds over its
    calibrated time, and the seconds over it of the steps in EXCESS_GROUP where every engine of
    the deployment has both roles (else none: `excess_beside_prefill`)."""

    groups: dict[tuple[str, str, str, str], list[float]]
    prefill_steps: int
    stall_excess_s: list[float]
    excess_beside_prefill_s: Sequence[float] = ()


def probe_steps(saved: Sequence[Mapping[str, Any]], windows: Iterable[Sequence[float]], model: StepTimeModel,
                context: int = PROBE_CONTEXT) -> ProbeSteps:
    """The saved engine steps (`bench.engine_stalls.saved_steps`) that ended inside `windows`
    (each [start, end], wall clock), the probes' steps: each over the calibrated model's time in
    its `bench.steps_beside` group, but a stall (`is_stall`), whose seconds over the model are
    kept apart; and where every engine has both roles, the seconds over it of the steps in
    EXCESS_GROUP."""
    groups: dict[tuple[str, str, str, str], list[float]] = {}
    prefills, stalls, excess = 0, [], []
    roles = {s["worker"]: s["role"] for s in saved}
    all_both = all(role == ROLE_BOTH for role in roles.values())
    for window in windows:
        timed_steps = timed_by_worker(live_step_records(saved, (window[0], window[1])), roles)
        for key, step, predicted_s in priced_steps(timed_steps, model, context):
            prefills += step.num_prefill_tokens > 0
            if is_stall(step.time_s, predicted_s):
                stalls.append(step.time_s - predicted_s)
                continue
            groups.setdefault(key, []).append(step.time_s / predicted_s)
            if all_both and key == EXCESS_GROUP:
                excess.append(step.time_s - predicted_s)
    return ProbeSteps(groups, prefills, stalls, excess)


def scatter_by_kind(groups: Mapping[tuple[str, str, str, str], Sequence[float]],
                    min_steps: int = MIN_GROUP_STEPS) -> dict[str, list[float]]:
    """Each step's ratio over its group's median, pooled by the step's kind (KINDS), over the
    groups of `min_steps` or more."""
    out: dict[str, list[float]] = {kind: [] for kind in KINDS}
    for (_, kind, _, _), values in groups.items():
        if len(values) < min_steps:
            continue
        median = statistics.median(values)
        out[kind].extend(v / median for v in values)
    return out


def draws(values: Sequence[float], num: int = NUM_DRAWS) -> list[float]:
    """`num` evenly spaced quantiles of `values` (sorted, the least and the most included): what
    the host draws a step's factor among (`HostSpec.scatter_factor`); none of no values."""
    if not values:
        return []
    return [float(q) for q in np.quantile(values, np.linspace(0.0, 1.0, num))]


def host_scatter(by_kind: Mapping[str, Sequence[float]], prefill_steps: int = 0,
                 stall_excess_s: Sequence[float] = ()) -> dict[str, Any]:
    """The host's `step_scatter_prefill` / `step_scatter_decode` from the pooled ratios; a kind
    the probes never ran is left out (the host takes the other's for it). With the probes'
    stalls (`ProbeSteps`), the host's `stall_per_prefill_step` and `stall_excess_s` as well;
    none where no probe step stalled."""
    out: dict[str, Any] = {f"step_scatter_{kind}": draws(values) for kind, values in by_kind.items() if values}
    if stall_excess_s and prefill_steps > 0:
        out.update(stall_per_prefill_step=len(stall_excess_s) / prefill_steps, stall_excess_s=sorted(stall_excess_s))
    return out


def probes_host(probes: ProbeSteps) -> dict[str, Any]:
    """`host_scatter` of one set of probe steps, with the medians they give (`with_probe_medians`)."""
    return with_probe_medians(host_scatter(scatter_by_kind(probes.groups), probes.prefill_steps,
                                           probes.stall_excess_s), [probes])


def stretch_beside_decode(groups: Mapping[tuple[str, str, str, str], Sequence[float]],
                          min_steps: int = MIN_GROUP_STEPS) -> float | None:
    """How many times longer a prefill step ran on an engine that streams beside another engine's
    decode-only steps than beside an idle engine with nothing of its own to decode: the probe
    steps' median ratio over their calibrated time in the first case over the second's. None
    where either has fewer than `min_steps` steps (hybrid: its engine that streams has no other
    engine that decodes).

    Why (stop 56): the host's load stretch is the load probe's TTFT beside streams over its TTFT
    alone, and that TTFT holds besides the prefill the wait for the step running on its engine,
    that engine's own streams' decodes in its step, and the path's own slowing; the simulator
    prices each of those apart and then stretches the prefill by the whole ratio. On run 102
    colocated's prefill steps beside a decoding engine ran x1.45-1.56 of their calibrated time
    live and x1.75-2.10 simulated (load stretch x1.81); the probes' own steps gave x1.44."""
    def pooled(others: str, decodes: set[str] | None) -> list[float]:
        return [v for (role, kind, state, bucket), values in groups.items()
                if role == ROLE_BOTH and kind == "prefill" and state == others
                and (decodes is None or bucket in decodes) for v in values]
    beside, idle = pooled("decode", None), pooled("idle", {"0"})
    if len(beside) < min_steps or len(idle) < min_steps:
        return None
    return statistics.median(beside) / statistics.median(idle)


def excess_beside_prefill(values: Sequence[float], min_steps: int = MIN_GROUP_STEPS) -> float | None:
    """The lone stream's excess beside another engine's prefill: the median seconds over their
    calibrated time of the probe steps in EXCESS_GROUP (`ProbeSteps.excess_beside_prefill_s`); None
    from fewer than `min_steps` (hybrid: its engine that streams prefills beside a prefill-only
    engine, whose cost the host prices apart, `decode_beside_prefill`).

    Why (stop 57): the host prices a step with another engine at work at the bursts' excess with
    one stream per engine, both decoding (`step_excess_1_s`); a neighbour in a prefill step does
    its host work once per 100-400 ms step. On runs 97-103 colocated's one-stream decode steps ran
    +1.7-7.8 ms over their model beside a prefill (the run's own steps, medians per round) and
    +3.8-10.0 beside a decode step; the probe steps beside a prefill gave +1.6-6.0, where the
    simulator took +4.6-8.7."""
    return statistics.median(values) if len(values) >= min_steps else None


def with_probe_medians(scatter: Mapping[str, Any], probes: Iterable[ProbeSteps]) -> dict[str, Any]:
    """`scatter` with what `probes` (pooled) give of the `stretch_beside_decode` (under
    STRETCH_KEY) and the `excess_beside_prefill` (under EXCESS_KEY), where they give it."""
    merged: dict[tuple[str, str, str, str], list[float]] = {}
    excess: list[float] = []
    for p in probes:
        merge(merged, p.groups)
        excess += p.excess_beside_prefill_s
    out = dict(scatter)
    for key, value in ((STRETCH_KEY, stretch_beside_decode(merged)), (EXCESS_KEY, excess_beside_prefill(excess))):
        if value is not None:
            out[key] = value
    return out


def spread(values: Sequence[float]) -> float | None:
    """p90 over p50 (`bench.steps_beside.spread`'s measure, for one set)."""
    if not values:
        return None
    p50, p90 = np.quantile(values, [0.5, 0.9])
    return float(p90 / p50)


def topped_up(values: Sequence[float], model_spread: float | None) -> list[float]:
    """Draws (`draws`) shrunk around their median, in logs, so that on top of a model whose own
    steps already scatter by `model_spread` (p90 over p50) they scatter as the probes did:
    log-spreads of independent factors add in squares, so each draw's log distance from the
    median is scaled by sqrt(1 - (log model / log probes)^2); by 0 (the median alone) where the
    model scatters as much already. Unchanged when either spread is not known.

    Why (run 97, stop 53): the probes' steps scattered x1.57 (p90 over p50) and the model's own
    x1.21 (own-streams+mix); drawn on top, the simulated steps scattered x1.64-1.67, against live's
    x1.49-1.55: sqrt(log(1.21)^2 + log(1.57)^2) = log(1.63)."""
    probes = spread(values)
    if probes is None or model_spread is None or probes <= 1.0 or model_spread <= 1.0:
        return list(values)
    scale = math.sqrt(max(0.0, 1.0 - (math.log(model_spread) / math.log(probes)) ** 2))
    median = statistics.median(values)
    return [median * (v / median) ** scale for v in values]


def top_up(scatter: Mapping[str, Any], model_spread: Mapping[str, float | None]) -> dict[str, Any]:
    """The host's scatter (`host_scatter`) topped up over a model that scatters by `model_spread`
    (kind -> p90 over p50: `simulated_spread`), each kind by its own; the stalls as they are
    (the model has none)."""
    return {key: (topped_up(values, model_spread.get(key.removeprefix(SCATTER_PREFIX)))
                  if key.startswith(SCATTER_PREFIX) else values)
            for key, values in scatter.items()}


def simulated_spread(result: Any, roles: Mapping[str, str], model: StepTimeModel,
                     min_steps: int = MIN_GROUP_STEPS) -> dict[str, float | None]:
    """How a simulation's own steps scatter (`simulate(..., keep_steps=True)`; `roles`: worker ->
    role): kind -> p90 over p50 of each step's time over its group's median, grouped as the probe
    steps are (`bench.steps_beside.worker_ratios`, the decodes priced at the run's mean context)."""
    groups = worker_ratios(result.steps, roles, model, decode_context(result.records))
    return {kind: spread(values) for kind, values in scatter_by_kind(groups, min_steps).items()}


def deployment_probes(system_dir: Path, measured: Mapping[str, Any]) -> ProbeSteps:
    """The probe steps (`probe_steps`) of one deployment of a sweep: its saved engine steps
    inside the window its measurements were taken in (`measured`, the summary's record), over
    its own calibrated step model."""
    saved = saved_steps(system_dir)
    if saved is None:
        raise FileNotFoundError(f"{system_dir} holds no engine steps (bench.compare saves them since 2026-12-06)")
    return measured_probes(saved, measured, system_dir)


def measured_probes(saved: Sequence[Mapping[str, Any]], measured: Mapping[str, Any], where: Path) -> ProbeSteps:
    """`deployment_probes` of engine steps already read (`where`: their deployment's folder, for the error)."""
    from bench.sim_fidelity import step_model_from_calibration

    window = measured.get("window_s")
    if not window:
        raise ValueError(f"{where}: its measurements record no window (bench.compare records one since run 59)")
    return probe_steps(saved, [window], step_model_from_calibration(measured))


def sweep_scatter(rounds_path: Path, round_dirs: Sequence[str], measured: Sequence[Mapping[str, Mapping[str, Any]]],
                  labels: Iterable[str], measurements: str) -> list[dict[str, dict[str, Any]]]:
    """Per round, label -> the host's scatter draws and stalls (`host_scatter`), pooled as
    `measurements` pools the rest: "own", the round's own deployment's probe steps; "pooled", the
    system's over every round; "hardware", every deployment's of every round (the same host).
    `measured`: each round's summary's `measured` (label -> record)."""
    labels = list(labels)
    by_deployment = {(k, label): deployment_probes(rounds_path.parent / name / label, measured[k][label])
                     for k, name in enumerate(round_dirs) for label in labels if label in measured[k]}

    def pooled(keys: Iterable[tuple[int, str]]) -> dict[str, Any]:
        ratios: dict[str, list[float]] = {kind: [] for kind in KINDS}
        prefills, stalls = 0, []
        for key in keys:
            probes = by_deployment[key]
            for kind, values in scatter_by_kind(probes.groups).items():
                ratios[kind] += values
            prefills += probes.prefill_steps
            stalls += probes.stall_excess_s
        return host_scatter(ratios, prefills, stalls)

    def medians(scatter: Mapping[str, Any], keys: Iterable[tuple[int, str]]) -> dict[str, Any]:
        # a deployment's stretch and excess are its shape's: pooled over the system's own rounds, never wider
        return with_probe_medians(scatter, [by_deployment[key] for key in keys])

    def of_label(label: str) -> list[tuple[int, str]]:
        return [k for k in by_deployment if k[1] == label]

    if measurements == "hardware":
        every = pooled(by_deployment)
        per_label = {label: medians(every, of_label(label)) for label in labels}
        return [dict(per_label) for _ in round_dirs]
    if measurements == "pooled":
        per_label = {label: medians(pooled(of_label(label)), of_label(label)) for label in labels}
        return [dict(per_label) for _ in round_dirs]
    if measurements == "own":
        return [{label: probes_host(by_deployment[(k, label)]) for label in labels if (k, label) in by_deployment}
                for k in range(len(round_dirs))]
    raise ValueError(f"measurements must be own, pooled or hardware, got {measurements!r}")


def main(argv: list[str] | None = None) -> int:
    from bench.rate_rounds import round_summaries
    from bench.sim_fidelity import systems_of

    parser = argparse.ArgumentParser(prog="python -m bench.step_scatter", description=__doc__.split("\n\n")[0])
    parser.add_argument("--live", required=True, type=Path, help="a rates sweep's summary.json (bench.compare)")
    parser.add_argument("--out", type=Path, default=None, help="write each deployment's scatter as JSON here")
    args = parser.parse_args(argv)
    top = json.loads(args.live.read_text())
    names = top.get("round_dirs") or ["."]
    summaries = round_summaries(args.live, top) if top.get("round_dirs") else [top]
    rows, out = [], {}
    try:
        for name, summary in zip(names, summaries):
            for label in systems_of(top):
                measured = (summary.get("measured") or {}).get(label)
                if measured is None:
                    continue
                probes = deployment_probes(args.live.parent / name / label, measured)
                kinds = {kind: {"steps": len(v), "p90_over_p50": spread(v),
                                "p99_over_p50": None if not v else float(np.quantile(v, 0.99) / np.median(v)),
                                "mean": statistics.fmean(v) if v else None}
                         for kind, v in scatter_by_kind(probes.groups).items()}
                out[f"{name}/{label}"] = {**kinds, "prefill_steps": probes.prefill_steps,
                                          "stall_excess_s": sorted(probes.stall_excess_s),
                                          EXCESS_KEY: excess_beside_prefill(probes.excess_beside_prefill_s)}
                rows.append((name, label, kinds, probes))
    except (FileNotFoundError, ValueError) as error:
        print(f"bench.step_scatter: {error}", file=sys.stderr)
        return 2
    print(f"\nThe probe steps before each run ({args.live}): each step's time over its group's median, "
          f"by kind; the stalls apart (a step {stall_words()})\n")
    for name, label, kinds, probes in rows:
        stalls = ", ".join(f"{x:.2f}" for x in sorted(probes.stall_excess_s))
        stalls = f"{stalls} s over" if stalls else "none"
        print(f"{name} {label}: " + "; ".join(
            f"{kind} {k['steps']} steps, p90/p50 {_x(k['p90_over_p50'])}, p99/p50 {_x(k['p99_over_p50'])}, "
            f"mean {_x(k['mean'])}" for kind, k in kinds.items())
            + f"; stalls in {probes.prefill_steps} steps that prefilled: {stalls}"
            + _excess_words(probes.excess_beside_prefill_s))
    if args.out is not None:
        args.out.write_text(json.dumps(out, indent=1))
        print(f"wrote {args.out}")
    return 0


def _excess_words(values: Sequence[float]) -> str:
    excess = excess_beside_prefill(values)
    return "" if excess is None else (f"; a lone stream's decode step beside another engine's prefill "
                                      f"{excess * 1e3:+.1f} ms over its model ({len(values)} steps)")


def _x(value: float | None) -> str:
    return "-" if value is None else f"x{value:.2f}"


if __name__ == "__main__":
    sys.exit(main())

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
"""
from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

import numpy as np

from bench.engine_stalls import decode_context, saved_steps
from bench.steps_beside import merge, window_ratios, worker_ratios
from schedulers.step_time import StepTimeModel

MIN_GROUP_STEPS = 20  # a group's median from fewer steps is itself too noisy to divide by
NUM_DRAWS = 201  # the quantiles kept of each set (0, 0.5%, ..., 100%): the simulator's config stays small
# The decodes of a probe step are priced at this context: the host bursts' 128-token prompts with up to
# 64 tokens out, the loops of the mix longer. Each group is divided by its own median, so the context
# only shifts a group's ratios together.
PROBE_CONTEXT = 256
KINDS = ("prefill", "decode")


def probe_ratios(saved: Sequence[Mapping[str, Any]], windows: Iterable[Sequence[float]], model: StepTimeModel,
                 context: int = PROBE_CONTEXT) -> dict[tuple[str, str, str, str], list[float]]:
    """`bench.steps_beside.window_ratios` of the saved engine steps (`bench.engine_stalls.saved_steps`)
    that ended inside `windows` (each [start, end], wall clock): the probes' steps."""
    groups: dict[tuple[str, str, str, str], list[float]] = {}
    for window in windows:
        merge(groups, window_ratios(saved, (window[0], window[1]), model, context))
    return groups


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


def host_scatter(by_kind: Mapping[str, Sequence[float]]) -> dict[str, list[float]]:
    """The host's `step_scatter_prefill` / `step_scatter_decode` from the pooled ratios; a kind
    the probes never ran is left out (the host takes the other's for it)."""
    return {f"step_scatter_{kind}": draws(values) for kind, values in by_kind.items() if values}


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


def top_up(scatter: Mapping[str, Sequence[float]], model_spread: Mapping[str, float | None]) -> dict[str, list[float]]:
    """The host's scatter (`host_scatter`) topped up over a model that scatters by `model_spread`
    (kind -> p90 over p50: `simulated_spread`), each kind by its own."""
    return {key: topped_up(values, model_spread.get(key.removeprefix("step_scatter_")))
            for key, values in scatter.items()}


def simulated_spread(result: Any, roles: Mapping[str, str], model: StepTimeModel,
                     min_steps: int = MIN_GROUP_STEPS) -> dict[str, float | None]:
    """How a simulation's own steps scatter (`simulate(..., keep_steps=True)`; `roles`: worker ->
    role): kind -> p90 over p50 of each step's time over its group's median, grouped as the probe
    steps are (`bench.steps_beside.worker_ratios`, the decodes priced at the run's mean context)."""
    groups = worker_ratios(result.steps, roles, model, decode_context(result.records))
    return {kind: spread(values) for kind, values in scatter_by_kind(groups, min_steps).items()}


def deployment_groups(system_dir: Path, measured: Mapping[str, Any]) -> dict[tuple[str, str, str, str], list[float]]:
    """The probe steps' groups of one deployment of a sweep: its saved engine steps inside the
    window its measurements were taken in (`measured`, the summary's record), over its own
    calibrated step model."""
    saved = saved_steps(system_dir)
    if saved is None:
        raise FileNotFoundError(f"{system_dir} holds no engine steps (bench.compare saves them since 2026-12-06)")
    return probe_groups(saved, measured, system_dir)


def probe_groups(saved: Sequence[Mapping[str, Any]], measured: Mapping[str, Any],
                 where: Path) -> dict[tuple[str, str, str, str], list[float]]:
    """`deployment_groups` of engine steps already read (`where`: their deployment's folder, for the error)."""
    from bench.sim_fidelity import step_model_from_calibration

    window = measured.get("window_s")
    if not window:
        raise ValueError(f"{where}: its measurements record no window (bench.compare records one since run 59)")
    return probe_ratios(saved, [window], step_model_from_calibration(measured))


def sweep_scatter(rounds_path: Path, round_dirs: Sequence[str], measured: Sequence[Mapping[str, Mapping[str, Any]]],
                  labels: Iterable[str], measurements: str) -> list[dict[str, dict[str, list[float]]]]:
    """Per round, label -> the host's scatter draws (`host_scatter`), pooled as `measurements`
    pools the rest: "own", the round's own deployment's probe steps; "pooled", the system's over
    every round; "hardware", every deployment's of every round (the same host). `measured`: each
    round's summary's `measured` (label -> record)."""
    labels = list(labels)
    by_deployment = {(k, label): scatter_by_kind(deployment_groups(rounds_path.parent / name / label,
                                                                   measured[k][label]))
                     for k, name in enumerate(round_dirs) for label in labels if label in measured[k]}

    def pooled(keys: Iterable[tuple[int, str]]) -> dict[str, list[float]]:
        out: dict[str, list[float]] = {kind: [] for kind in KINDS}
        for key in keys:
            for kind in KINDS:
                out[kind] += by_deployment[key][kind]
        return host_scatter(out)

    if measurements == "hardware":
        every = pooled(by_deployment)
        return [{label: every for label in labels} for _ in round_dirs]
    if measurements == "pooled":
        per_label = {label: pooled(k for k in by_deployment if k[1] == label) for label in labels}
        return [dict(per_label) for _ in round_dirs]
    if measurements == "own":
        return [{label: pooled([(k, label)]) for label in labels if (k, label) in by_deployment}
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
                by_kind = scatter_by_kind(deployment_groups(args.live.parent / name / label, measured))
                out[f"{name}/{label}"] = {kind: {"steps": len(v), "p90_over_p50": spread(v),
                                                 "p99_over_p50": None if not v else float(np.quantile(v, 0.99)
                                                                                          / np.median(v)),
                                                 "mean": statistics.fmean(v) if v else None}
                                          for kind, v in by_kind.items()}
                rows.append((name, label, out[f"{name}/{label}"]))
    except (FileNotFoundError, ValueError) as error:
        print(f"bench.step_scatter: {error}", file=sys.stderr)
        return 2
    print(f"\nThe probe steps before each run ({args.live}): each step's time over its group's median, "
          f"by kind\n")
    for name, label, kinds in rows:
        print(f"{name} {label}: " + "; ".join(
            f"{kind} {k['steps']} steps, p90/p50 {_x(k['p90_over_p50'])}, p99/p50 {_x(k['p99_over_p50'])}, "
            f"mean {_x(k['mean'])}" for kind, k in kinds.items()))
    if args.out is not None:
        args.out.write_text(json.dumps(out, indent=1))
        print(f"wrote {args.out}")
    return 0


def _x(value: float | None) -> str:
    return "-" if value is None else f"x{value:.2f}"


if __name__ == "__main__":
    sys.exit(main())

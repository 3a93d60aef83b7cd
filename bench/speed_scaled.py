"""A deployment's measurements scaled to how fast the host ran during the run they are used for.

`bench.compare` measures each deployment while idle, minutes before its run, and since run 59
records, through `bench.host_speed`, a fixed kernel's time once a second all through. The
simulator (`bench.sim_fidelity --speed probe`) then takes every measured *time* of a deployment
(the step model's four coefficients, the request path, the path's CPU, the decode steps' measured
excesses) times the slowdown: the kernel's median time during the run over its median time
during the measurements it is given (`--measurements own`: that deployment's; `pooled`: every
round's of that system; `hardware`: every deployment's of the sweep, as the step model is
pooled). `--speed probe-runs` takes the kernel's median over every run of the sweep instead:
the measurements idle the engines between their bursts, and the kernel itself ran about 20%
slower in those windows than during the runs (run 59: 1.81-2.29 ms against 1.73-2.04), which
`probe` reads as the runs' host being faster; `probe-runs` assumes the pooled measurements
describe the sweep's typical host and scales each run by how far it ran from it. Ratios (the
prefill's stretch beside streams, cores) are left as measured, and so is the link: a transfer
over host memory is mostly copying, which the kernel does not time.
Nothing here is fitted to the runs' results: the runs' records give only their start and end.
"""
from __future__ import annotations

import copy
from typing import Any, Callable, Mapping, Sequence

from bench.host_speed import Sample, slowdown
from schedulers.step_time import COEFFICIENTS

Key = tuple[str, float]  # (system label, rate)
PATH_TIMES = ("colocated_s", "disaggregated_s", "step_gap_s")
HOST_TIMES = ("cpu_s_per_request", "cpu_s_per_token", "step_excess_1_s", "step_excess_2_s",
              "step_excess_alone_s", "step_excess_quiet_s", "step_excess_spin_s")
# (count, seconds) points
HOST_POINTS = ("step_excess_batch", "decode_beside_prefill", "decode_beside_handover", "step_excess_mix",
               "path_beside_streams")
SPEED_FORMS = ("none", "probe", "probe-runs")


def scaled_calibration(cal: Mapping[str, Any], factor: float) -> dict[str, Any]:
    """`cal` (a `measure_deployment` record) with every measured time times `factor`."""
    if not factor > 0:
        raise ValueError(f"a slowdown must be > 0, got {factor!r}")
    out = copy.deepcopy(dict(cal))
    for k in COEFFICIENTS:
        out[k] = float(cal[k]) * factor
    if out.get("router_calibration"):
        out["router_calibration"].update({k: float(v) * factor for k, v in cal["router_calibration"].items()
                                          if k in COEFFICIENTS and v is not None})
    path = out.get("request_path") or {}
    for k in PATH_TIMES:
        if path.get(k) is not None:
            path[k] = float(path[k]) * factor
    host = out.get("host") or {}
    for k in HOST_TIMES:
        if host.get(k) is not None:
            host[k] = float(host[k]) * factor
    for k in HOST_POINTS:
        if host.get(k):
            host[k] = [[n, float(v) * factor] for n, v in host[k]]
    return out


def run_window(records: Sequence[Any]) -> tuple[float, float]:
    """[first arrival, last finish] of a live run's records (`RequestRecord`s, wall clock)."""
    starts = [r.arrival_s for r in records]
    ends = [t for r in records for t in (r.finish_s, *(r.token_times[-1:] or ())) if t is not None]
    if not starts or not ends:
        raise ValueError("a run with no timed request has no window")
    return min(starts), max(ends)


def reference_windows(measured: Sequence[Mapping[str, Mapping[str, Any]]], k: int, label: str,
                      measurements: str) -> list[list[float]]:
    """When the measurements that round `k`'s `label` is simulated with were taken (see the
    module docstring for the three forms); `measured`: each round's label -> record."""
    def windows(records: Sequence[Mapping[str, Any]]) -> list[list[float]]:
        found = [list(r["window_s"]) for r in records if r.get("window_s")]
        if not found:
            raise ValueError(f"{label}: no measurement window recorded (bench.compare records one since "
                             f"run 59); the host's speed cannot be compared with the run's")
        return found
    if measurements == "own":
        return windows([measured[k][label]])
    if measurements == "pooled":
        return windows([r[label] for r in measured if label in r])
    if measurements == "hardware":
        return windows([rec for r in measured for rec in r.values()])
    raise ValueError(f"measurements must be own, pooled or hardware, got {measurements!r}")


def slowdowns(samples: Sequence[Sample], runs: Sequence[Mapping[Key, tuple[float, float]]],
              reference: Callable[[int, str], list[list[float]]], what: str = "round") -> list[dict[Key, float]]:
    """Per round (or whatever `what` names: `bench.paired_sim` passes its pairs), (label, rate) ->
    the host's slowdown during that run against the windows `reference(round, label)`. Raises
    ValueError where the probe has too few samples in either."""
    out = []
    for k, round_runs in enumerate(runs):
        factors = {}
        for (label, rate), window in round_runs.items():
            f = slowdown(samples, window, reference(k, label))
            if f is None:
                raise ValueError(f"{what} {k}, {label} at {rate:g} req/s: the host probe has too few samples "
                                 f"in the run or in its reference windows")
            factors[(label, rate)] = f
        out.append(factors)
    return out


def sweep_slowdowns(samples: Sequence[Sample], measured: Sequence[Mapping[str, Mapping[str, Any]]],
                    runs: Sequence[Mapping[Key, tuple[float, float]]], measurements: str,
                    speed: str) -> list[dict[Key, float]]:
    """`slowdowns` against the reference `speed` names (module docstring): "probe", the windows
    of the measurements each run is simulated with; "probe-runs", every run of the sweep."""
    if speed == "probe":
        return slowdowns(samples, runs, lambda k, label: reference_windows(measured, k, label, measurements))
    if speed == "probe-runs":
        every_run = [list(w) for r in runs for w in r.values()]
        return slowdowns(samples, runs, lambda k, label: every_run)
    raise ValueError(f"speed must be one of {SPEED_FORMS[1:]} here, got {speed!r}")

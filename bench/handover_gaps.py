"""A disaggregated deployment's token gaps by what was under way at the time, live beside
simulated: a prompt at the prefill engine, a request being handed over into the decode engine,
neither.

    python -m bench.handover_gaps --live DIR/summary.json [--round K] [--system disaggregated] [--host FORM]

A request is at its prefill engine from the prompt reaching it to its prefill's end, and is
handed over from there to its first token on the decode engine (the way from the prefill
engine, the KV load, the first step). Live, the router's log gives each engine's part of the
request's TTFT (vLLM's timestamps), and the request's window is split where its prefill ended
as the load probe splits its own (`bench.host_load.split_window`); simulated, the simulator
records both moments. Each gap between two tokens of a stream is classed by what was under way
at its midpoint and by the streams running then. On run 61 (disaggregated at 4.48 req/s) a gap
took about 10 ms longer in a hand-over (24-33 against 14-20 ms), where the simulator added 1 ms:
what `bench.host_load`'s `decode_beside_handover` and the simulator's `--host handover` form
now measure and charge.
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path
from typing import Mapping, Sequence


from bench.host_load import split_window
from bench.metrics import RequestRecord
from pd_serve.report import format_table

Window = tuple[float, float]
STREAM_BUCKETS = ((1, "1 stream"), (4, "2-4 streams"), (None, "5+ streams"))  # (up to, label)
STATES = ("nothing", "prefill", "hand-over", "both")
MIN_GAPS = 10  # fewer in a cell: no median


def live_windows(records: Sequence[RequestRecord], parts: Mapping[str, tuple[float, float]]
                 ) -> tuple[list[Window], list[Window]]:
    """(prefill windows, hand-over windows) of the live disaggregated requests whose engine
    parts the router logged (`bench.router_log.disaggregated_parts`), joined on `served_id`."""
    prefills, handovers = [], []
    for r in records:
        if r.ok and r.first_token_s is not None and r.served_id in parts:
            prefill, handover = split_window(r.arrival_s, r.first_token_s, *parts[r.served_id])
            prefills.append(prefill)
            handovers.append(handover)
    return prefills, handovers


def sim_windows(records: Sequence[RequestRecord], reached: Mapping[str, float], prefilled: Mapping[str, float]
                ) -> tuple[list[Window], list[Window]]:
    """The same for simulated records (`SimResult.prompt_reached_s` / `prompt_prefilled_s`)."""
    prefills, handovers = [], []
    for r in records:
        if r.ok and r.first_token_s is not None and r.request_id in prefilled:
            prefills.append((reached[r.request_id], prefilled[r.request_id]))
            handovers.append((prefilled[r.request_id], r.first_token_s))
    return prefills, handovers


def _stream_bucket(n: int) -> str:
    for up_to, label in STREAM_BUCKETS:
        if up_to is None or n <= up_to:
            return label
    raise AssertionError("the last bucket takes every count")


def classify(records: Sequence[RequestRecord], prefills: Sequence[Window], handovers: Sequence[Window]
             ) -> dict[tuple[str, str], list[float]]:
    """(state, streams bucket) -> the gaps (seconds) of every stream classed by what was under way
    at the gap's midpoint (STATES) and how many requests streamed then (their first token to
    their last). A request's first gap is its own hand-over's end, so every gap counts."""
    streams = [(r.first_token_s, r.finish_s) for r in records
               if r.ok and r.first_token_s is not None and r.finish_s is not None]
    out: dict[tuple[str, str], list[float]] = {}
    for r in records:
        if not r.ok:
            continue
        for a, b in zip(r.token_times, r.token_times[1:]):
            mid = (a + b) / 2
            in_prefill = any(s < mid < e for s, e in prefills)
            in_handover = any(s < mid < e for s, e in handovers)
            state = STATES[int(in_prefill) + 2 * int(in_handover)]
            bucket = _stream_bucket(sum(1 for s, e in streams if s < mid < e))
            out.setdefault((state, bucket), []).append(b - a)
    return out


def gaps_table(live: Mapping[tuple[str, str], list[float]], sim: Mapping[tuple[str, str], list[float]],
               min_gaps: int = MIN_GAPS) -> str:
    """One row per state, one column per streams bucket: median ms live / simulated (gaps live)."""
    def cell(gaps: Sequence[float]) -> str:
        return f"{statistics.median(gaps) * 1e3:.1f}" if len(gaps) >= min_gaps else "-"
    rows = [[state] + [f"{cell(live.get((state, b), []))} / {cell(sim.get((state, b), []))} "
                       f"({len(live.get((state, b), []))})" for _, b in STREAM_BUCKETS]
            for state in STATES]
    return format_table(["under way", *(b for _, b in STREAM_BUCKETS)], rows)


def main(argv: Sequence[str] | None = None) -> int:
    from bench.compare import rates_workload
    from bench.fidelity_rounds import live_records
    from bench.pooled_measurements import DEFAULT_STRETCH, hardware_measurements_for
    from bench.rate_rounds import round_summaries
    from bench.router_log import disaggregated_parts
    from bench.sim_fidelity import (DEFAULT_HOST_FORM, HOST_FORMS, NO_STEPS_HOST_FORM, SCATTER_FORMS,
                                    _default_model_dir, deployment_of, host_form_for, live_run_shape, scattered_config,
                                    simulate_system, step_model_from_calibration, systems_of)
    from bench.step_scatter import sweep_scatter

    ap = argparse.ArgumentParser(prog="python -m bench.handover_gaps", description=__doc__.splitlines()[0])
    ap.add_argument("--live", required=True, help="a bench.compare rates summary.json with --rounds")
    ap.add_argument("--round", type=int, default=0, help="which round (0-based)")
    ap.add_argument("--system", default="disaggregated", help="a system label of the sweep")
    ap.add_argument("--host", choices=sorted(HOST_FORMS), default=None,
                    help=f"the simulator's host form (bench.sim_fidelity --host; default {DEFAULT_HOST_FORM}, or "
                         f"{NO_STEPS_HOST_FORM} for a sweep that saved no engine steps)")
    args = ap.parse_args(argv)
    live_path = Path(args.live)
    top = json.loads(live_path.read_text())
    names = top.get("round_dirs") or []
    if not 0 <= args.round < len(names):
        print(f"bench.handover_gaps: {live_path} has {len(names)} rounds; --round must be below that "
              f"(a bench.compare --rounds sweep)", file=sys.stderr)
        return 2
    systems = systems_of(top)
    if args.system not in systems:
        print(f"bench.handover_gaps: no system {args.system!r} in the sweep ({', '.join(systems)})", file=sys.stderr)
        return 2
    summaries = round_summaries(live_path, top)
    measured = [s.get("measured") or {} for s in summaries]
    cal = hardware_measurements_for(measured, systems, DEFAULT_STRETCH)[args.round][args.system]
    round_dir = live_path.parent / names[args.round]
    args.host = host_form_for(args.host, [round_dir / args.system], "bench.handover_gaps")
    scatter = None
    if args.host in SCATTER_FORMS:  # the probe steps' scatter, pooled as the measurements are (hardware)
        try:
            scatter = sweep_scatter(live_path, names, measured, systems, "hardware")[args.round][args.system]
        except (ValueError, FileNotFoundError) as err:
            print(f"bench.handover_gaps: {err}", file=sys.stderr)
            return 2
    log_path = round_dir / args.system / "predictions.json"
    if not log_path.is_file():
        print(f"bench.handover_gaps: {log_path} is missing: the router's log gives the engines' parts",
              file=sys.stderr)
        return 2
    parts = disaggregated_parts(json.loads(log_path.read_text()))
    deployment = deployment_of(summaries[args.round], args.system, systems[args.system])
    model = _default_model_dir()
    for rate in summaries[args.round]["rates"]:
        records = live_records(round_dir, args.system, rate)
        num_requests, output_tokens = live_run_shape(summaries[args.round]["summaries"][args.system][f"rate={rate:g}"])
        step_model, workload = step_model_from_calibration(cal), rates_workload(rate, num_requests, output_tokens)
        result = simulate_system(scattered_config(args.system, deployment, cal, model, args.host, step_model, workload,
                                                  scatter), args.system, step_model, workload)
        live = classify(records, *live_windows(records, parts))
        sim = classify(result.records, *sim_windows(result.records, result.prompt_reached_s,
                                                    result.prompt_prefilled_s))
        print(f"\n{args.system} at {rate:g} req/s, {names[args.round]}: token gap median ms, live / simulated "
              f"(live gaps); host form {args.host}\n")
        print(gaps_table(live, sim))
    return 0


if __name__ == "__main__":
    sys.exit(main())

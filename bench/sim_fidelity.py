"""Simulator fidelity: the simulator, calibrated with the live CPU cost model, against live runs.

    python -m bench.sim_fidelity [--live results/rates/summary.json] [--calibration PATH]
        [--calibration-out results/cpu_calibration.json] [--out results/sim_fidelity.json]

1. Reads the live rate sweep of `python -m bench.compare --experiment rates` (its summary.json).
2. Takes, per system, what its own live deployment measured while idle, minutes before its run
   (`bench.compare` keeps it in the summary's `measured`): the CPU step-time model (the four
   coefficients of `schedulers.step_time.StepTimeModel`, its overhead including the engine
   loop's measured step gap), the P->D link (alpha, beta) and the request path
   (`pd_serve.request_path`: the time outside the engines, per route), and the host
   (`bench.host_cpu`: how much longer the engines' decode steps ran than calibrated, in short
   bursts, with a lone stream on the whole deployment and with one and two streams per engine;
   `bench.host_load`: how many times longer a prefill's TTFT is beside 1, 2 and 4 streams per
   engine). `--host` picks the host model's form (`bench.simulator.host` lists them all, with
   what each was chosen on; DEFAULT_HOST_FORM names the default): e.g. `--host load-batch` gives
   a decode step no other engine computes beside the lone stream's excess and the others the
   one-stream excess per engine, the streams it carries beyond the first what the bursts' excess
   grew by from one stream to that many, and every prefill step and the request path the load
   factor for the requests streaming at the time; `--host steps` takes the per-engine excess for
   every step; `--host cpu` the path's CPU per streamed token, over the free cores; `--host
   neighbour` prices a step that starts beside a computing engine by the router's own
   calibration, which probed all engines at once, and `--host neighbour+cpu` adds the path's
   CPU to it; `--host none` leaves the host out). For a summary without
   them: `--calibration`, or, without it, one deployment of configs/hybrid.yaml with calibration
   and the start-up link probe on, measured the same way and saved to `--calibration-out`.
   Nothing is fitted to the live runs' results.
3. Mirrors each live system (the deployment config `bench.compare` recorded as it ran, else
   its config file, e.g. configs/colocated.yaml or hybrid.yaml) as a simulation config: the
   same roles and counts, engine settings, KV pool (the CPU engine's `kv_cache_gib`), policy and
   SLOs, with the calibrated step times instead of the roofline, the start-up link model and the
   request path.
4. Serves the live runs' workloads (bucket_mix, seed 7, the same rates, request count and output
   length) in the simulator, summarizes them with `bench.metrics`, and prints for every system
   and rate live vs simulated p50 TTFT, p99 TTFT and mean TPOT with |sim - live| / live; the
   issue's target is every error within 20 %. Writes everything to `--out`.

Given the summary of a `bench.compare --rounds R` sweep, it simulates every round with that
round's own measurements and reports the rounds pooled, and each round, live and simulated,
against the other rounds' live pool (`bench.fidelity_rounds`): on this host one 60-request round
is too noisy a target to tell the simulator from the live system's own spread. With
`--measurements pooled`, every round of a system is simulated with the median of what all its
rounds measured instead (`bench.pooled_measurements`; on runs 50-51 no closer: 13 and 12 of 36 either way);
with `--measurements hardware`, the default, with one step model pooled over every system and round,
the other figures pooled over the systems whose workers are the same (runs 50-53: 18, 14, 22 and 26
of 36, against 13, 12, 23 and 25 with their own; held out 149 of 288 against 122). The hardware
form reads the prefill's stretch beside streams as one factor over the alike deployments' probes
(`--stretch flat`, the default since run 61: 15 of 24 pooled against 12 by counts), and prices a
colocated deployment's further streams by the decode growth that the sweep's deployments with one
decoding engine measured in loops of the mix (`--growth shared`, the default since stop 63: runs
114-117, 123 of 144 pooled against 118 with its own bursts, colocated's and adaptive's mean TPOT
within 20% on 31 of 32 against 23).

Engine stalls (`bench.engine_stalls`: a step at least 3x and 0.3 s over its calibrated time) are
nothing the probes before a run measure. Where the sweep's `engine_stalls.json` lies beside its
summary (`bench.compare` writes it; `--stalls` names another), it also prints the pool without
the rounds whose run held one: this sizes what the stalls did, and the target is still judged on
every round. `--stall-events FILE` simulates stalls as rare events at the rate and of the lengths
that FILE's runs had: other sweeps' files keep it out of sample (over runs 85-88, each from the
other three: a tie with the default, 100 of 120 pooled either way).

Beside the errors it prints where they lie: the mean token gap by what overlapped it
(`bench.token_gaps`), a decode step's excess by batch with nothing else on the host, and each
request's TTFT split per length bucket (`bench.ttft_split`): a colocated one into its engine's
part and the request path, a disaggregated one into its prefill engine's part and the rest.
"""
from __future__ import annotations

import argparse
import copy
import json
import statistics
import sys
import time
from collections import Counter
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping, NamedTuple, Sequence

import yaml

from bench.compare import DEFAULT_OUTPUT_TOKENS, RATES_BUCKETS, RATES_SYSTEMS, rates_workload
from bench.decode_growth import measure_decode_growth
from bench.engine_stalls import STALLS_FILE, STEPS_FILE, stall_model, stall_words, stalled_runs
from bench.fidelity_ranking import TIE, agreement, met_slo, pair_orders, ranking_table
from bench.host_cpu import measure_path_cpu
from bench.host_load import measure_load_stretch
from bench.length_stretch import measure_length_stretch
from bench.metrics import RequestRecord, SloSpec, summarize, write_json
from bench.pooled_measurements import (DEFAULT_GROWTH, DEFAULT_MEASUREMENTS, DEFAULT_STRETCH, GROWTH_FORMS,
                                       MEASUREMENTS, STRETCH_FORMS, STRETCH_PROBES, hardware_measurements_for,
                                       hardware_only_error, stretch_ratios)
from bench.prefill_alone import alone_summary
from bench.prefill_beside import measure_prefill_beside, probe_routes
from bench.simulator.config import SimConfig, build_cluster, build_policy, sim_config_from_dict
from bench.simulator.host import (LENGTH_RATIO, STRETCH_DECODE_NEIGHBOUR, STRETCH_OWN_STREAMS,
                                  STRETCH_PREFILL_ONLY_BUSY)
from bench.simulator.simulator import SimResult, simulate
from bench.simulator.specs import EngineSpec
from bench.speed_scaled import SPEED_FORMS, scaled_calibration
from bench.step_scatter import EXCESS_KEY, STRETCH_KEY, sweep_scatter
from bench.token_gaps import CLASSES, QUIET_MAX_BATCH, classify_gaps, gap_summary, quiet_excess_by_batch
from bench.ttft_split import live_engine_ttft, sim_engine_ttft, split_keys, split_summary
from bench.workloads import Workload
from pd_serve.config import config_from_dict
from pd_serve.report import format_table
from pd_serve.request_path import measure_request_path
from schedulers.candidates import decode_engines, prefill_engines
from schedulers.model_spec import ModelSpec
from schedulers.step_time import COEFFICIENTS, StepTimeModel
from schedulers.types import ROLE_BOTH, ROLE_PREFILL, ROUTE_COLOCATED, ROUTE_DISAGGREGATED
from transfer.kv_geometry import KVGeometry

TOLERANCE = 0.20
# (name, summary path): the compared quantities.
METRICS: tuple[tuple[str, tuple[str, str]], ...] = (("p50_ttft_s", ("ttft_s", "p50")),
                                                    ("p99_ttft_s", ("ttft_s", "p99")),
                                                    ("mean_tpot_s", ("tpot_s", "mean")))
CALIBRATION_CONFIG = "configs/hybrid.yaml"
# The host model's forms (bench.simulator.host) and the measured keys each takes.
# The neighbour forms take their step model from the record's `router_calibration` (the
# engines probed all at once) besides.
HOST_FORMS: dict[str, tuple[str, ...]] = {"steps": ("num_cores", "step_excess_1_s", "step_excess_2_s"),
                                          "cpu": ("num_cores", "cpu_s_per_token"),
                                          "neighbour-steps": ("num_cores", "step_excess_alone_s", "step_excess_1_s",
                                                              "step_excess_2_s"),
                                          "load": ("num_cores", "step_excess_alone_s", "step_excess_1_s",
                                                   "step_excess_2_s", "load_stretch", "load_stretch_beside"),
                                          "load-path": ("num_cores", "step_excess_alone_s", "step_excess_1_s",
                                                        "step_excess_2_s", "load_stretch", "load_stretch_beside",
                                                        "cpu_s_per_token"),
                                          "load-batch": ("num_cores", "step_excess_alone_s", "step_excess_1_s",
                                                         "step_excess_2_s", "step_excess_batch", "load_stretch",
                                                         "load_stretch_beside"),
                                          "load-beside": ("num_cores", "step_excess_alone_s", "step_excess_1_s",
                                                          "step_excess_2_s", "step_excess_batch", "load_stretch",
                                                          "load_stretch_beside", "decode_beside_prefill"),
                                          "path-cores": ("num_cores", "step_excess_alone_s", "step_excess_1_s",
                                                         "step_excess_2_s", "step_excess_batch", "load_stretch",
                                                         "load_stretch_beside", "decode_beside_prefill",
                                                         "cpu_s_per_request"),
                                          "neighbour": ("num_cores",),
                                          "neighbour+cpu": ("num_cores", "cpu_s_per_token"),
                                          "none": ()}
HOST_FORMS["spin"] = (*HOST_FORMS["path-cores"], "step_excess_quiet_s", "step_excess_spin_s")
HOST_FORMS["handover"] = (*HOST_FORMS["path-cores"], "decode_beside_handover")
# read as path-cores, each with its stretch rule (bench.simulator.host)
STRETCH_RULE_FORMS = {"neighbour-stretch": STRETCH_PREFILL_ONLY_BUSY, "decode-neighbour": STRETCH_DECODE_NEIGHBOUR,
                      "prefill-neighbour": STRETCH_DECODE_NEIGHBOUR, "mix-growth": STRETCH_DECODE_NEIGHBOUR,
                      "path-beside": STRETCH_DECODE_NEIGHBOUR}
HOST_FORMS.update({form: HOST_FORMS["path-cores"] for form in STRETCH_RULE_FORMS})
# decode-neighbour with the stretch measured beside another engine's prefills (bench.prefill_beside)
HOST_FORMS["prefill-neighbour"] = (*HOST_FORMS["path-cores"], "stretch_beside_prefill")
# prefill-neighbour with a single decode engine's growth by batch from loops of the mix (bench.decode_growth)
HOST_FORMS["mix-growth"] = (*HOST_FORMS["prefill-neighbour"], "step_excess_mix")
# mix-growth with the colocated route's request path as measured beside streams (bench.host_load)
HOST_FORMS["path-beside"] = (*HOST_FORMS["mix-growth"], "path_beside_streams")
# path-beside with a prefill's stretch scaled by its prompt's length (bench.length_stretch)
HOST_FORMS["length"] = (*HOST_FORMS["path-beside"], "length_probe", "length_probe_beside", "load_probe")
STRETCH_RULE_FORMS["length"] = STRETCH_DECODE_NEIGHBOUR
# length with every prefill at the length probe's alone time over its calibrated steps besides
HOST_FORMS["length-alone"] = HOST_FORMS["length"]
STRETCH_RULE_FORMS["length-alone"] = STRETCH_DECODE_NEIGHBOUR
# mix-growth without the two probes stop 37 and stop 39 added on top of decode-neighbour: a prefill
# beside another engine's prefill at its engine time, and the colocated path the idle
# deployment's, stretched by the prefill's factor (the default since stop 45: see DEFAULT_HOST_FORM)
HOST_FORMS["decode-neighbour+mix"] = (*HOST_FORMS["path-cores"], "step_excess_mix")
STRETCH_RULE_FORMS["decode-neighbour+mix"] = STRETCH_DECODE_NEIGHBOUR
# decode-neighbour+mix with each prefill step's stretch drawn among the load probes' own prompts
# (`stretch_draws`), not their median
HOST_FORMS["stretch-draws"] = (*HOST_FORMS["decode-neighbour+mix"], "load_stretch_draws", "load_stretch_beside_draws")
STRETCH_RULE_FORMS["stretch-draws"] = STRETCH_DECODE_NEIGHBOUR
# decode-neighbour with hybrid's engine that streams priced as its load probe measured it: its
# prefills stretched beside its own streams, not by a prefill-only engine's work; and with
# mix-growth's further streams (the default since stop 52: see DEFAULT_HOST_FORM)
HOST_FORMS["own-streams"] = HOST_FORMS["path-cores"]
STRETCH_RULE_FORMS["own-streams"] = STRETCH_OWN_STREAMS
HOST_FORMS["own-streams+mix"] = HOST_FORMS["decode-neighbour+mix"]
STRETCH_RULE_FORMS["own-streams+mix"] = STRETCH_OWN_STREAMS
# own-streams+mix with each step's time drawn around its modelled time by the probe steps' own
# scatter before the run (bench.step_scatter)
HOST_FORMS["step-scatter"] = HOST_FORMS["own-streams+mix"]
STRETCH_RULE_FORMS["step-scatter"] = STRETCH_OWN_STREAMS
# step-scatter with the probes' scatter drawn only as far as the model's own steps (simulated under
# own-streams+mix first: this form without its draws) fall short of it (`bench.step_scatter.top_up`)
HOST_FORMS["scatter-top-up"] = HOST_FORMS["own-streams+mix"]
STRETCH_RULE_FORMS["scatter-top-up"] = STRETCH_OWN_STREAMS
# scatter-top-up with medians read off the same probe steps (`bench.step_scatter.with_probe_medians`),
# where they give them: probe-stretch the prefill's stretch beside another engine's decode steps
# (`stretch_beside_decode`), not the load probe's TTFT ratio; probe-excess the lone stream's excess beside
# another engine's prefill (`excess_beside_prefill`), not the bursts' excess beside its decode steps;
# probe-steps both; and the probe-length forms (below) are probe-steps with more on top
PROBE_LENGTH_FORMS = ("probe-length", "probe-length-alone")
PROBE_STRETCH_FORMS = ("probe-stretch", "probe-steps", *PROBE_LENGTH_FORMS)
PROBE_EXCESS_FORMS = ("probe-excess", "probe-steps", *PROBE_LENGTH_FORMS)
PROBE_FORMS = ("probe-stretch", "probe-excess", "probe-steps")
HOST_FORMS.update({form: HOST_FORMS["scatter-top-up"] for form in PROBE_FORMS})
STRETCH_RULE_FORMS.update({form: STRETCH_OWN_STREAMS for form in PROBE_FORMS})
# probe-steps with a prefill's stretch scaled by its prompt's length as the length probe measured it
# beside streams, the factor as a whole (host.LENGTH_RATIO, which takes a probe with no stretch at the
# load probe's 1,024 tokens, as hybrid's engine that streams gives); probe-length-alone with the probe's
# time alone over the calibrated steps besides, as length-alone
HOST_FORMS.update({form: (*HOST_FORMS["probe-steps"], "length_probe", "length_probe_beside", "load_probe")
                   for form in PROBE_LENGTH_FORMS})
STRETCH_RULE_FORMS.update({form: STRETCH_OWN_STREAMS for form in PROBE_LENGTH_FORMS})
DRAW_FORMS = ("stretch-draws",)
SCATTER_FORMS = ("step-scatter", "scatter-top-up", *PROBE_FORMS, *PROBE_LENGTH_FORMS)
# The forms that draw only what the probes' scatter adds to the scatter of their own steps, simulated first
# without the draws (for scatter-top-up that is own-streams+mix; a probe form keeps its probe medians)
TOP_UP_FORMS = ("scatter-top-up", *PROBE_FORMS, *PROBE_LENGTH_FORMS)
# The form for a run that saved no engine steps, whose scatter the default (a top-up form) draws from
NO_STEPS_HOST_FORM = "own-streams+mix"
LENGTH_FORMS = ("length", "length-alone", *PROBE_LENGTH_FORMS)
ALONE_FORMS = ("length-alone", "probe-length-alone")
NEIGHBOUR_FORMS = ("neighbour", "neighbour+cpu")
PATH_SLOPE_FORMS = ("load-path",)


# Each simulated run (system, rate) of round k draws its stalls from seed 1000 k + its index: one
# stream per run, as the live runs each had their own.
STALL_SEEDS_PER_ROUND = 1000
# `--seeds N` scores a drawing form N times, its seeds offset by this times 0 .. N-1: far past any
# sweep's 1000 k + index, so no two scorings share a run's draws.
SEED_OFFSET_STRIDE = 10_000


class Measured(NamedTuple):
    """A measurement some forms read, which records from before it was measured lack: `keys`
    (any one of them will do), the deployments it applies to (`applies(role_counts)`), what
    measures it and since when (`what`), and the form to pass for such a record (`fallback`).
    `empty_is_missing`: an empty list of points counts as not measured (else it is a probe that
    saw too few gaps, and the form reads it as nothing to add)."""

    keys: tuple[str, ...]
    applies: Callable[[Mapping[str, int]], bool]
    what: str
    fallback: str
    empty_is_missing: bool = False

    def fallback_for(self, host_form: str) -> str:
        """The form to pass for a record that lacks this measurement, read by `host_form`: the
        form it extends without it (FALLBACK_FOR), else `fallback`."""
        return FALLBACK_FOR.get((host_form, self.keys), self.fallback)


def _always(role_counts: Mapping[str, int]) -> bool:
    return True


# (form, Measured.keys) -> the form to pass where the record lacks them, where it is not the
# Measured's own fallback (that names the form the measurement was added on top of)
FALLBACK_FOR = {("decode-neighbour+mix", ("step_excess_mix",)): "decode-neighbour",
                ("own-streams+mix", ("step_excess_mix",)): "own-streams",
                ("stretch-draws", ("step_excess_mix",)): "decode-neighbour",
                **{(form, ("length_probe",)): "probe-steps" for form in PROBE_LENGTH_FORMS}}
# The records a form refuses, in the order they are checked: the first missing is named.
MEASURED_SINCE = (
    Measured(("load_stretch",), _always, "the prefill's stretch under load (`bench.host_load`, measured since "
             "the evening of 2026-12-01)", "neighbour-steps"),
    Measured(("step_excess_batch",), _always, "the decode steps' excess at large batches (`bench.host_cpu`, "
             "measured since run 28)", "load-path", empty_is_missing=True),
    Measured(("decode_beside_prefill",), lambda roles: ROLE_PREFILL in roles, "what a decode step loses beside "
             "the prefill-only engine's prefill (`bench.host_load`, measured since run 30)", "load-batch"),
    Measured(("decode_beside_handover",), lambda roles: ROLE_PREFILL in roles, "what a decode step loses while "
             "a request is handed over to its engine (`bench.host_load`'s decode_handover, measured since stop "
             "35)", "path-cores"),
    Measured(("step_excess_quiet_s", "step_excess_spin_s"), _always, "the lone stream's excess by whether the "
             "other engines stepped within vLLM's spin window (`bench.neighbour_spin`, measured since run 54)",
             "path-cores"),
    Measured(("stretch_beside_prefill",), lambda roles: prefill_engines(roles) > 1, "a prefill's stretch beside "
             "another engine's prefills (`bench.prefill_beside`, measured since stop 37)", "decode-neighbour"),
    Measured(("step_excess_mix",), lambda roles: decode_engines(roles) == 1, "the decode steps' excess in loops "
             "of the workload's mix (`bench.decode_growth`, measured since stop 38)", "prefill-neighbour"),
    Measured(("length_probe",), _always, "the prefill's stretch by prompt length (`bench.length_stretch`, "
             "measured since run 80)", "path-beside"),
    # measured where the load probe goes colocated (load_probe_route), the only route it times a path on
    Measured(("path_beside_streams",), lambda roles: load_probe_route(set(roles)) == ROUTE_COLOCATED,
             "the colocated route's request path "
             "beside streams (`bench.host_load`'s probes less their engine's part, measured since stop 39)",
             "mix-growth"),
)

# With the engines calibrated one at a time (2026-12-01, `measure_deployment`), the path-CPU
# form came closest on runs 8-10 (35, 29, 30 of 36). The neighbour-steps form, built from run
# 12's token gaps (a decode step doubles while the other engine decodes), came to 34 and 32 on
# runs 13 and 14, fresh, against 28 and 33 for the path CPU (mean TPOT 11 and 10 of 12 within
# 20%, against 5 and 11): the default until run 22. At 2-8 req/s (runs 19-21) it priced the
# 3,000-token prompts 20-58% fast at 8 req/s; the load form, which also stretches prefills and
# the request path by the factor measured beside streams, came to 21 and 20 of 36 on run 22's
# two rounds against 19 and 16 (p99 TTFT 9 and 9 of 12 against 7 and 5; at 8 req/s 3 and 5
# against 1 and 2): the default until run 25. The load-path form, which takes each further
# stream in a decode step at the path's CPU per streamed token, came to 185 of 252 on the seven
# saved rounds of runs 22-24 it was chosen on (load: 165), and to 28, 20 and 26 of 36 on run 25's
# three, fresh (load: 22, 19, 23; mean TPOT 21 of 36 within 20% against 11): the default since.
# On run 26 it tied with load (66 of 108 each); its linear slope overshoots the TPOT of a single
# decode engine carrying 6-10 streams at 8 req/s (79-111% high in one round), and on the slower
# host of runs 28-29 (2.1-2.9 ms per token) the simulated 8 req/s melted down (TPOT 2-4.5x live).
# The load-batch form, built before run 28 and measured from it on, takes the further streams
# from the decode excess measured at 4 and 8 streams per engine: on runs 28 and 29, fresh, 21
# and 20 of 36 pooled (load-path 15 and 20), 43 and 50 held out (load-path 48 and 34; the live
# rounds 46 and 46), no meltdown: the default since. Records from before run 28 have no batch
# points: --host load-path for them. The load-beside form adds to a decode step that runs while a
# prefill-only engine prefills what the probe saw the streams' gaps grow by there (measured since
# run 30): on run 30, 24 of 36 pooled against 23 and 26 held out against 24 (the live rounds 19);
# on run 32 (another, 3-6x slower machine, every system past its capacity at 4-8 req/s), 12
# against 11 and 35 against 31 (the live rounds 67 of 108): the default since. Records from before
# run 30 have no such points: --host load-batch for them. The path-cores form adds that every
# step loses a share of its core while requests are on their request path (each keeps the
# path's measured CPU per request over its measured time busy, 0.56-0.77 cores, spread over
# the host's cores: the engines' loops spin on sched_yield, so no core looks free to the OS).
# Live, run 47's disaggregated decode gaps beside another request's first 8 ms took 2-5 ms
# longer than the rest. Built on runs 37-47 (results/rates_v40-v50; chosen on them, no
# coefficient fitted): 302 of 396 figures within 20% pooled against 286 (better on 8 of the 11
# runs, worse on runs 41-42, on the machine's slow hours), held out 572 of 792 against 551;
# disaggregated's mean TPOT 20 of 33 within 20% against 10. Taking the paths' cores from the free
# cores first instead came to 289 and 556. The default until stop 36. Two forms change when a
# prefill is stretched (the host's stretch rule). neighbour-stretch adds the stretch beside a
# computing engine to a prefill on an engine that streams while a prefill-only engine computes
# (only hybrid has both): chosen on runs 59-64 (results/rates_v62-v67), 78 of 144 pooled against
# 68, held out 135 of 288 against 132; on run 65, fresh, a tie (11 of 24, 21 of 48), hybrid's
# TTFT now high. decode-neighbour stretches a prefill only in the cases the probes measured:
# beside another engine's decode-only step, or (as neighbour-stretch) beside a prefill-only
# engine at work; at its engine time beside an idle engine or one in a step with a prompt's
# chunk. Built on run 65, 21 of 24 pooled and 40 of 48 held out there against path-cores' 11 and
# 21; on runs 59-64, 72 of 144 and 147 of 288 (path-cores 68 and 132); on run 66, fresh, 21 of 24
# and 32 of 48 against 12 and 23, where the live rounds held each other to 29. The default until
# stop 37. prefill-neighbour adds the stretch of a prefill beside another engine's step with a
# prompt's chunk, which decode-neighbour took as none, measured by its own probe before each run
# (`bench.prefill_beside`, since run 67: x1.28-1.42 on colocated and adaptive, x1.03-1.14 on
# hybrid). Runs 59-66 had no such probe; with stop 37's factor (x1.25, measured on the idle
# deployments that day) carried back to them: 126 of 192 pooled against 114, held out 226 of 384
# against 219 (x1.15: 125 and 233; x1.35: 124 and 223), colocated 36 of 48 against 30, hybrid 25
# against 20, hybrid's p99 TTFT 7% low against 30%. On runs 67-69, fresh and measured: 17, 19 and
# 17 of 24, 32, 37 and 30 of 48, against 16, 18 and 19, 27, 35 and 34 (the live rounds 22, 35, 35):
# a tie pooled, 99 against 96 held out. The default until stop 38, on the totals over runs 59-69
# (179 of 264 pooled against 167). mix-growth prices the further streams of a single decode
# engine's step by the line through the excess measured in loops of the workload's mix
# (`bench.decode_growth`, since run 70), where the bursts' 128-token points had not risen while
# the live steps grew 0.4-0.8 ms a stream on every run of 59-69. With each round's growth taken
# from the other round's live quiet steps (an upper bound), runs 67-69 came to 60 of 72 pooled
# against 53. Fresh and measured, run 70: 20 of 24 pooled and 37 of 48 held out, against
# prefill-neighbour's 17 and 35 (the live rounds 38); run 71: 16 and 33 against 13 and 27 (the
# live rounds 38). Disaggregated's and hybrid's mean TPOT, 7 of 8 within 20% over both runs
# against 2 of 8. The default in stop 38 (runs 72-73, fresh: 16 and 16 of 24 pooled). path-beside
# reads the colocated route's request path from the load probe's own probes beside each count of
# streams (their TTFT less their engine's part, measured since stop 39) instead of the idle
# deployment's path, probed after a second of quiet, stretched by the prefill's factor: on run 73
# that gave every colocated and adaptive request 26.8 ms where they took 16-23 ms live (colocated's
# p50 TTFT +20% at both rates). Built on run 73 (its probes' paths recovered from the router's
# log): 17 of 24 pooled and 30 of 48 held out against 16 and 28; on run 74, fresh: 19 and 37
# against 18 and 36 (the live rounds 38). A small gain, within the runs' noise; the default since
# because it measures the path at the load it is used at, where the old rule assumed it. The
# default until stop 45. decode-neighbour+mix is mix-growth without the two probes that
# prefill-neighbour and path-beside added beside a prefill (another engine's prefill; the path
# beside streams): chosen on runs 74-82, 299 of 384 figures within 20% pooled and 557 of 768 held
# out against path-beside's 291 and 533; fresh, on the two runs of four rounds pooled (83 and 84),
# 47 and 44 of 48 against 46 and 42, held out 184 and 162 of 192 against 179 and 161 (the live
# rounds 166 and 138). It trades colocated (closer) against hybrid (further), and has adaptive's
# figures within 20% on all 24 of those runs against 21. stretch-draws (stop 48) draws each prefill's
# stretch among the load probes' own prompts instead of taking their median: over runs 85-88, 102
# of 120 pooled and 396 of 480 held out against 100 and 392 (medians over five sets of seeds), a
# tie that leaves hybrid's p99 TTFT where it was on the fresh run 88. own-streams+mix (stop 52) is
# decode-neighbour+mix with one rule changed, on hybrid's engine that streams: its prefills take
# its own load probe's stretch beside its streams (the probe's very case), not the prefill-only
# engine's stretch while that engine computes. Set step by step beside the live engines' own
# (`bench.steps_beside`, runs 90, 94, 95, 96), that engine's prefills beside a prefilling
# prefill-only engine ran x1.06-1.38 of their calibrated time (median by streams), as beside it
# idle, where the old rule gave x1.61-2.09: the simulated router priced the engine that streams
# slow and sent 2x live's share of prompts to the prefill engine (run 96: 90-98 of 240 at 7.24-10.3 req/s, live 45-59).
# Under the new rule the shares match (46-56), and the steps' medians come within 15% of live's.
# Fresh, run 96: 19 of 24 pooled and 73 of 96 held out (the live rounds 71), against 17 and 67.
# Over runs 85-95 (saved, 10 sweeps) it came to 203 of 288 pooled and 684 of 984 held out
# against 209 and 692 (the old rule's error in the step offset others there: hybrid's mean TPOT
# within 20% in 23 of 48 against 32, its p99 TTFT in 20 against 16). The default until stop 55.
# scatter-top-up (stop 54) is own-streams+mix with every step's time drawn around the model's from
# the probe steps' own scatter, shrunk so that on top of the model's own scatter the steps scatter as
# the probes did (`bench.step_scatter.top_up`). Chosen on runs 97-99 (results/rates_v100-v102), scored
# on four draw seeds each (`--seeds 4`): 57.25 of 84 figures within 20% pooled and 169.75 of 264 held
# out on average, against own-streams+mix's 51 and 149, every seed ahead on both totals. Fresh, run
# 100 (rates_v103, 3 systems, 2 rounds; its engines calibrated faster than run 99's, step overhead
# 5.36 ms against 6.39, its live figures about run 99's): 25.5 of 36 pooled and 41.25 of 72 held out
# (seeds 23-27, 39-43), against 4 and 16 (the live rounds 34). own-streams+mix priced every figure
# fast there (mean TPOT 23-45% low); the top-up's draws, skewed long, lengthen the steps' mean.
# The default since stop 55. A sweep that saved no engine steps (before 2026-12-06) has nothing to
# draw from: the tools simulate it under own-streams+mix (NO_STEPS_HOST_FORM), and say so. Since stop
# 56 the probe steps that stalled are the host's stalls, in seconds, not factors of its draws
# (`bench.step_scatter`): runs 97-101, 99.75 of 144 pooled and 272.5 of 432 held out, against 97.25, 264.5.
# Fresh, run 102 (rates_v105): 12.75 of 24 and 52.25 of 96, own-streams+mix 18 and 70 (the engines ran near
# their calibration); run 103 (rates_v106): 10.25 and 17.5 of 48, own-streams+mix 9 and 21. probe-stretch
# (stop 56) scored 125.25 of 168 and 357.5 of 528 on runs 97-102, where it was built, against 112.5 and
# 324.75; on run 103, fresh, 10.5 and 17.75: not the default.
# probe-steps (stop 57) is probe-stretch with the lone stream's excess beside another engine's prefill
# read off the probe steps too (`bench.step_scatter.excess_beside_prefill`): the host priced those
# decode steps at the bursts' excess beside a decode step, +4.6-8.7 ms where they ran +1.7-7.8 live.
# Runs 97-103 over four seeds: 139.75 of 192 pooled and 381.5 of 576 held out (scatter-top-up 122.75,
# 342.25; probe-stretch 137, 368.75; probe-excess alone 127.75, 356.75). Fresh, run 104 (rates_v107):
# 12.75 of 24 and 21.75 of 48, against 10.25 and 19 (probe-stretch 13, 22.75; own-streams+mix 15 and
# 27; the live rounds 19); run 105 (rates_v108): 15.75 and 26.75, against 14 and 23.75 (own-streams+mix 10
# and 21; the live rounds 24). The default since stop 57. probe-length and probe-length-alone (stop 62, by
# prompt length on top of it; bench.simulator.host) scored 57.75 and 55.25 of 72 pooled and 97.25 and 89.5 of
# 144 held out over runs 114-115, four seeds, against its 57 and 92.5: not the default.
DEFAULT_HOST_FORM = "probe-steps"
GIB = 1 << 30
BESIDE_SALT = 100  # the prefill-only engine's load probe: prompts of its own (bench.host_load)


# ---- calibration -----------------------------------------------------------------------------

def calibration_record(coefficients: Mapping[str, Any], spec: ModelSpec, kv: KVGeometry,
                       link: Mapping[str, Any], **extra: Any) -> dict[str, Any]:
    """The JSON a run saves and `--calibration` reads: coefficients, the model and KV geometry
    they were fitted for, and the link (alpha_s, beta_bytes_per_s) the simulator uses."""
    return {**{k: float(coefficients[k]) for k in COEFFICIENTS},
            "model_spec": asdict(spec), "kv_geometry": asdict(kv),
            "link": {"alpha_s": float(link["alpha_s"]), "beta_bytes_per_s": float(link["beta_bytes_per_s"])},
            **extra}


def calibration_from_deployment(dep: Any, request_path: Mapping[str, Any] | None = None,
                                host: Mapping[str, Any] | None = None,
                                router_calibration: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """What a started `pd_serve.Deployment` measured: its calibration and its links (and the
    request path, `pd_serve.request_path.RequestPath.to_dict()`, the path's CPU,
    `bench.host_cpu.PathCpu.to_dict()`, and the router's own calibration summary when it differs
    from the one recorded, when measured)."""
    if dep.calibration is None:
        raise ValueError("the deployment was not calibrated (scheduler.calibrate is off)")
    model = dep.calibration.model
    info = next(iter(dep.infos.values()))
    probe = dep.link_probes[0].fit if dep.link_probes else None
    probe_fit = None if probe is None else {"alpha_s": probe.alpha_s, "beta_bytes_per_s": probe.beta_bytes_per_s,
                                            "r2": probe.r2}
    router_links = [{"prefill_id": m["prefill_id"], "decode_id": m["decode_id"],
                     "alpha_s": m["model"]["alpha_s"], "beta_bytes_per_s": m["model"]["beta_bytes_per_s"],
                     "engine_overhead_s": m.get("engine_overhead_s"),
                     "engine_s_per_byte": m.get("engine_s_per_byte")}
                    for m in (dep.links_at_start or {}).get("models", [])]
    # The router's start-up model (probe line + what vLLM's load path adds) is what transfers
    # take live; the raw probe fit only when the router has none.
    link = router_links[0] if router_links else probe_fit
    if link is None:
        raise ValueError("the deployment has no link model (no prefill/decode pair was probed)")
    return calibration_record({k: getattr(model, k) for k in COEFFICIENTS}, model.spec, model.kv, link,
                              calibration=dep.calibration.summary(), probe_fit=probe_fit,
                              router_links=router_links, request_path=dict(request_path or {}),
                              host=dict(host or {}),
                              router_calibration=dict(router_calibration or {}),
                              hf_config=json.loads(json.dumps(info.hf_config, default=str)),
                              block_size=info.block_size, kv_dtype=info.kv_dtype,
                              config=dep.config.name, measured_at=time.strftime("%Y-%m-%dT%H:%M:%S"))


def calibrate_live(config_path: str = CALIBRATION_CONFIG) -> dict[str, Any]:
    """Deploy `config_path` once with calibration and the link probe on; return what it measured."""
    from pd_serve import deploy

    cfg = yaml.safe_load(Path(config_path).read_text())
    cfg.setdefault("scheduler", {})["calibrate"] = True
    cfg.setdefault("transfer", {})["probe_at_start"] = True
    print(f"calibrating: deploying {config_path} (calibration + link probe) ...", file=sys.stderr, flush=True)
    dep = deploy(cfg)
    try:
        print(f"  ready in {dep.start_s:.0f}s", file=sys.stderr, flush=True)
        return measure_deployment(dep)
    finally:
        dep.shutdown()


def measure_deployment(dep: Any) -> dict[str, Any]:
    """What the simulator needs of a live deployment, measured on it while it is idle: the step
    model (with the step gap), the start-up link models, the request path and its CPU.

    The step model is measured again with each engine probed alone (the router's own probes all
    engines at once): the simulator adds the host's load itself (`bench.simulator.host`), and
    the request path and the host are measured against this calibration too. The router's
    calibration is kept in the record as well (`router_calibration`): the difference between the
    two is what each engine's steps lose to the other engine's at the same moment, the input a
    host model that charges a step for its neighbour's work would need."""
    import ray

    from pd_serve.deployment import calibrate_engines

    router_calibration = dep.calibration.summary() if dep.calibration is not None else None
    dep = replace(dep, calibration=calibrate_engines(dep.workers, dep.infos, one_at_a_time=True))
    path = measure_request_path(dep)
    print(f"    request path: colocated {_ms(path.colocated_s)} ms, disaggregated "
          f"{_ms(path.disaggregated_s)} ms (step gap {_ms(path.step_gap_s)} ms)", file=sys.stderr, flush=True)
    host = measure_path_cpu(dep)
    print(f"    path CPU: {host.background_cores:.3f} cores idle, {host.cpu_s_per_request * 1e3:.1f} ms per "
          f"request, {host.cpu_s_per_token * 1e3:.2f} ms per token; on {host.num_cores} cores; decode steps "
          f"{_signed_ms(host.step_excess_1_s)} / {_signed_ms(host.step_excess_2_s)} ms over the calibration "
          f"with 1 / 2 streams per engine, {_signed_ms(host.step_excess_alone_s)} ms with a lone stream"
          f" ({_signed_ms(host.step_excess_quiet_s)} / {_signed_ms(host.step_excess_spin_s)} ms with the others "
          f"idle past / inside the spin window)"
          + "".join(f", {_signed_ms(e)} ms with {n}" for n, e in host.step_excess_batch),
          file=sys.stderr, flush=True)
    role_counts = Counter(info.role for info in dep.infos.values())
    roles = set(role_counts)
    route = load_probe_route(roles)
    head_s = path.colocated_s if route == ROUTE_COLOCATED else path.disaggregated_s
    router_log = lambda: ray.get(dep.router.prediction_errors.remote())  # noqa: E731
    load = measure_load_stretch(dep, route=route, head_s=head_s or 0.0, router_log=router_log)
    _print_stretch("prefill beside streams", load)
    host_record = {**host.to_dict(), "load_stretch": [list(p) for p in load.points], "load_probe": load.to_dict(),
                   "load_probe_route": route}
    if load.path_points:
        print("    request path beside streams: " + ", ".join(f"{_ms(s)} ms with {n}" for n, s in load.path_points),
              file=sys.stderr, flush=True)
        host_record["path_beside_streams"] = [list(p) for p in load.path_points]
    if ROLE_PREFILL in roles:
        # A prefill-only engine streams nothing itself. Where the router may also prefill on an
        # engine that streams, the probe above may not have gone to it: send it there.
        beside = load if ROLE_BOTH not in roles else measure_load_stretch(
            dep, route=ROUTE_DISAGGREGATED, salt_base=BESIDE_SALT, head_s=path.disaggregated_s or 0.0,
            router_log=router_log)
        if beside is not load:
            _print_stretch("prefill on the prefill-only engine beside streams", beside)
        print("    decode beside the prefill-only engine's prefill: "
              + (", ".join(f"{_signed_ms(e)} ms with {n}" for n, e in beside.decode_beside) or "too few gaps"),
              file=sys.stderr, flush=True)
        print("    decode while a request is handed over to its engine: "
              + (", ".join(f"{_signed_ms(e)} ms with {n}" for n, e in beside.decode_handover) or "too few gaps"),
              file=sys.stderr, flush=True)
        host_record.update(load_stretch_beside=[list(p) for p in beside.points], load_probe_beside=beside.to_dict(),
                           decode_beside_prefill=[list(p) for p in beside.decode_beside],
                           decode_beside_handover=[list(p) for p in beside.decode_handover])
    host_record.update(_length_probes(dep, roles, router_log))
    routes = probe_routes(role_counts)
    if routes is not None:
        neighbour = measure_prefill_beside(dep, routes, router_log)
        print(f"    prefill beside another engine's prefills: x{neighbour.factor:.2f} (median "
              f"{_ms(statistics.median(neighbour.beside_s))} ms against {_ms(statistics.median(neighbour.alone_s))} "
              f"ms alone; {neighbour.dropped} probe(s) dropped, sharing an engine)", file=sys.stderr, flush=True)
        host_record.update(stretch_beside_prefill=neighbour.factor, prefill_beside_probe=neighbour.to_dict())
    if decode_engines(role_counts) == 1:
        growth = measure_decode_growth(dep, RATES_BUCKETS)
        print("    decode steps in loops of the rates mix: "
              + ", ".join(f"{_signed_ms(e)} ms with {n}" for n, e in growth.points)
              + f" over the calibration ({growth.context_tokens:.0f}-token contexts; {growth.seconds:.0f} s)",
              file=sys.stderr, flush=True)
        host_record["decode_growth_probe"] = growth.to_dict()
        if growth.usable:
            host_record.update(step_excess_mix=[list(p) for p in growth.points],
                               step_excess_mix_context_tokens=growth.context_tokens)
    return calibration_from_deployment(dep, path.to_dict(), host_record, router_calibration)


def _length_probes(dep: Any, roles: set[str], router_log: Callable[[], Any]) -> dict[str, Any]:
    """The stretch by prompt length (`bench.length_stretch`, read by the length forms): on
    an engine that streams where there is one, and on the prefill-only engine where there is one."""
    routes = {"length_probe": ROUTE_COLOCATED if ROLE_BOTH in roles else ROUTE_DISAGGREGATED}
    if ROLE_PREFILL in roles and ROLE_BOTH in roles:
        routes["length_probe_beside"] = ROUTE_DISAGGREGATED
    out = {}
    for i, (key, route) in enumerate(routes.items()):
        probe = measure_length_stretch(dep, route, router_log, salt_base=1000 * i)
        print(f"    prefill beside {probe.streams} stream(s) by prompt length, {route}, inside the engine: "
              + ", ".join(f"x{f:.2f} at {n}" for n, f in probe.points), file=sys.stderr, flush=True)
        out[key] = probe.to_dict()
    return out


def _check_measured(label: str, host_form: str, host_spec: Mapping[str, Any], role_counts: Mapping[str, int]) -> None:
    """Refuse a record that lacks a measurement `host_form` reads (MEASURED_SINCE), naming the
    form that does without it."""
    for m in MEASURED_SINCE:
        read = [k for k in m.keys if k in HOST_FORMS[host_form]]
        missing = (None, [], ()) if m.empty_is_missing else (None,)
        if read and m.applies(role_counts) and all(host_spec.get(k) in missing for k in read):
            raise ValueError(f"{label}: host form {host_form!r} needs {m.what}; this record has none: "
                             f"pass --host {m.fallback_for(host_form)} for it")


def load_probe_route(roles: set[str]) -> str:
    """The route of the load probe (`bench.host_load`) for a deployment of workers in `roles`:
    the stretch the simulator reads from it is that of a prefill on an engine that streams, so
    where there is one the probe is sent there (colocated), not wherever the adaptive router
    would put it (on hybrid, perhaps the idle prefill-only engine). Without one, every probe
    goes disaggregated (auto). Hybrid's factor did not move with it (x1.10 on run 64's first
    round, x1.12-1.16 on route auto in runs 61-63, against colocated's x1.6-2.1): beside the
    streams of one engine the other core is free, where colocated's two engines both stream."""
    return ROUTE_COLOCATED if ROLE_BOTH in roles else "auto"


def _stretch_text(points: Sequence[Sequence[float]]) -> str:
    return ", ".join(f"x{f:.2f} with {n}" for n, f in points)


def _print_stretch(what: str, load: Any) -> None:
    print(f"    {what}: " + _stretch_text(load.points)
          + f" (a {load.probe_prompt_tokens}-token prompt, {statistics.median(load.samples[0]) * 1e3:.0f} ms alone)",
          file=sys.stderr, flush=True)


def step_model_from_calibration(cal: Mapping[str, Any]) -> StepTimeModel:
    """The calibrated `StepTimeModel`: `model_spec`/`kv_geometry` if given, else from `hf_config`
    (+ `block_size`, `kv_dtype`) as `pd_serve.deployment.calibrate_engines` builds them."""
    if "model_spec" in cal:
        spec = ModelSpec(**cal["model_spec"])
        kv = KVGeometry(**cal["kv_geometry"])
    elif "hf_config" in cal:
        spec = ModelSpec.from_hf_config(cal["hf_config"], dtype=None)
        kv = KVGeometry.from_hf_config(cal["hf_config"], int(cal["block_size"]), cal.get("kv_dtype"))
    else:
        raise ValueError("calibration needs model_spec + kv_geometry, or hf_config + block_size")
    return StepTimeModel(spec, kv, *(float(cal[k]) for k in COEFFICIENTS))


# ---- the simulated deployments ---------------------------------------------------------------

def cpu_kv_blocks(kv_cache_gib: float, kv: KVGeometry) -> int:
    """KV blocks of a CPU engine: the worker sets VLLM_CPU_KVCACHE_SPACE to whole GiB."""
    return int(max(1, round(kv_cache_gib)) * GIB // kv.bytes_per_block)


def path_cores(cpu_s_per_request: float | None, request_path: Mapping[str, Any], role_counts: Mapping[str, int],
               label: str) -> float:
    """The cores a request keeps busy while on its request path: the path's CPU per request
    (`bench.host_cpu`'s bursts) over the path's time for the route those bursts took (all
    disaggregated without an engine that serves both phases, else mostly colocated)."""
    if cpu_s_per_request is None:
        raise ValueError(f"{label}: host form 'path-cores' needs the path's CPU per request "
                         f"(`bench.host_cpu`); this record has none: pass --host load-beside for it")
    key = "colocated_s" if role_counts.get(ROLE_BOTH, 0) else "disaggregated_s"
    path_s = float(request_path.get(key) or 0.0)
    if path_s <= 0:
        raise ValueError(f"{label}: host form 'path-cores' needs the request path's {key} (measured "
                         f"by pd_serve.request_path); this record has none")
    return cpu_s_per_request / path_s


def length_host(length_probe: Mapping[str, Any] | None, length_probe_beside: Mapping[str, Any] | None,
                load_probe: Mapping[str, Any] | None, label: str) -> dict[str, Any]:
    """The length forms' host keys from the recorded probes: the length probe's points (on the
    prefill-only engine too, where probed there), and the load probe's prompt length, the one
    its factors were measured at."""
    if not load_probe or not load_probe.get("probe_prompt_tokens"):
        raise ValueError(f"{label}: the length forms need the load probe's prompt length "
                         f"(`bench.host_load`'s load_probe); this record has none")
    assert length_probe is not None  # _check_measured refused the record without it
    out = {"length_stretch": [list(p) for p in length_probe["points"]],
           "length_reference_tokens": int(load_probe["probe_prompt_tokens"])}
    if length_probe_beside:
        out["length_stretch_beside"] = [list(p) for p in length_probe_beside["points"]]
    return out


def alone_host(length_probe: Mapping[str, Any], length_probe_beside: Mapping[str, Any] | None,
               step_model: StepTimeModel, role_engine: Mapping[str, Mapping[str, Any]]) -> dict[str, Any]:
    """The length-alone form's host keys: each probed length's median part alone in the engine
    over the calibrated steps of its prompt, chunked as the simulated engine would chunk it alone
    (the colocated route's probes prefilled on an engine that serves both phases, the
    disaggregated route's on the prefill-only engine)."""
    out = {}
    for key, probe in (("length_alone", length_probe), ("length_alone_beside", length_probe_beside)):
        if not probe:
            continue
        engine = EngineSpec(**role_engine[ROLE_BOTH if probe["route"] == ROUTE_COLOCATED else ROLE_PREFILL])
        points = []
        for length, by_streams in sorted(probe["engine_s"].items(), key=lambda kv: int(kv[0])):
            n = int(length)
            chunk = min(engine.prefill_cap(n), engine.max_num_batched_tokens)  # a lone prompt's step
            calibrated_s = sum(step_model.chunked_prefill_steps_s(n, 0, chunk))
            points.append([n, statistics.median(by_streams["0"]) / calibrated_s])
        out[key] = points
    return out


def sim_config_for(label: str, deployment: Mapping[str, Any], cal: Mapping[str, Any], model: str,
                   host_form: str = NO_STEPS_HOST_FORM, draw_seed: int = 0,
                   stalls: Mapping[str, Any] | None = None,
                   scatter: Mapping[str, Any] | None = None, scatter_seed: int = 0,
                   draws: bool = True) -> SimConfig:
    """One simulation config (one policy entry, `label`) mirroring a CPU deployment config dict,
    with the calibration's host in `host_form` (one of HOST_FORMS; what was measured of it; by
    default the form that needs no scatter draws, which the command line's default takes).
    `draw_seed`: where a form draws (DRAW_FORMS), the seed of its draws. `stalls`: engine stalls
    as rare events (`bench.engine_stalls.stall_model`, with the run's own `stall_seed`).
    `scatter`: where a form scatters the steps (SCATTER_FORMS), the probe steps' draws and stalls
    (`bench.step_scatter.host_scatter`), drawn from `scatter_seed`; `stalls`, when given, replace
    the probes' stalls. `draws=False`: the form's host with the probe steps' medians and without
    their draws and stalls (a top-up form's base, `run_scatter`).

    `model`: a directory with the served model's config.json (what `SimConfig.model` checks);
    the step times are the calibration's, given to `build_cluster` (see `simulate_system`)."""
    data = copy.deepcopy(dict(deployment))
    data["device"] = "cpu"  # the live runs compared are CPU runs
    cfg = config_from_dict(data, source=label)
    kv = step_model_from_calibration(cal).kv
    role_engine = {}
    for role, rc in cfg.workers.items():
        if rc.count <= 0:
            continue
        e = rc.engine
        if e.block_size != kv.block_size:
            raise ValueError(f"{label}: workers.{role} block_size {e.block_size} differs from the "
                             f"calibration's {kv.block_size}")
        role_engine[role] = {"max_num_batched_tokens": e.max_num_batched_tokens, "max_num_seqs": e.max_num_seqs,
                             "block_size": e.block_size, "enable_chunked_prefill": e.enable_chunked_prefill,
                             "long_prefill_token_threshold": e.long_prefill_token_threshold,
                             "max_model_len": e.max_model_len, "num_kv_blocks": cpu_kv_blocks(e.kv_cache_gib, kv)}
    link = cal["link"]
    path = cal.get("request_path") or {}
    if host_form not in HOST_FORMS:
        raise ValueError(f"host_form must be one of {sorted(HOST_FORMS)}, got {host_form!r}")
    host = cal.get("host") or {}
    host_spec = {k: host[k] for k in HOST_FORMS[host_form] if host.get(k) is not None}
    if host_spec:
        _check_measured(label, host_form, host_spec, cfg.role_counts())
    if "cpu_s_per_request" in HOST_FORMS[host_form] and host_spec:  # the path-cores forms
        host_spec["path_cores"] = path_cores(host_spec.pop("cpu_s_per_request", None), path, cfg.role_counts(), label)
    if host_form in LENGTH_FORMS and host_spec:
        probes = host_spec.pop("length_probe", None), host_spec.pop("length_probe_beside", None)
        host_spec.update(length_host(*probes, host_spec.pop("load_probe", None), label))
        if host_form in ALONE_FORMS:
            host_spec.update(alone_host(*probes, step_model_from_calibration(cal), role_engine))
        if host_form in PROBE_LENGTH_FORMS:
            host_spec["length_shape"] = LENGTH_RATIO
    if host_form in STRETCH_RULE_FORMS and host_spec:
        host_spec["stretch_rule"] = STRETCH_RULE_FORMS[host_form]
    if host_form in DRAW_FORMS and host_spec:
        host_spec.update(stretch_draws(cal), draw_seed=draw_seed)
    if host_form in SCATTER_FORMS and host_spec:
        if not scatter:
            raise ValueError(f"{label}: host form {host_form!r} needs the probe steps' scatter (bench.step_scatter: "
                             f"the engine steps a sweep saved since 2026-12-06); none given")
        scatter = dict(scatter)
        stretch = scatter.pop(STRETCH_KEY, None)
        excess = scatter.pop(EXCESS_KEY, None)
        if draws:
            host_spec.update({k: list(v) if isinstance(v, (list, tuple)) else v for k, v in scatter.items()},
                             scatter_seed=scatter_seed)
        if stretch is not None and host_form in PROBE_STRETCH_FORMS and host_spec.get("load_stretch"):
            # the probe steps' stretch at every count the load probe measured (they pool every count)
            host_spec["load_stretch"] = [[n, stretch] for n, _ in host_spec["load_stretch"]]
        if excess is not None and host_form in PROBE_EXCESS_FORMS:
            host_spec["step_excess_beside_prefill_s"] = excess
        if draws and "stall_excess_s" in scatter:  # the probes' stalls, drawn from the run's seed too
            host_spec["stall_seed"] = scatter_seed
    if host_form in PATH_SLOPE_FORMS and host_spec:  # the path's CPU per token is the slope here
        if "cpu_s_per_token" not in host_spec:
            raise ValueError(f"{label}: host form {host_form!r} needs the path's CPU per streamed token "
                             f"(`bench.host_cpu`); this record has none")
        host_spec["stream_step_s"] = host_spec.pop("cpu_s_per_token")
    if host_form in NEIGHBOUR_FORMS and host_spec:
        together = cal.get("router_calibration") or {}
        if together.get("probed") != "all engines at once":
            raise ValueError(f"{label}: host form {host_form!r} needs the step model calibrated with all "
                             f"engines probed at once (the record's router_calibration, measured since "
                             f"2026-12-01); this record has {together.get('probed', 'none')!r}")
        host_spec["neighbour"] = {k: float(together[k]) for k in COEFFICIENTS}
    if stalls:  # last: the forms above read an empty host_spec as a host not measured; and given, they
        # replace the probes' stalls a scattering form took (a drawn stall is a stall either way)
        host_spec.update(stalls)
    slo = cfg.scheduler.slo
    return sim_config_from_dict({
        "name": f"{cfg.name}-cpu-calibrated", "model": model, "hardware": "cpu",
        "engine": next(iter(role_engine.values())), "role_engine": role_engine,
        "link": {"alpha_s": link["alpha_s"], "bandwidth_bytes_per_s": link["beta_bytes_per_s"]},
        "request_path": {k: float(path.get(k) or 0.0) for k in ("colocated_s", "disaggregated_s")},
        "host": host_spec,
        "policies": {label: {"policy": cfg.scheduler.policy, "workers": cfg.role_counts(),
                             "params": dict(cfg.scheduler.params),
                             "speed_by_role": cfg.scheduler.speed_by_role}},
        "slo": {"ttft_buckets": [list(b) for b in slo.ttft_buckets], "tpot_slo_s": slo.tpot_s},
    }, source=label)


def stretch_draws(cal: Mapping[str, Any]) -> dict[str, list[float]]:
    """The stretch-draws form's factors (`<key>_draws`, `bench.pooled_measurements.STRETCH_PROBES`):
    the record's own where the hardware measurements pooled them over alike deployments, else its
    load probes' (`stretch_ratios`). Refuses a record whose load probe has no prompts beside
    streams and alone: there is nothing to draw from."""
    host = cal.get("host") or {}
    draws = {}
    for key, probe in STRETCH_PROBES:
        values = host.get(f"{key}_draws") or stretch_ratios([cal], probe)
        if values:
            draws[f"{key}_draws"] = sorted(values)
    if "load_stretch_draws" not in draws:
        raise ValueError("the stretch-draws form needs the load probe's prompts alone and beside streams "
                         "(`bench.host_load` samples); this record has none")
    return draws


def run_scatter(host_form: str, scatter: Mapping[str, Any] | None, label: str,
                deployment: Mapping[str, Any], cal: Mapping[str, Any], model: str, step_model: StepTimeModel,
                workload: Workload, draw_seed: int = 0,
                stalls: Mapping[str, Any] | None = None) -> Mapping[str, Any] | None:
    """The scatter draws one run of `host_form` takes: the probes' (`scatter`) as they are, or for a
    top-up form (TOP_UP_FORMS) only what they add to the scatter of its own steps, measured on the
    same run simulated first under the same form without the draws (`bench.step_scatter.top_up`).

    Until stop 63 that first simulation ran under own-streams+mix for every top-up form, so a probe
    form's draws were shrunk by the scatter of steps priced without its probe medians (colocated's
    prefills stretched by the load probe's x1.6-1.8, not the probe steps' x1.3-1.5)."""
    if host_form not in TOP_UP_FORMS or not scatter:
        return scatter
    from bench.step_scatter import simulated_spread, top_up

    base = sim_config_for(label, deployment, cal, model, host_form, draw_seed, stalls, scatter, draws=False)
    cluster = build_cluster(base, label, step_model=step_model)
    result = simulate(workload, cluster, build_policy(base, label, cluster),
                      speed_by_role=base.policies[label].speed_by_role, keep_steps=True)
    return top_up(scatter, simulated_spread(result, {w.worker_id: w.role for w in cluster.workers}, step_model))


def scattered_config(label: str, deployment: Mapping[str, Any], cal: Mapping[str, Any], model: str,
                     host_form: str, step_model: StepTimeModel, workload: Workload,
                     scatter: Mapping[str, Any] | None = None, draw_seed: int = 0,
                     stalls: Mapping[str, Any] | None = None, scatter_seed: int = 0) -> SimConfig:
    """`sim_config_for` one run of `workload`, with the scatter draws `host_form` takes for it
    (`run_scatter`: a top-up form's measured on the same run simulated under its base form)."""
    draws = run_scatter(host_form, scatter, label, deployment, cal, model, step_model, workload, draw_seed, stalls)
    return sim_config_for(label, deployment, cal, model, host_form, draw_seed, stalls, draws, scatter_seed)


def sweep_system_dirs(live_path: Path, live: Mapping[str, Any]) -> list[Path]:
    """Every deployment folder of a rates sweep (`bench.compare`): one per round and system."""
    return [live_path.parent / name / label for name in live.get("round_dirs") or ["."]
            for label in systems_of(live) if label in (live.get("summaries") or {})]


def host_form_for(requested: str | None, system_dirs: Iterable[Path], tool: str) -> str:
    """The host form `tool` simulates with: `requested` (its --host) as given; else the default
    (DEFAULT_HOST_FORM) where every one of `system_dirs` holds its deployment's saved engine steps,
    which the default scatters steps by; else NO_STEPS_HOST_FORM, said so on stderr. Sweeps saved
    before 2026-12-06, and `bench.paired` runs, hold no engine steps."""
    if requested is not None:
        return requested
    dirs = list(system_dirs)
    missing = [d for d in dirs if not (d / STEPS_FILE).is_file()]
    if dirs and not missing:
        return DEFAULT_HOST_FORM
    fallback = NO_STEPS_HOST_FORM
    where = f"{missing[0]} holds no {STEPS_FILE}" if missing else "no deployment folder was given"
    print(f"{tool}: host form {fallback}, not the default {DEFAULT_HOST_FORM}: {where}, and the default "
          f"scatters every step by the probe steps saved there (bench.compare saves them since 2026-12-06)",
          file=sys.stderr, flush=True)
    return fallback


def simulate_system(config: SimConfig, label: str, step_model: StepTimeModel, workload: Workload) -> SimResult:
    """Serve `workload` on the config's cluster with the calibrated step times."""
    cluster = build_cluster(config, label, step_model=step_model)
    return simulate(workload, cluster, build_policy(config, label, cluster),
                    speed_by_role=config.policies[label].speed_by_role)


def live_run_shape(summary: Mapping[str, Any]) -> tuple[int, int]:
    """(requests, output tokens per request) of a live run, from its summary (every request
    asked for the same output length with ignore_eos, so output tokens / requests is it)."""
    num_requests = int(summary["num_requests"])
    tput, tokens = summary.get("throughput_rps"), summary.get("output_tokens_per_s")
    output_tokens = round(tokens / tput) if tput and tokens else DEFAULT_OUTPUT_TOKENS
    return num_requests, output_tokens


def same_requests(workload: Workload, records: Sequence[Mapping[str, Any]]) -> bool:
    """Whether the live records asked what the workload asks (ids and prompt lengths)."""
    asked = sorted((r.request_id, r.input_tokens) for r in workload.requests)
    return asked == sorted((r["request_id"], r["input_tokens"]) for r in records)


# ---- comparison ------------------------------------------------------------------------------

def rel_error(sim: float | None, live: float | None) -> float | None:
    """|sim - live| / live; None when either is missing or live is 0."""
    if sim is None or live is None or live == 0:
        return None
    return abs(sim - live) / abs(live)


def compare_summaries(live: Mapping[str, Any], sim: Mapping[str, Any],
                      tolerance: float = TOLERANCE) -> dict[str, Any]:
    """Per metric: live, sim, rel_error, ok (within `tolerance`)."""
    out = {}
    for name, (group, stat) in METRICS:
        lv, sv = live[group][stat], sim[group][stat]
        err = rel_error(sv, lv)
        out[name] = {"live": lv, "sim": sv, "rel_error": err, "ok": err is not None and err <= tolerance}
    return out


def _ms(v: float | None) -> str:
    return "-" if v is None else f"{v * 1e3:.1f}"


def _signed_ms(v: float | None) -> str:
    return "-" if v is None else f"{v * 1e3:+.2f}"


def _pct(err: float | None, tolerance: float) -> str:
    if err is None:
        return "-"
    return f"{err * 100:.1f}%" + ("" if err <= tolerance else " *")


def fidelity_table(rows: Sequence[Mapping[str, Any]], tolerance: float = TOLERANCE) -> str:
    """Markdown table: per system and rate, live / sim / error of each metric (ms; * over tolerance)."""
    headers = ["system", "rate"]
    for name, _ in METRICS:
        short = name.replace("_s", "")
        headers += [f"{short} live ms", f"{short} sim ms", f"{short} err"]
    headers.append("all ok")
    body = []
    for r in rows:
        line: list[Any] = [r["system"], f"{r['rate']:g}"]
        for name, _ in METRICS:
            m = r["metrics"][name]
            line += [_ms(m["live"]), _ms(m["sim"]), _pct(m["rel_error"], tolerance)]
        line.append("yes" if all(r["metrics"][n]["ok"] for n, _ in METRICS) else "no")
        body.append(line)
    return format_table(headers, body)


# The classes the gaps table shows: the own+nb-* ones are rare at these rates.
GAP_CLASSES = CLASSES[:4]


def _live_beside_sim(rows: Sequence[Mapping[str, Any]], field: str, keys: Sequence[Any], stat: str,
                     key_of: Any = lambda k: k, fmt: Callable[[float], str] = _ms) -> list[list[str]]:
    """Table rows: system, rate, then per key "live / sim ms (live count)" of `row[field]`'s
    live and sim summaries (`stat` of each, written by `fmt`), for the rows whose live records
    were found. `key_of` reads a summary's keys (JSON turns numbers into strings). A row with
    nothing live (no records found, or none of the kind summarized) is left out."""
    body = []
    for r in rows:
        both = r.get(field) or {}
        if not both.get("live"):
            continue
        live, sim = ({key_of(k): v for k, v in (both.get(side) or {}).items()} for side in ("live", "sim"))
        body.append([r["system"], f"{r['rate']:g}"] + [
            f"{fmt(live[k][stat]) if k in live else '-'} / {fmt(sim[k][stat]) if k in sim else '-'}"
            f" ({live[k]['count'] if k in live else 0})" for k in keys])
    return body


def gaps_table(rows: Sequence[Mapping[str, Any]]) -> str:
    """Markdown table: per system and rate, the mean inter-token gap live / simulated (ms) by what
    overlapped it (`bench.token_gaps`), for the rows whose live records were found."""
    return format_table(["system", "rate"] + [f"{c} live / sim ms (live gaps)" for c in GAP_CLASSES],
                        _live_beside_sim(rows, "token_gaps", GAP_CLASSES, "mean_s"))


QUIET_HEADING = ("a decode step's excess over its calibrated model, by batch, with nothing else on the host "
                 "(bench.token_gaps.quiet_excess_by_batch): median live / sim ms (live gaps)")


def quiet_excess_table(rows: Sequence[Mapping[str, Any]]) -> str:
    """Markdown table: per system and rate, a decode step's excess over its calibrated model by
    batch, in the gaps with nothing else on the host (`bench.token_gaps.quiet_excess_by_batch`),
    live / simulated ms (live gaps), for the rows whose live records were found. Where the live
    excess grows with the batch and the simulated one does not, the host model's batch points
    (the bursts before the run) miss what the run's own streams cost."""
    batches = range(1, QUIET_MAX_BATCH + 1)
    return format_table(["system", "rate"] + [f"{n}{'+' if n == QUIET_MAX_BATCH else ''} streams live / sim ms"
                                              for n in batches],
                        _live_beside_sim(rows, "quiet_excess", batches, "median_s", key_of=int))


SPLIT_ROUTES = (ROUTE_COLOCATED, ROUTE_DISAGGREGATED)
SPLIT_HEADINGS = {
    ROUTE_COLOCATED: "the TTFT of colocated requests split into the engine's part (queue + prefill, from the "
                     "prompt reaching its engine) and the request path's",
    ROUTE_DISAGGREGATED: "the TTFT of disaggregated requests split into the prefill engine's part (queue + "
                         "prefill) and the rest (path, hand-over, KV transfer, the decode engine's first step)"}


def split_heading(route: str) -> str:
    return f"{SPLIT_HEADINGS[route]}, by length bucket (bench.ttft_split): median live / sim ms (live requests)"


def ttft_split_table(rows: Sequence[Mapping[str, Any]], buckets: Sequence[str] = tuple(RATES_BUCKETS),
                     route: str = ROUTE_COLOCATED) -> str:
    """Markdown table: per system and rate, the median two parts of the TTFT of the requests on
    `route` per length bucket (`bench.ttft_split`), live / simulated ms (live count), for the rows
    whose live records and router log were found."""
    keys = split_keys(buckets, route)
    return format_table(["system", "rate"] + [f"{k} live / sim ms" for k in keys],
                        _live_beside_sim(rows, f"ttft_split_{route}", keys, "median_s"))


ALONE_HEADINGS = {ROUTE_COLOCATED: "a colocated prompt alone at its engine",
                  ROUTE_DISAGGREGATED: "a disaggregated prompt alone at its prefill engine"}


def alone_heading(route: str) -> str:
    return (f"{ALONE_HEADINGS[route]} (no other prompt's time in that engine overlapping its own): its engine "
            f"part over its calibrated prefill step, by length bucket (bench.prefill_alone): median live / sim "
            f"(live requests)")


def prefill_alone_table(rows: Sequence[Mapping[str, Any]], buckets: Sequence[str] = tuple(RATES_BUCKETS),
                        route: str = ROUTE_COLOCATED) -> str:
    """Markdown table: per system and rate, the stretch a prompt alone at its engine met
    (`bench.prefill_alone`), live / simulated (live count), by length bucket."""
    return format_table(["system", "rate"] + [f"{b} live / sim" for b in buckets],
                        _live_beside_sim(rows, f"prefill_alone_{route}", buckets, "median", fmt=lambda v: f"x{v:.2f}"))


def _print_splits(rows: Sequence[Mapping[str, Any]], prefix: str = "") -> None:
    """Each route's split table and its prompts-alone table, for the routes some row has live
    requests on."""
    for route in SPLIT_ROUTES:
        if any((r.get(f"ttft_split_{route}") or {}).get("live") for r in rows):
            print(f"\n{prefix}{split_heading(route)}\n")
            print(ttft_split_table(rows, route=route))
        if any((r.get(f"prefill_alone_{route}") or {}).get("live") for r in rows):
            print(f"\n{prefix}{alone_heading(route)}\n")
            print(prefill_alone_table(rows, route=route))


def _every_part(by_route: Mapping[str, Mapping[str, float]]) -> dict[str, float]:
    """request id -> its first TTFT part, whichever route it took (a lone prompt's window is
    checked against every prompt on its engine, `bench.prefill_alone`)."""
    return {rid: part for parts in by_route.values() for rid, part in parts.items()}


def _routes(records: Sequence[RequestRecord]) -> dict[str, int]:
    out: dict[str, int] = {}
    for r in records:
        out[str(r.route)] = out.get(str(r.route), 0) + 1
    return out


def calibration_for(live: Mapping[str, Any], label: str, cal: Mapping[str, Any] | None) -> Mapping[str, Any]:
    """What the simulator uses for `label`: what its own live deployment measured before its run
    (the live summary's `measured`, written by `bench.compare` since it records them), else `cal`."""
    own = (live.get("measured") or {}).get(label)
    if own is not None:
        return own
    if cal is None:
        raise ValueError(f"{label}: the live summary holds no measurements of its deployment; "
                         f"give --calibration or let this script calibrate")
    return cal


def deployment_of(live: Mapping[str, Any], label: str, path: str) -> dict[str, Any]:
    """The deployment config `label` served in the run summarized by `live` (a round's summary):
    as `bench.compare` recorded it (`deployments`, since stop 52), else the config file at `path`
    as it reads now."""
    recorded = (live.get("deployments") or {}).get(label)
    return copy.deepcopy(recorded) if recorded is not None else yaml.safe_load(Path(path).read_text())


def systems_of(live: Mapping[str, Any]) -> Mapping[str, str]:
    """The systems a rates summary served (label -> config; `bench.compare --systems`); summaries
    from before it recorded them served RATES_SYSTEMS."""
    return live.get("systems") or RATES_SYSTEMS


def run_fidelity(live: Mapping[str, Any], cal: Mapping[str, Any] | None, model: str,
                 systems: Mapping[str, str] = RATES_SYSTEMS, live_dir: Path | None = None,
                 tolerance: float = TOLERANCE, progress: bool = True,
                 host_form: str = NO_STEPS_HOST_FORM,
                 sim_records: dict[tuple[str, float], list[RequestRecord]] | None = None,
                 speed: Mapping[tuple[str, float], float] | None = None,
                 draw_seed: int = 0, stalls: Mapping[str, Any] | None = None,
                 scatter: Mapping[str, Mapping[str, Any]] | None = None,
                 seed_offset: int = 0) -> list[dict[str, Any]]:
    """Simulate every system of the live summary at every live rate; one row per (system, rate).
    Each system runs on its own deployment's measurements when the summary has them, else `cal`;
    `host_form`: which of the host model's forms (HOST_FORMS) to simulate with. `sim_records`,
    when given, receives each (system, rate)'s simulated records. `speed`, when given: (system,
    rate) -> the host's slowdown during that run, by which its measured times are scaled
    (`bench.speed_scaled`). `draw_seed`: the seed of a drawing host form's draws (DRAW_FORMS) and
    of the stalls'. `stalls`: engine stalls as rare events (`bench.engine_stalls.stall_model`), each
    run's drawn from a seed of its own (`stall_seed`). `scatter`: label -> the probe steps' scatter
    (`bench.step_scatter`) for a scattering form (SCATTER_FORMS; `sim_config_for` refuses one
    without it). Each run draws its steps' factors from a seed of its own. `seed_offset`: added to
    every seed drawn from, to score the same form on other draws (`--seeds`)."""
    slo = SloSpec()  # bench.compare summarizes with the default SLOs
    rows = []
    for label, path in systems.items():
        if label not in live["summaries"]:
            print(f"{label}: not in the live summary, skipped", file=sys.stderr)
            continue
        system_cal = calibration_for(live, label, cal)
        if progress:
            print(f"{label}: {_calibration_line(system_cal)}", file=sys.stderr, flush=True)
        deployment = deployment_of(live, label, path)
        system_scatter = (scatter or {}).get(label)
        # The router's log (bench.ttft_split) holds every rate's requests: read once per system.
        log_path = live_dir / label / "predictions.json" if live_dir else None
        log = json.loads(log_path.read_text()) if log_path is not None and log_path.is_file() else None
        t0 = time.perf_counter()
        for rate in live["rates"]:
            key = f"rate={rate:g}"
            factor = (speed or {}).get((label, rate))
            rate_cal = system_cal if factor is None else scaled_calibration(system_cal, factor)
            step_model = step_model_from_calibration(rate_cal)
            run_seed = seed_offset + STALL_SEEDS_PER_ROUND * draw_seed + len(rows)
            run_stalls = None if not stalls else {**stalls, "stall_seed": run_seed}
            live_summary = live["summaries"][label][key]
            num_requests, output_tokens = live_run_shape(live_summary)
            workload = rates_workload(rate, num_requests, output_tokens)
            config = scattered_config(label, deployment, rate_cal, model, host_form, step_model, workload,
                                      system_scatter, draw_seed + seed_offset, run_stalls, run_seed)
            matches = None
            records_path = live_dir / label / key.replace("=", "_") / "records.json" if live_dir else None
            live_gaps = live_quiet = live_split = live_alone = live_taken_back = None
            decode_step_s = lambda contexts: step_model.predict(0, 0, contexts)  # noqa: E731
            prefill_s = lambda tokens: step_model.predict(tokens)  # noqa: E731
            if records_path is not None and records_path.is_file():
                live_records = json.loads(records_path.read_text())
                matches = same_requests(workload, live_records)
                parsed = [RequestRecord.from_dict(d) for d in live_records]
                live_taken_back = sum(1 for r in parsed if r.fallback and "stalled" in r.fallback)
                live_gaps = gap_summary(classify_gaps(parsed))
                live_quiet = quiet_excess_by_batch(parsed, decode_step_s)
                if log is not None:
                    live_engine = {route: live_engine_ttft(parsed, log, route) for route in SPLIT_ROUTES}
                    live_split = {route: split_summary(parsed, live_engine[route], route) for route in SPLIT_ROUTES}
                    live_alone = {route: alone_summary(parsed, live_engine[route], prefill_s, _every_part(live_engine))
                                  for route in SPLIT_ROUTES}
            result = simulate_system(config, label, step_model, workload)
            if sim_records is not None:
                sim_records[(label, rate)] = list(result.records)
            sim_summary = summarize(result.records, slo)
            sim_engine = {route: sim_engine_ttft(result.records, result.prompt_reached_s, result.prompt_prefilled_s,
                                                 route) for route in SPLIT_ROUTES}
            metrics = compare_summaries(live_summary, sim_summary, tolerance)
            rows.append({"system": label, "rate": rate, "num_requests": num_requests,
                         "output_tokens": output_tokens, "workload_matches_live": matches,
                         "metrics": metrics, "met_slo": {"live": met_slo(live_summary), "sim": met_slo(sim_summary)},
                         "live_routes": live_summary.get("routes"),
                         "sim_routes": _routes(result.records), "sim_num_failed": sim_summary["num_failed"],
                         "sim_preemptions": result.num_preemptions, "sim_fallbacks": result.num_fallbacks,
                         "sim_stalls": result.num_stalls, "sim_worker_stalls": result.num_worker_stalls,
                         "sim_taken_back": result.num_taken_back, "live_taken_back": live_taken_back,
                         "calibration_measured_with_live_run": label in (live.get("measured") or {}),
                         "host_slowdown": factor,
                         "live_summary": {k: live_summary[k] for k in ("ttft_s", "tpot_s", "itl_s")},
                         "sim_summary": {k: sim_summary[k] for k in ("ttft_s", "tpot_s", "itl_s")},
                         "token_gaps": {"live": live_gaps, "sim": gap_summary(classify_gaps(result.records))},
                         "quiet_excess": {"live": live_quiet,
                                          "sim": quiet_excess_by_batch(result.records, decode_step_s)},
                         **{f"ttft_split_{route}": {
                             "live": None if live_split is None else live_split[route],
                             "sim": split_summary(result.records, sim_engine[route], route)}
                            for route in SPLIT_ROUTES},
                         **{f"prefill_alone_{route}": {
                             "live": None if live_alone is None else live_alone[route],
                             "sim": alone_summary(result.records, sim_engine[route], prefill_s,
                                                  _every_part(sim_engine))}
                            for route in SPLIT_ROUTES}})
            if progress:
                errs = ", ".join(f"{n} {_pct(m['rel_error'], tolerance)}" for n, m in metrics.items())
                slower = "" if factor is None else f"host x{factor:.2f}; "
                taken = (f"; taken back from a stalled prefill worker live {live_taken_back} sim "
                         f"{result.num_taken_back}" if live_taken_back or result.num_taken_back else "")
                print(f"  {label} @ {rate:g} req/s: {slower}{errs}; routes live {live_summary.get('routes')} "
                      f"sim {_routes(result.records)}{taken}", file=sys.stderr, flush=True)
        if progress:
            print(f"{label}: simulated {len(live['rates'])} rates in {time.perf_counter() - t0:.1f}s",
                  file=sys.stderr, flush=True)
    return rows


def _calibration_line(cal: Mapping[str, Any]) -> str:
    link, path, host = cal["link"], cal.get("request_path") or {}, cal.get("host") or {}
    gflops = 1e-9 / cal["s_per_linear_flop"] if cal["s_per_linear_flop"] else float("inf")
    fit = cal.get("calibration") or {}
    # Records from before the field (2026-12-01) do not say; until that morning all were probed at once.
    line = (f"calibrated {fit.get('probed', '(how not recorded)')}: step overhead "
            f"{cal['overhead_s'] * 1e3:.2f} ms (step gap {_ms(fit.get('step_gap_s'))} ms), "
            f"{gflops:.1f} linear GFLOP/s, "
            f"s_per_attention_flop {cal['s_per_attention_flop']:.3g}, s_per_kv_byte {cal['s_per_kv_byte']:.3g}; "
            f"link alpha {link['alpha_s'] * 1e3:.2f} ms, beta {link['beta_bytes_per_s'] / 1e9:.2f} GB/s; ")
    if not path.get("colocated_s") and not path.get("disaggregated_s"):
        line += "no request path measured (the simulator adds none)"
    else:
        line += (f"request path colocated {_ms(path.get('colocated_s'))} ms, disaggregated "
                 f"{_ms(path.get('disaggregated_s'))} ms")
    together = cal.get("router_calibration") or {}
    if together.get("overhead_s") is not None:
        line += f"; probed {together.get('probed', '?')}: step overhead {together['overhead_s'] * 1e3:.2f} ms"
    if not host.get("num_cores"):
        return line + "; no host measured (private cores)"
    line += (f"; path CPU {host['cpu_s_per_token'] * 1e3:.2f} ms per streamed token, on {host['num_cores']} "
             f"cores; decode step excess with 1 / 2 streams {_signed_ms(host.get('step_excess_1_s'))} / "
             f"{_signed_ms(host.get('step_excess_2_s'))} ms, with a lone stream "
             f"{_signed_ms(host.get('step_excess_alone_s'))} ms"
             + (f" ({_signed_ms(host.get('step_excess_quiet_s'))} / {_signed_ms(host.get('step_excess_spin_s'))} "
                f"ms, the others idle past / inside the spin window)"
                if host.get("step_excess_quiet_s") is not None or host.get("step_excess_spin_s") is not None else "")
             + "".join(f", with {n} {_signed_ms(e)} ms" for n, e in host.get("step_excess_batch") or ()))
    if host.get("load_stretch"):
        line += "; prefill beside streams " + _stretch_text(host["load_stretch"])
    if host.get("load_stretch_beside"):
        line += "; on the prefill-only engine " + _stretch_text(host["load_stretch_beside"])
    if host.get("stretch_beside_prefill") is not None:
        line += f"; prefill beside another engine's prefills x{host['stretch_beside_prefill']:.2f}"
    for key, what in (("decode_beside_prefill", "its prefill"), ("decode_beside_handover", "a hand-over")):
        if host.get(key):
            line += f"; decode step beside {what} " + ", ".join(f"{_signed_ms(e)} ms with {n}" for n, e in host[key])
    if host.get("step_excess_mix"):
        line += "; decode step in loops of the mix " + ", ".join(f"{_signed_ms(e)} ms with {n}"
                                                               for n, e in host["step_excess_mix"])
    if host.get("path_beside_streams"):
        line += "; request path beside streams " + ", ".join(f"{_ms(s)} ms with {n}"
                                                             for n, s in host["path_beside_streams"])
    for key, where in (("length_probe", ""), ("length_probe_beside", " on the prefill-only engine")):
        if host.get(key):
            line += (f"; prefill{where} beside {host[key]['streams']} stream(s) by prompt length "
                     + ", ".join(f"x{f:.2f} at {n}" for n, f in host[key]["points"]))
    return line


def _default_model_dir() -> str:
    from pd_serve.default_model import ensure_default_model
    return ensure_default_model()


def seed_score(seed_offset: int, result: Mapping[str, Any]) -> dict[str, Any]:
    """One scoring's counts (`bench.fidelity_rounds.fidelity_over_rounds`): pooled and held out."""
    return {"seed_offset": seed_offset, "pooled_ok": result["pooled_within_tolerance"],
            "pooled_checks": result["pooled_checks"],
            "held_out_ok": sum(h["sim_round_ok"] for h in result["held_out"]),
            "held_out_checks": sum(h["checks"] for h in result["held_out"]),
            "same_order": agreement(pair_orders(result["pooled_rows"]))}


def seeds_table(seeds: Sequence[Mapping[str, Any]]) -> str:
    """One row per scoring, and their mean: how far the draws alone move a form's score."""
    rows = [[f"+{s['seed_offset']:,}", f"{s['pooled_ok']}/{s['pooled_checks']}",
             f"{s['held_out_ok']}/{s['held_out_checks']}", "{}/{}".format(*s["same_order"])] for s in seeds]
    rows.append(["mean", f"{statistics.fmean(s['pooled_ok'] for s in seeds):.2f}/{seeds[0]['pooled_checks']}",
                 f"{statistics.fmean(s['held_out_ok'] for s in seeds):.2f}/{seeds[0]['held_out_checks']}",
                 f"{statistics.fmean(s['same_order'][0] for s in seeds):.2f}/{seeds[0]['same_order'][1]}"])
    return format_table(["seeds", "pooled", "held out", "pairs in the live order"], rows)


def _print_ranking(rows: Sequence[Mapping[str, Any]], pooled: str = "") -> None:
    """Whether the simulator orders the systems as live did (bench.fidelity_ranking)."""
    orders = pair_orders(rows)
    print(f"\nWhich system served more requests within both SLOs{pooled}, live and simulated "
          f"(bench.fidelity_ranking; live counts within {TIE:.0%} of each other tie)\n")
    print(ranking_table(orders))
    print("\npairs the simulator orders as live did: {}/{} (single rates, live ties left out)".format(
        *agreement(orders)))


def _main_rounds(live_path: Path, live: Mapping[str, Any], args: argparse.Namespace) -> int:
    """A `--rounds R` sweep: every round simulated with its own measurements, pooled, and each
    round held against the others' live pool (bench.fidelity_rounds)."""
    from bench.fidelity_rounds import by_load_table, fidelity_over_rounds, halves_line, held_out_table
    from bench.live_spread import spread_table
    from bench.rate_rounds import round_summaries

    cal = json.loads(Path(args.calibration).read_text()) if args.calibration else None
    for name, summary in zip(live["round_dirs"], round_summaries(live_path, live)):
        measured = summary.get("measured") or {}
        missing = [label for label in systems_of(live) if label not in measured]
        if missing and cal is None:
            print(f"bench.sim_fidelity: {name} holds no measurements of {', '.join(missing)}; give "
                  f"--calibration, or pass one round's summary to have one measured", file=sys.stderr)
            return 2
    stalls_path = Path(args.stalls) if args.stalls else live_path.parent / STALLS_FILE
    stalls = json.loads(stalls_path.read_text()) if stalls_path.is_file() else None
    stalled = None if stalls is None else stalled_runs(stalls["runs"])
    if args.stalls and stalled is None:
        print(f"bench.sim_fidelity: no {stalls_path} (python -m bench.engine_stalls writes it)", file=sys.stderr)
        return 2
    events = None
    if args.stall_events:
        events = stall_model([r for path in args.stall_events for r in json.loads(Path(path).read_text())["runs"]])
        print(f"engine stalls as rare events ({', '.join(args.stall_events)}): "
              f"{events['stall_per_prefill_step'] * 1e3:.2f} per 1,000 steps that prefill, "
              f"{len(events['stall_excess_s'])} excesses of {statistics.median(events['stall_excess_s']):.2f} s "
              f"median", file=sys.stderr, flush=True)
    if args.seeds > 1 and args.host not in (*SCATTER_FORMS, *DRAW_FORMS) and events is None:
        print(f"bench.sim_fidelity: --seeds {args.seeds}: host form {args.host!r} draws nothing without "
              f"--stall-events; every seed would score the same", file=sys.stderr)
        return 2

    def scored(seed_offset: int, progress: bool = True) -> dict[str, Any]:
        return fidelity_over_rounds(live_path, cal, _default_model_dir(), args.host, args.tolerance,
                                    progress=progress, systems=systems_of(live), measurements=args.measurements,
                                    speed=args.speed, stretch=args.stretch, growth=args.growth,
                                    stalled=stalled or (),
                                    stall_events=events, seed_offset=seed_offset)
    result = scored(0)
    n_rounds = len(result["rounds"])
    with_what = {"own": "its own measurements",
                 "pooled": "the median of the system's measurements over all rounds",
                 "hardware": "the step model's median over every system and round, and the other "
                             "measurements' over the rounds of the systems with the same workers"}[args.measurements]
    if args.measurements == "hardware" and args.growth == "shared":
        with_what += "; a deployment without loops of the mix priced by the others' decode growth"
    if args.speed != "none":
        against = "its measurements" if args.speed == "probe" else "the sweep's runs"
        with_what += f", scaled by the host's slowdown during the run against {against} (bench.host_speed)"
    print(f"\nSimulator vs live CPU runs, {n_rounds} rounds pooled ({live_path}); each round simulated "
          f"with {with_what}; error = |sim - live| / live, * = over {args.tolerance:.0%}\n")
    print(fidelity_table(result["pooled_rows"], args.tolerance))
    print(f"\n{result['pooled_within_tolerance']}/{result['pooled_checks']} within {args.tolerance:.0%}, pooled")
    counts = result["pooled_spread"]
    print(f"\nHow well the live pool pins each figure: its 95% bootstrap interval over the requests "
          f"(bench.live_spread; a lower bound), ! where it reaches past {args.tolerance:.0%}, 'in' where the "
          f"simulated figure lies inside it\n")
    print(spread_table(result["pooled_rows"]))
    print(f"\nlive figures pinned within {args.tolerance:.0%}: {counts['pinned']}/{counts['figures']}; simulated "
          f"within {args.tolerance:.0%} or inside the live interval: {counts['within_or_inside']}/{counts['figures']}")
    print(f"\nEach round against the other rounds' live pool: figures within {args.tolerance:.0%}, the live "
          f"round's (how well the live system predicts itself) beside the simulated round's\n")
    print(held_out_table(result["held_out"]))
    _print_ranking(result["pooled_rows"], ", pooled over the rounds")
    live_ok = sum(h["live_round_ok"] for h in result["held_out"])
    sim_ok = sum(h["sim_round_ok"] for h in result["held_out"])
    checks = sum(h["checks"] for h in result["held_out"])
    print(f"\nheld out, all rounds: live {live_ok}/{checks}, simulated {sim_ok}/{checks}")
    if (line := halves_line(result["halves"], args.tolerance)) is not None:
        print(f"\n{line}")
    if stalled is None:
        print(f"\nno {stalls_path}: the runs that held an engine stall are not known (bench.engine_stalls)")
    elif result["stall_free"]:
        print(f"\nWithout the rounds whose run held an engine stall ({stalls_path}: a step "
              f"{stall_words(stalls['ratio'], stalls['min_excess_s'])}), live and simulated pooled over the "
              f"other rounds. This only sizes what the stalls did; the target is judged on every round\n")
        print(fidelity_table(result["stall_free"], args.tolerance))
    else:
        print(f"\nno run held an engine stall ({stalls_path})")
    print(f"\nBy rate, and its load where the sweep measured the colocated capacity: at a load of 1 a Poisson "
          f"queue has no steady state, and Vidur states its fidelity at 0.85 (bench.fidelity_rounds)\n")
    print(by_load_table(result["by_rate"]))
    for name, rows in zip(result["rounds"], result["round_rows"]):
        if any((r.get("quiet_excess") or {}).get("live") for r in rows):
            print(f"\n{name}: {QUIET_HEADING}\n")
            print(quiet_excess_table(rows))
        _print_splits(rows, f"{name}: ")
    seeds = [seed_score(0, result)]
    for k in range(1, args.seeds):
        print(f"draw seeds +{k * SEED_OFFSET_STRIDE:,} ({k + 1} of {args.seeds})", file=sys.stderr, flush=True)
        seeds.append(seed_score(k * SEED_OFFSET_STRIDE, scored(k * SEED_OFFSET_STRIDE, progress=False)))
    if len(seeds) > 1:
        print(f"\nThe same form on other draws (every seed offset by {SEED_OFFSET_STRIDE:,}): figures within "
              f"{args.tolerance:.0%}\n")
        print(seeds_table(seeds))
    write_json(args.out, {"live": str(live_path), "host_form": args.host, "calibration": cal, **result,
                          "held_out_live_ok": live_ok, "held_out_sim_ok": sim_ok, "held_out_checks": checks,
                          "seeds": seeds})
    print(f"wrote {args.out}")
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.sim_fidelity", description=__doc__.splitlines()[0])
    ap.add_argument("--live", default="results/rates/summary.json",
                    help="bench.compare rates summary.json: one round's, or a --rounds sweep's (pooled)")
    ap.add_argument("--calibration", default=None,
                    help="calibration JSON (coefficients, model/KV geometry, link); absent: measure it")
    ap.add_argument("--calibration-out", default="results/cpu_calibration.json",
                    help="where a measured calibration is saved")
    ap.add_argument("--out", default="results/sim_fidelity.json")
    ap.add_argument("--tolerance", type=float, default=TOLERANCE)
    ap.add_argument("--host", choices=sorted(HOST_FORMS), default=None,
                    help=f"the host model (default {DEFAULT_HOST_FORM}, or {NO_STEPS_HOST_FORM} for a "
                         f"sweep that saved no engine steps): the decode steps' measured excess, with a lone stream "
                         "for the steps no other engine computes beside and with one and two "
                         "streams per engine for the others, and the prefill steps and the request "
                         "path stretched by the factor measured beside as many streams as run at "
                         "the time (load); as load with each stream beyond the "
                         "first in a decode step adding the path's CPU per streamed token "
                         "(load-path); as load with the further streams priced by "
                         "the excess measured at 4 and 8 streams per engine (load-batch); as "
                         "load-batch with a decode step beside a prefill-only engine's "
                         "prefill adding what the probe measured there (load-beside); as "
                         "load-beside with every step losing the share of its core that requests on "
                         "their request path take, spread over the host's cores (path-cores); as "
                         "path-cores with a prefill on an engine that streams stretched as beside a "
                         "computing engine while a prefill-only engine computes (neighbour-stretch); as "
                         "path-cores with a prefill stretched only beside another engine's decode-only step "
                         "or a prefill-only engine at work (decode-neighbour); as decode-neighbour with a "
                         "prefill beside another engine's prefill stretched as bench.prefill_beside measured "
                         "(prefill-neighbour); as prefill-neighbour with a single decode "
                         "engine's further streams priced by the growth bench.decode_growth measured in "
                         "loops of the workload's mix (mix-growth); as mix-growth without prefill-neighbour's "
                         "stretch, on decode-neighbour (decode-neighbour+mix); as decode-neighbour+mix with hybrid's "
                         "engine that streams stretched beside its own streams, not by its prefill-only "
                         "engine's work (own-streams+mix; own-streams without the mix); as own-streams+mix with "
                         "every step's time drawn around the model's by the probe steps' scatter (step-scatter), "
                         "or by only what that adds to the model's own steps' scatter (scatter-top-up); as "
                         "mix-growth with the "
                         "colocated route's request path as bench.host_load's probes measured it beside "
                         "streams (path-beside); as path-beside with a prefill's stretch scaled by "
                         "its prompt's length as bench.length_stretch measured (length); as length with every "
                         "prefill at the length probe's time alone over its calibrated steps (length-alone); "
                         "as path-cores with a lone stream's step priced "
                         "by whether another engine stepped within vLLM's spin window (spin); as "
                         "path-cores with a step on an "
                         "engine a request is being handed over to taking the probe's excess there "
                         "(handover); load "
                         "without the stretch "
                         "(neighbour-steps); the "
                         "per-engine excess for every step (steps); the path's CPU per streamed token over "
                         "the free cores (cpu); steps beside a busy engine priced as calibrated "
                         "with all engines at once (neighbour; neighbour+cpu adds the path's "
                         "CPU); or none (private cores)")
    ap.add_argument("--measurements", choices=MEASUREMENTS, default=DEFAULT_MEASUREMENTS,
                    help="a --rounds sweep: simulate each round with what its own deployment measured "
                         "before its run (own), every round of a system with the median of what "
                         "all its rounds measured (pooled), or with the step model's median over "
                         "every system and round and the other figures' over the systems of the "
                         "same workers (hardware, the default); bench.pooled_measurements")
    ap.add_argument("--speed", choices=SPEED_FORMS, default="none",
                    help="a --rounds sweep run with the host probe (bench.compare since run 59): scale "
                         "each run's measured times by how much slower the host's kernel ran during it "
                         "than during the measurements (probe) or than over all the sweep's runs "
                         "(probe-runs), or not (none, the default); bench.speed_scaled")
    ap.add_argument("--stretch", choices=STRETCH_FORMS, default=None,
                    help="with --measurements hardware: the prefill's stretch beside streams as one factor "
                         "over every probe of the deployments alike (flat, the default), or the probe's "
                         "median at each count of streams (counts); bench.pooled_measurements.flat_stretch")
    ap.add_argument("--growth", choices=GROWTH_FORMS, default=None,
                    help="with --measurements hardware: a deployment that ran no loops of the workload's mix "
                         "(colocated: two engines decode) prices its decode steps' further streams by the "
                         "sweep's other deployments' loops (shared, the default) or by its own bursts (own); "
                         "bench.pooled_measurements.with_shared_decode_growth")
    ap.add_argument("--stalls", default=None,
                    help=f"a --rounds sweep: the runs' engine stalls (bench.engine_stalls; default: {STALLS_FILE} "
                         f"beside --live, where there is one), for the pool without the rounds that held one")
    ap.add_argument("--stall-events", action="append", default=[], metavar="STALLS_JSON",
                    help="a --rounds sweep: simulate engine stalls as rare events, at the rate and of the "
                         "lengths that these runs' stalls had (bench.engine_stalls files, pooled; give "
                         "other sweeps' to keep it out of sample)")
    ap.add_argument("--seeds", type=int, default=1,
                    help="a --rounds sweep and a form that draws: score it this many times, every seed "
                         f"offset by {SEED_OFFSET_STRIDE:,} each time, and print each scoring and their mean")
    args = ap.parse_args(argv)
    if args.seeds < 1:
        print(f"bench.sim_fidelity: --seeds must be 1 or more, got {args.seeds}", file=sys.stderr)
        return 2

    live_path = Path(args.live)
    live = json.loads(live_path.read_text())
    wrong = hardware_only_error(args.measurements, {"stretch": args.stretch, "growth": args.growth})
    if wrong:
        print(f"bench.sim_fidelity: {wrong}", file=sys.stderr)
        return 2
    args.stretch = args.stretch or DEFAULT_STRETCH
    args.growth = args.growth or DEFAULT_GROWTH
    if live.get("experiment") != "rates-rounds" and args.measurements == "pooled":
        print("bench.sim_fidelity: --measurements pooled needs a --rounds sweep's summary", file=sys.stderr)
        return 2
    if live.get("experiment") in ("rates", "rates-rounds"):
        args.host = host_form_for(args.host, sweep_system_dirs(live_path, live), "bench.sim_fidelity")
    if live.get("experiment") == "rates-rounds":
        try:
            return _main_rounds(live_path, live, args)
        except (ValueError, FileNotFoundError) as err:  # a record without what the form asked for, named
            print(f"bench.sim_fidelity: {err}", file=sys.stderr)
            return 2
    for given, flag in ((args.speed != "none", "--speed"), (args.stalls, "--stalls"),
                        (args.stall_events, "--stall-events"), (args.seeds > 1, "--seeds")):
        if given:
            print(f"bench.sim_fidelity: {flag} needs a --rounds sweep's summary", file=sys.stderr)
            return 2
    if live.get("experiment") != "rates":
        print(f"bench.sim_fidelity: {live_path} is not a `bench.compare --experiment rates` summary",
              file=sys.stderr)
        return 2
    measured = live.get("measured") or {}
    scatter = None
    if args.host in SCATTER_FORMS:  # the probe steps of this round's deployments, pooled as the rest is
        try:
            scatter = sweep_scatter(live_path, ["."], [measured], [s for s in systems_of(live) if s in measured],
                                    "hardware" if args.measurements == "hardware" else "own")[0]
        except (ValueError, FileNotFoundError) as err:
            print(f"bench.sim_fidelity: {err}", file=sys.stderr)
            return 2
    if args.measurements == "hardware" and measured:  # one round: pooled over its systems only
        measured = hardware_measurements_for([measured], systems_of(live), args.stretch, args.growth)[0]
        live = {**live, "measured": measured}
    cal = None
    if args.calibration:
        cal = json.loads(Path(args.calibration).read_text())
        print(f"calibration for systems the live run did not measure: {args.calibration}", file=sys.stderr)
    elif not all(label in measured for label in systems_of(live) if label in live["summaries"]):
        cal = calibrate_live()
        write_json(args.calibration_out, cal)
        print(f"calibration saved to {args.calibration_out}", file=sys.stderr)

    try:
        rows = run_fidelity(live, cal, _default_model_dir(), systems=systems_of(live), live_dir=live_path.parent,
                            tolerance=args.tolerance, host_form=args.host, scatter=scatter)
    except ValueError as err:
        print(f"bench.sim_fidelity: {err}", file=sys.stderr)
        return 2
    table = fidelity_table(rows, args.tolerance)
    checks = [m["ok"] for r in rows for m in r["metrics"].values()]
    print(f"\nSimulator vs live CPU runs ({live_path}); error = |sim - live| / live, "
          f"* = over {args.tolerance:.0%}\n")
    print(table)
    print(f"\n{sum(checks)}/{len(checks)} within {args.tolerance:.0%}")
    _print_ranking(rows)
    gaps = gaps_table(rows)
    if any((r.get("quiet_excess") or {}).get("live") for r in rows):
        print(f"\n{QUIET_HEADING}\n")
        print(quiet_excess_table(rows))
    _print_splits(rows)
    if any((r.get("token_gaps") or {}).get("live") for r in rows):
        print("\nMean inter-token gap by what overlapped it (bench.token_gaps): alone = every other "
              "engine idle, nb- = another engine prefilling / decoding, own+ = another request on "
              "the same engine\n")
        print(gaps)
    write_json(args.out, {"live": str(live_path), "tolerance": args.tolerance, "calibration": cal,
                          "host_form": args.host, "measurements": args.measurements,
                          "measured_with_live_runs": sorted(measured),
                          "num_within_tolerance": sum(checks), "num_checks": len(checks), "gaps_table": gaps,
                          "all_within_tolerance": all(checks), "rows": rows, "table": table})
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""The CPU host a CPU deployment's engines share with the request path.

On a CPU host each engine's model runs on a core of its own (vLLM's worker process, pinned).
Everything else shares the other cores: each engine's loop (vLLM's EngineCore process, which
schedules a step, then waits for the worker by spinning on `sched_yield`), and the request
path, which carries every output token from the engine through the worker's vLLM front-end,
the router and the client. The loop and the path want the same cores at the same moment, the
end of a step, and the engine's next step waits. Measured here (run 3, docs/MEASUREMENTS.md): the
decode-only worker of the disaggregated deployment stepped every 10-12.6 ms (median
inter-token latency) where its calibration, on the idle engine, said 7.5 ms. The path spends
about 3.5 ms of CPU per streamed token (`bench.host_cpu`). A simulator with private cores
shows none of it.

Several forms, all with inputs measured on the live deployment before its run
(`bench.host_cpu`, and the router's calibration), nothing fitted to the run;
`bench.sim_fidelity --host` picks one (neighbour steps by default from run 13, load from run 22,
load-path from run 25, load-batch from run 29, load-beside from run 32, path-cores from run
48, and since stop 36 the one `bench.sim_fidelity.DEFAULT_HOST_FORM` names):
- path CPU (`cpu_s_per_token` only; `--host cpu`): a step takes
  longer by the path's CPU for the tokens it streams, spread over the cores no engine computes
  on while it runs (at least one). It fitted the runs of 2026-11-30 (path CPU 1.9-5.4 ms per
  token), and over-predicted TPOT by 40-80% on the quieter morning of 2026-12-01 (1.2-2.1 ms),
  when the engines were still calibrated all at once: each engine's decode probes then ran
  beside the other engine's, so the calibrated steps already held part of the slowdown, and
  this form added it again (the likely reason; not proven). Since the engines are calibrated
  one at a time, it came closest on three fresh runs: 35, 29 and 30 of 36 figures within 20%,
  against 25, 24 and 27 for the measured steps and 24, 21 and 22 for private cores.
- measured steps (`step_excess_1_s` and `step_excess_2_s` set; `--host steps`): the live
  engines' decode steps ran longer than their calibration by those medians with one and with
  two requests streaming (short bursts); a step streaming n tokens takes e1 + (n - 1) * (e2 - e1)
  longer, the line through both. Either may be negative (the calibration slower than the
  engine); a step never shrinks below half its engine time. The bursts keep every engine
  streaming at once and start a request whenever one ends, more than Poisson arrivals at 0.5-2
  req/s do: against a calibration of each engine alone they measured +1.3 to +4.6 ms, and the
  simulated TPOT came out up to 70% high.
- neighbour steps (`step_excess_alone_s` set besides; `--host neighbour-steps`): as measured
  steps, but a step that starts while no other engine computes takes the excess measured with
  one stream on the whole deployment instead of e1. With two decode-capable engines the e1
  burst keeps the other engine streaming, and on this 2-core host that doubles a decode step
  (run 12: one-stream gaps of 2.4-3.6 ms with the other engine idle, 5.2-6.9 ms while it
  decoded), which Poisson arrivals at 0.5-2 req/s bring to 10-30% of the steps. On runs
  13-15, fresh: 34, 32 and 30 of 36 (the path CPU 28, 33 and 29).
- neighbour (`neighbour_coefficients` set; `--host neighbour`, `--host neighbour+cpu` with the
  path CPU on top): a step that starts while another engine of the host is computing is priced
  by the step model calibrated with all engines probed at once (the router's own calibration),
  the others by the one calibrated with each engine alone; a busy neighbour never makes a step
  shorter. The difference is what one engine's steps lose to the other's at the same moment
  (measured on hybrid: step overhead 2.92 ms probed together against 1.36 ms alone). It
  understates it: 0.6 ms more per step on run 12's colocated, where live steps took 2.5-3.5 ms
  more beside a busy engine; alone this form came to 26, 28 and 21 of 36 on runs 12-14.
- load (`load_stretch` set besides; `--host load`): as neighbour steps, and a step that prefills
  beside requests streaming anywhere on the host, and the request path of a request sent then,
  take longer by the stretch measured for that many streams (`bench.host_load`: a 1,024-token
  prompt's TTFT beside 1, 2 and 4 streams per engine over its TTFT alone), interpolated
  linearly, beyond the last count along its last segment. A prefill needs its core for 100-300 ms
  and loses a share of it to the streams' work on the other processes; the decode steps' excess,
  a fixed few milliseconds, does not carry to it (3,000-token prompts ran 20-58% slower than
  simulated at 8 req/s, runs 19-21). The factor follows the streams while a step runs
  (`bench.simulator.stretch`), and a prefill on a prefill-only engine, which streams nothing
  itself, takes `load_stretch_beside` when measured: the probe sent to that engine (on hybrid,
  x1.56 / x1.89 / x3.39 beside 1 / 2 / 4 streams, where the router's own choice of engine gave
  x1.03 / x1.36 / x1.36). Both together moved hybrid's pooled p99 TTFT from 18-50% low to
  1-29% on runs 22-26 (with the disaggregated deployment's probe for the missing points).
- load-path (`stream_step_s` set besides, to the path's CPU per streamed token; `--host
  load-path`): as load, but each stream a
  decode step carries beyond the first adds the request path's CPU per streamed token
  (`bench.host_cpu`), not the bursts' e2 - e1. Every token a step streams goes through the
  worker's front-end, the router and the client on the shared cores, and the engine's next step
  waits for that work; the bursts' difference between one and two streams is a few tenths of a
  millisecond and noisy (e2 - e1 = -0.48 ms on run 24's disaggregated), where a second stream on
  one engine with the others idle cost 1.7-2.6 ms more per gap live (run 24, `bench.token_gaps`).
  On the saved rounds of runs 19-24 (13 rounds, the form chosen on them; runs 19-21, measured
  before the stretch was, as neighbour-steps with this slope): 318 of 468 figures within 20%
  against 286, mean TPOT 102 of 156 against 77, no round worse. Fresh, runs 25 and 26: 74 and 66
  of 108, against 64 and 66. The slope is linear in the batch, and the path's work overlaps the
  next step on another core: on one decode engine carrying 6-10 streams (disaggregated and
  hybrid at 8 req/s) the simulated mean TPOT came out 79-111% high in run 26's third round.
- load-batch (`step_excess_batch` set besides; `--host load-batch`): as load, but a decode step
  carrying n streams takes, beyond its first stream's excess, what the measured excess grew by
  from one stream to n: the line through the bursts' excess at 1, 2, 4 and 8 streams per engine
  (`bench.host_cpu`), beyond the last point along its last segment. A large batch is measured
  instead of extrapolated from one or two streams.
- load-beside (`decode_beside_prefill` set besides; `--host load-beside`): as load-batch, and a
  step that streams while a prefill-only engine is prefilling takes longer by what the
  background streams' token gaps grew by inside the load probe's prefill on that engine
  (`bench.host_load`, per count of streams, the points joined linearly, below the first at the
  first, never below 0). The bursts never run a prefill beside a decode, and where a
  prefill-only engine prefills beside the streaming one (disaggregated, hybrid) the live gaps
  took 3-5 ms longer than with it idle where the simulator added 0-1.5 ms (runs 28-29,
  `bench.token_gaps`).
- path-cores (`path_cores` set besides; `--host path-cores`): as load-beside, and while
  requests are on their request path (the measured head before the engine, the hand-over
  between prefill and decode), each keeps `path_cores` of a core busy: the path's measured CPU
  per request (`bench.host_cpu`) over its measured time (`pd_serve.request_path`), 0.56-0.77
  cores on the run-47 deployments. That work lands on every core alike (the engines' loops spin
  on `sched_yield` between steps, so to the OS no core is idle): every step computing then,
  decodes too, runs at 1 / (1 + paths x path_cores / cores) of its rate, re-read as paths start
  and end. Live (run 47, disaggregated at 5-9 req/s), a decode gap overlapping another request's
  first 8 ms while the prefill engine computed took 11.5-14 ms against 7.5-9.4 ms beside the
  prefill alone; the load-beside form gave those gaps nothing. Taking the paths' cores from the
  free cores first (none stolen while a core has no engine computing) fitted runs 37-47 worse
  (289 of 396 figures within 20%, against 302).
- spin (`step_excess_quiet_s` and `step_excess_spin_s` set besides; `--host spin`): as
  path-cores, but a step that starts while no other engine computes takes the lone stream's
  excess by whether another engine stepped within the last `SPIN_WINDOW_S`: vLLM's model
  process, and its EngineCore waiting on it, poll their queues on `sched_yield` for a second
  after each read (`shm_broadcast.SpinCondition`), so an engine that just stepped keeps two
  processes runnable on the shared cores. Live, on runs 50-53's hybrid deployment (the
  prefill-only engine idle between its disaggregated requests), a one-stream decode gap took
  1.5-2 ms longer with that engine active in the last second than idle for longer
  (`bench.token_gaps`), and the lone-stream probe, sent while it sat idle, said 2-4 ms less than
  colocated's: the simulator took hybrid's mean TPOT 18-37% low. The probe now measures both
  (`bench.neighbour_spin`: sets of lone streams after a quiet spell past the window, with the
  other engines left idle or stepped every `STEP_EVERY_S`).
- handover (`decode_beside_handover` set besides; `--host handover`): as path-cores, and a
  step that streams on an engine into which a disaggregated request is being handed over (from
  the end of its prefill to its first token there: the way from the prefill engine, the KV load
  and the first step) takes longer by what the background streams' token gaps grew by inside
  the load probe's hand-over (`bench.host_load`, read as load-beside reads its points). Live
  (run 61, disaggregated at 4.48 req/s) such a gap took 24-31 ms against 14-20 ms with no
  hand-over, and the path-cores form gave it 1 ms more: the hand-over's share of a core spread
  over both cores, where the decode engine's own processes take the new request in. On run 63,
  the first measured with it, the probe gave +1-6 ms and the form scored 7 of 24 figures
  pooled against path-cores' 6 (held out 16 of 48 against 17): it is not the default.
- neighbour-stretch (`stretch_rule` "prefill-only-busy"; `--host neighbour-stretch`): as
  path-cores, and a prefill on an engine that streams takes the stretch measured beside a
  computing engine (`load_stretch_beside`) while a prefill-only engine computes beside it, the
  stretch measured with the neighbour idle (`load_stretch`) otherwise. The load probe measures
  the second on the engine that streams, with the prefill-only engine idle; on hybrid that is
  x1.02-1.33 beside 1-4 streams (runs 59-64), where a prefill on the prefill-only engine, beside
  the streaming engine's work, took x1.4-2.5, and colocated's engines, each beside the other's
  streams, x1.5-2.9. On runs 59-64, on which it was chosen, 20 of hybrid's 36 figures came within
  20% against 10 (p50 TTFT 26% low became 6%, mean TPOT 33% low 21%); on run 65, fresh, it tied
  path-cores (11 of 24), with hybrid's TTFT now high (p99 82-269%) where its TPOT came within 6%:
  not the default.
- decode-neighbour (`stretch_rule` "decode-neighbour"; `--host decode-neighbour`): as
  path-cores, but a prefill is stretched only in the cases the probes measured: while another
  engine runs a decode-only step (the probe's background streams on the other engine;
  `load_stretch`, or `load_stretch_beside` on a prefill-only engine), and, on an engine that
  streams, while a prefill-only engine computes beside it (`load_stretch_beside`, as
  neighbour-stretch); at its engine time otherwise: beside an idle engine, or one in a step
  with a prompt's chunk in it. A neighbour's decode steps come every 10-20 ms, and each one's
  scheduling, output and streamed tokens run on the shared cores; a neighbour in a prefill step
  computes on its own core and does that work once per step of 100-400 ms. Live, hybrid's
  prefill-only engine, whose neighbour prefills the prompts of most requests as well, prefilled
  short and medium prompts in 49-68 and 294-350 ms (run 65, queue included) where the probe's x1.9-2.3 made them 88 and
  521 ms simulated; and adaptive was simulated 17-29% slow (medians over runs 59-65). Built on
  run 65: 21 of 24 figures within 20% pooled against path-cores' 11; on runs 59-64, 72 of 144
  against 68; on run 66, fresh, 21 of 24 against 12, held out 32 of 48 against 23 (the live
  rounds held each other to 29). The default in stop 36.
- prefill-neighbour (`stretch_beside_prefill` set besides; `--host prefill-neighbour`): as
  decode-neighbour, and a prefill beside another engine's step with a prompt's chunk takes the
  stretch measured there (`bench.prefill_beside`: a 1,024-token probe's part inside its engine
  beside one 1,024-token prompt at a time on the other engine, over its part alone; on runs
  67-69 x1.28-1.42 on colocated and adaptive, x1.03-1.14 on hybrid's prefill-only engine). That
  neighbour computes on a core of its own, but each of its requests and steps has work on the
  shared cores. decode-neighbour took it as none, and simulated colocated 14-20% fast over runs
  59-66. On runs 67-69, fresh, 17, 19 and 17 of 24 figures within 20% pooled and 32, 37 and 30
  of 48 held out, against decode-neighbour's 16, 18 and 19, 27, 35 and 34: a tie pooled. The
  default in stop 37, on the totals over runs 59-69 (179 of 264 pooled against 167, the
  factor carried back to runs 59-66).
- mix-growth (`step_excess_mix` set besides; `--host mix-growth`): as prefill-neighbour, but on a
  deployment with a single engine that decodes (disaggregated, hybrid) each stream of a decode
  step beyond the first adds the slope of the line through the excess measured in closed loops
  of the workload's own prompt mix (`bench.decode_growth`: 1, 2, 4 and 6 streams, the quiet gaps
  only; least squares, never below 0), not the 128-token bursts' points. A longer context costs
  a decode step more on this host than the calibration says, and the bursts' short prompts miss
  it: live, that engine's quiet steps took 0.4-0.8 ms more per further stream on every run of
  59-69, where the bursts' points did not rise, and the simulated mean TPOT of disaggregated was
  22-36% low on runs 67-69. With each round's growth taken from the other round's live quiet
  steps instead (an upper bound for the probe), runs 67-69 came to 60 of 72 figures within 20%
  pooled against 53. The line, not the points joined: each point is a loop of under 10 s, and on
  run 70 two of the four loop sets measured less at 6 streams than at 4 (joined, the growth
  would shrink beyond 6 streams, where a decode engine at 7.7 req/s carries 8-12; run 70 came to
  the same 20 of 24 pooled). Fresh, runs 70 and 71: 20 and 16 of 24 pooled, 37 and 33 of 48 held
  out, against prefill-neighbour's 17 and 13, 35 and 27. The default in stop 38.
- path-beside (`path_beside_streams` set besides; `--host path-beside`): as mix-growth, and a
  request on the colocated route (or the first leg of a disaggregated one) takes the request
  path the load probe measured beside that many streams (`bench.host_load`: its probes' TTFT
  less their engine's part in the router's log, at 0, 2, 4 and 8 streams; joined linearly, the
  last beyond it), not the idle deployment's path stretched by the prefill's factor. The idle
  path is measured after a second of quiet, when vLLM's engine loops have gone to sleep, and the
  path is Python on the shared cores, not a prefill on an engine's core: on run 73 the
  simulator gave every colocated and adaptive request 26.8 ms (17.3 x1.56) where they took
  16-23 ms live, and hybrid's 15.6 ms (14.0 x1.11) where they took 18-20.
  Built on run 73: 17 of 24 pooled and 30 of 48 held out against mix-growth's 16 and 28; run
  74, fresh: 19 and 37 against 18 and 36 (the live rounds 38). The default in stops 39-44.
- length (`length_stretch` and `length_reference_tokens` set besides; `--host length`): as
  path-beside, and a stretched prefill's excess over its engine time is scaled by its prompt's
  length: by the length probe's excess at that length over its excess at the load probe's
  1,024 tokens (`bench.length_stretch`, measured since run 80 on an engine that streams and on
  hybrid's prefill-only engine; `length_factor`). The load probe prices every prompt as its one
  1,024-token prompt; over runs 74-79 the lone prompts at colocated's engines met x1.79 when
  short and x1.25 when medium (`bench.prefill_alone`), and the simulator gave them x1.90 and
  x1.39. A prompt's stretch is not one share of its time: a short one loses as much of its core
  at each step's start and end as a long one, over a shorter time.
- length-alone (`length_alone` set besides; `--host length-alone`): as length, and every
  prefill step takes the length probe's time alone at its prompt's length over the calibrated
  steps of that prompt (`alone_factor`): the calibration's own error by length, measured on the
  engine before the run.
- decode-neighbour+mix (`--host decode-neighbour+mix`): decode-neighbour with mix-growth's
  pricing of a single decode engine's further streams, and neither of the two probes path-beside
  added on top (a prefill beside another engine's prefill runs at its engine time; the colocated
  path is the idle deployment's, stretched). On runs 74-82, 299 of 384 figures within 20% pooled
  and 557 of 768 held out, against path-beside's 291 and 533; on run 83, fresh and four rounds
  pooled, 47 of 48 and 184 of 192, against 46 and 179; on run 84, the same, 44 and 162 against
  42 and 161. The two probes traded colocated against adaptive, the same engines under two
  routers: with them colocated came out 10-19% slow on p50 TTFT (run 83) and adaptive's figures
  within 20% on 21 of 24 over runs 83-84 (24 without); without them adaptive's mean TPOT 13-15%
  fast on run 83, hybrid's p99 TTFT 20-22% fast on run 84. The default in stops 45-51.
- stretch-draws (`load_stretch_draws`, `load_stretch_beside_draws` set besides; `--host
  stretch-draws`): as decode-neighbour+mix, but each prefill step draws its stretch from the load
  probe's own prompts, one factor per probe sent beside streams (each over its deployment's
  median alone, every count pooled, as the hardware measurements' flat stretch), not their
  median: the step takes the factor at a quantile drawn when it starts (seeded, `draw_seed`) and
  keeps that quantile while the load changes under it. The probe's prompts beside streams
  scatter (on runs 85-87 the standard deviation of their logs was 0.02-0.37 per count, 0.01-0.10
  alone), and so do the run's: a 3,801-token prompt at hybrid's prefill-only engine, nothing
  queued before it, took 1.23, 1.38, 0.99 and 1.44 s there in the four rounds of run 87 at 6.23
  req/s, where the simulator gave 0.89 s each time. A p99 over four rounds of 240 is about the
  tenth-longest of 960 TTFTs, and on hybrid the longest dozen are four or five long prompts in
  up to four rounds each: a model at the median puts every copy of each at its median. Over
  runs 85-88 (medians over five sets of seeds), 102 of 120 figures within 20% pooled and 396 of
  480 held out, against decode-neighbour+mix's 100 and 392: a tie, hybrid's p99 TTFT closer by
  1-7 points at six of eight rates on runs 86-87 and not on run 88. Not the default.
- own-streams+mix (`stretch_rule` "own-streams"; `--host own-streams+mix`, and `own-streams`
  without mix-growth): decode-neighbour+mix, but on the host's only engine that streams (hybrid's),
  a prefill takes the load probe's stretch for the streams on the host (`load_stretch`, measured
  on that engine beside its own streams with the prefill-only engine idle: the probe's own case)
  whatever the prefill-only engine does, not `load_stretch_beside` while that engine computes.
  That engine's prefills run on a core of their own, and a neighbour in a prefill step does its
  host work once per 100-400 ms step. Set step by step beside the live engines' own
  (`bench.steps_beside`, runs 90 and 94-96), the engine that streams prefilled beside a
  prefilling prefill-only engine at x1.06-1.38 of its calibrated steps (median by streams), as
  beside it idle, where decode-neighbour gave x1.61-2.09; the simulated router then learned that
  engine slow and sent twice live's share of prompts to the prefill engine. Fresh on run 96: 19
  of 24 figures within 20% pooled and 73 of 96 held out, against 17 and 67 (the live rounds 71);
  the simulated shares 42-56 of 240 against 37-59 live. The default from stop 52 to stop 54.
- step-scatter (`step_scatter_prefill`, `step_scatter_decode` set besides; `--host step-scatter`):
  own-streams+mix, and each step's time (engine time, stretch and excess) takes a factor drawn
  when it starts from the probe steps' own scatter (`bench.step_scatter`: the engine steps inside
  the window the deployment was measured in, before its run, each over the median of its group
  of `bench.steps_beside`; one set for steps with a prompt's chunk, one for decode-only steps).
  The other forms price a step at the probes' medians, and a simulated step varies only with what
  it computes and what runs beside it; live, a step's p90 over its p50 within one group was
  1.46-1.56 on run 96, simulated 1.17-1.26, and a queue near capacity grows with that scatter.
  The probe steps scatter as much (run 97: p90 over p50 x1.46-1.77, their mean x1.06-1.16 of
  their median). On run 97, fresh: 14 of 24 figures within 20% pooled, as own-streams+mix, held
  out 57 of 96 against 55 (the live rounds 53); on run 98, 21 of 36 against 17, held out 42 of 72
  against 26 (the live rounds 30). Hybrid's mean TPOT came within 1-15% (own-streams+mix 15-34%
  low), colocated's p50 TTFT went 10-41% high (own-streams+mix within 17%). Its steps scatter
  1.64-1.67 against live's 1.49-1.55: the probes' scatter already holds what the model varies by,
  and the draws add to it. Not the default.
- scatter-top-up (`--host scatter-top-up`; stop 54): step-scatter with the draws shrunk around
  their median, in logs, by sqrt(1 - (log model / log probes)^2), where "model" is how the run's
  steps scatter simulated under own-streams+mix first (`bench.step_scatter.top_up`): log-spreads
  of independent factors add in squares, so the simulated steps scatter as the probes' did. Fresh,
  on the same code: run 97 17 of 24 pooled (own-streams+mix 14, step-scatter 16), held out 60 of
  96 (54, 60); run 98 24 of 36 (19, 18), held out 36 of 72 (29, 33); run 99 15 of 24 (18, 12),
  held out 66 of 96 (66, 60). Over the three, 56 of 84 pooled against 51 and 46, held out 162 of
  264 against 149 and 153. Hybrid's mean TPOT within 1-20% (own-streams+mix 18-28% low on run
  99), its p99 TTFT 37-110% high at 7.24-10.3 req/s on run 99; colocated's p50 TTFT 10-29% high.
  Its seeds alone move it by 1-5 figures pooled and 4-6 held out per run (`bench.sim_fidelity
  --seeds 4`); averaged over four, 57.25 of 84 and 169.75 of 264 (own-streams+mix 51 and 149),
  every seed ahead on both totals. Fresh, run 100 (3 systems, 2 rounds; engines calibrated faster
  than run 99's, live figures about the same): 25.5 of 36 pooled and 41.25 of 72 held out over four
  seeds (23-27, 39-43), against own-streams+mix's 4 and 16 (the live rounds 34). The default in
  stops 55-56; a sweep saved before 2026-12-06 has no probe steps to draw from and is simulated under
  own-streams+mix, said so (`bench.sim_fidelity.host_form_for`).
  Since stop 56 both scattering forms leave the probe steps that stalled (`bench.engine_stalls`'
  rule: 3x calibrated and 0.3 s over) out of the draws and take them as this host's stalls
  (`stall_per_prefill_step`, `stall_excess_s`: seconds added, not a factor). Run 101's top draw
  for prefill steps was x47 (a 72-token step held 0.55 s): on a 0.25 s prefill it made an 11.7 s
  step, and a simulated round's p99 TTFT came out 14.2 s against 1.05 s live. Runs 97-101 over
  four seeds: 99.75 of 144 pooled and 272.5 of 432 held out, against 97.25 and 264.5; simulated
  rounds with p99 TTFT over twice live's, 7 of 144 against 15 (seed +0).
- probe-stretch (`--host probe-stretch`; stop 56): scatter-top-up with the prefill's stretch beside
  another engine's decode steps (`load_stretch`, every count) read off the probe steps: their
  prefill steps on an engine that streams, beside a decode-only step, over those beside an idle
  engine with none of their own to decode (`bench.step_scatter.stretch_beside_decode`, medians;
  pooled over the system's rounds). Where the probes give none (hybrid: no engine that streams
  has a decoding neighbour) the load probe's stands. The load probe's stretch is a TTFT ratio:
  it holds the wait for the step running on its engine, that engine's own decodes in the step
  and the path's slowing, each of which the simulator prices apart. On run 102 colocated's
  prefill steps beside a decoding engine ran x1.45-1.56 of calibrated live and x1.75-2.10
  simulated (load stretch x1.81); the probe steps give x1.34-1.49 on runs 97-102.
- probe-excess and probe-steps (`--host probe-excess`, `--host probe-steps`; stop 57):
  scatter-top-up, and probe-stretch, with the lone stream's excess while every other engine at
  work is in a prefill step, none of them prefill-only (`step_excess_beside_prefill_s`), read off
  the probe steps (`bench.step_scatter.excess_beside_prefill`: their one-stream decode-only steps
  on such an engine, median seconds over the model, pooled over the system's rounds). The other
  forms price such a step at the bursts' excess with one stream per engine, both decoding
  (`step_excess_1_s`): a neighbour in a prefill step does its host work once per 100-400 ms step,
  and colocated's one-stream decode steps beside one ran +1.7-7.8 ms over their model on runs
  97-103 (medians per round), beside a decode step +3.8-10.0; the probe steps beside a prefill gave
  +1.6-6.0 where the simulator took +4.6-8.7. On run 103 colocated's mean TPOT came out 31-47% high
  under probe-excess, 56-73% under scatter-top-up. Runs 97-103, four seeds: probe-steps 139.75 of
  192 pooled and 381.5 of 576 held out (scatter-top-up 122.75 and 342.25, probe-stretch 137 and
  368.75, probe-excess 127.75 and 356.75); fresh on run 104, 12.75 of 24 and 21.75 of 48 (10.25,
  19), on run 105 15.75 and 26.75 (14, 23.75). probe-steps is the default since stop 57. Their
  top-up's first simulation (whose steps' scatter the draws are shrunk by) ran under
  own-streams+mix until stop 63, without their probe medians; since then under the same form
  without the draws (`bench.sim_fidelity.run_scatter`).
- probe-length and probe-length-alone (`--host probe-length`, `--host probe-length-alone`; stop
  62): probe-steps with a stretched prefill scaled by its prompt's length as the length probe
  measured it, the factor as a whole (`length_shape` LENGTH_RATIO: the probe's factor at the
  prompt's length over its factor at the load probe's 1,024 tokens, never below 1), and, in
  probe-length-alone, every prefill step at the probe's time alone over its calibrated steps
  (`alone_factor`). The excess shape refuses a probe with no stretch at 1,024 tokens, which
  hybrid's engine that streams gives (x1.03 / 0.88 / 0.95 on run 112, x1.05 / 1.00 / 1.00 on run
  114). Built for hybrid's medium prompts, taken then for a matter of length: on run 112 they
  prefilled on that engine at x0.92-1.10 of their calibrated step live and x1.06-1.30 under
  probe-steps, and the simulated router shipped 16-23 of 41 against 5-8 live. Built on run 114
  (`results/rates_v117`), four seeds: probe-length 32.25 of 36 pooled and 59.5 of 72 held out,
  probe-length-alone 30.75 and 56.25, probe-steps 29.25 and 55.5; fresh on run 115 (`rates_v118`),
  25.5 and 37.75, 24.5 and 33.25, against probe-steps' 27.75 and 37 (the live rounds 16 of 72).
  The alone factor brought hybrid's medium prompts closer there (22 of 82 met at 7.24 req/s
  against probe-steps' 9; live 37) and colocated's further (43 at 5.17 against 33; live 19).
  Neither is the default. What hybrid's medium prompts miss is a shape by streams more than by
  length: on run 115 the engine's prefill steps beside one stream ran x1.02-1.07 of calibrated
  live and x1.20-1.30 simulated, beside eight or more x1.54-1.59 and x1.43 (`bench.steps_beside`).
GPU configs have no host: there the engines compute elsewhere.
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from typing import Callable, Sequence

import numpy as np

from schedulers.step_time import COEFFICIENTS

# vLLM's shm_broadcast.SpinCondition busy_loop_s: how long an engine's processes poll on
# sched_yield after a step before they sleep on a notification.
SPIN_WINDOW_S = 1.0
# When a prefill step takes the load's factor (HostSpec.stretch_rule; the forms above).
STRETCH_STREAMS = "streams"
STRETCH_PREFILL_ONLY_BUSY = "prefill-only-busy"
STRETCH_DECODE_NEIGHBOUR = "decode-neighbour"
STRETCH_OWN_STREAMS = "own-streams"
STRETCH_RULES = (STRETCH_STREAMS, STRETCH_PREFILL_ONLY_BUSY, STRETCH_DECODE_NEIGHBOUR, STRETCH_OWN_STREAMS)
# How the length probe's points scale a stretched prefill (HostSpec.length_shape; `length_factor`)
LENGTH_EXCESS = "excess"
LENGTH_RATIO = "ratio"
LENGTH_SHAPES = (LENGTH_EXCESS, LENGTH_RATIO)


@dataclass(frozen=True)
class HostSpec:
    """`num_cores`: the host's cores (0: no host model). `cpu_s_per_token`: the request path's
    CPU per streamed token. `step_excess_1_s`, `step_excess_2_s`: the measured step excess with
    one and two streams; when both are set, they are the model, with `step_excess_alone_s` (one
    stream, every other engine idle) for the steps no other engine computes beside, when set,
    and `stream_step_s`, when set, for what each stream beyond the first adds (else e2 - e1).
    `neighbour_coefficients`: the step model's COEFFICIENTS calibrated with every engine probed
    at once, for the steps that start while another engine computes (the simulator prices
    them). `load_stretch`: (streams on the host, factor) points, measured; with them, prefill
    steps and the request path take `load_factor(streams)` times longer.
    `step_excess_batch`: (streams, excess) points measured beyond two streams; with them, what
    each stream beyond the first adds follows the excess through e1, e2 and them.
    `load_stretch_beside`: the same points for a prefill on a prefill-only engine, which streams
    nothing itself, beside the streams of the others (`load_factor(streams, beside=True)`);
    without them, `load_stretch` stands for both. `decode_beside_prefill`: (streams, seconds)
    points, what a step streaming that many loses while a prefill-only engine prefills
    (`beside_prefill_s`). `decode_beside_handover`: the same for a step on an engine into which
    a disaggregated request is being handed over (from its prefill's end to its first token;
    `beside_handover_s`). `path_cores`: the cores a request keeps busy while it is on its
    request path (`path_factor`). `step_excess_quiet_s` / `step_excess_spin_s`: the lone
    stream's excess with every other engine idle for longer than `SPIN_WINDOW_S` / with one
    idle but stepped within it; each, when set, replaces `step_excess_alone_s` in its case.
    `step_excess_beside_prefill_s`: the lone stream's excess while every other engine at work is
    in a prefill step, none of them prefill-only (`bench.step_scatter.excess_beside_prefill`);
    when set, it replaces `step_excess_1_s` in that case.
    `stretch_rule`: when a prefill step takes the load's factor (STRETCH_RULES; the simulator
    decides when): whenever requests stream on the host (STRETCH_STREAMS), as that and with
    `load_stretch_beside` on an engine that streams while a prefill-only engine computes beside
    it (STRETCH_PREFILL_ONLY_BUSY), only beside another engine's decode-only step or a
    prefill-only engine at work (STRETCH_DECODE_NEIGHBOUR), or beside another engine's
    decode-only step and, on the host's only engine that streams, beside its own streams
    (STRETCH_OWN_STREAMS). `stretch_beside_prefill`: under
    STRETCH_DECODE_NEIGHBOUR, how many times its engine time a prefill takes beside another
    engine's step with a prompt's chunk in it (measured, `bench.prefill_beside`; 1: as its
    engine time). `step_excess_mix`: (streams, excess) of decode steps in closed loops of the
    workload's prompt mix, the first at one stream (`bench.decode_growth`); when set, each
    stream beyond the first adds the slope of the least-squares line through them (never below
    0). `path_beside_streams`: (streams, seconds) of the colocated route's request path, the
    first at none (`bench.host_load`'s probes less their engine's part); when set, that path is
    read from them (`colocated_path_s`), not stretched by `load_factor`. `length_stretch`:
    (prompt tokens, factor) of a prefill beside streams by its prompt's length
    (`bench.length_stretch`), and `length_stretch_beside` the same on a prefill-only engine
    (without it, `length_stretch` stands for both); with them, a stretched prefill's excess is
    scaled by its prompt's length (`length_factor`) against `length_reference_tokens`, the
    length of the prompt the load factors were measured on (`length_shape`: the excess over 1
    scaled by the probe's excess, LENGTH_EXCESS, or the whole factor by the probe's factor,
    LENGTH_RATIO; `length_factor`). `length_alone` (and
    `length_alone_beside`): (prompt tokens, the engine's time for that prompt alone over its
    calibrated steps), from the same probe; with them, every prefill step takes that many times
    its calibrated time as well (`alone_factor`). `load_stretch_draws` (and
    `load_stretch_beside_draws`): the factors the load probe measured one prompt at a time beside
    streams, sorted; with them, a stretched prefill takes the one at its step's drawn quantile
    instead of the points (`load_factor`), the quantiles drawn from `draw_seed`.
    `stall_per_prefill_step` and `stall_excess_s`: engine stalls as rare events
    (`bench.engine_stalls`): a step that prefills stalls with that probability, and then runs
    longer by one of those seconds (sorted, drawn uniformly), the draws seeded from `stall_seed`
    (its own: each run of a sweep has one of its own, or every run would stall at the same step).
    `step_scatter_prefill` / `step_scatter_decode`: how a step's time scatters around its
    modelled time, as factors sorted (`bench.step_scatter`: the probe steps before the run, each
    over its group's median), for steps with a prompt's chunk / decode-only; with them, each
    step's time (engine time, stretch and excess) takes the factor at a quantile drawn as it
    starts, the draws seeded from `scatter_seed`."""

    num_cores: int = 0
    cpu_s_per_token: float = 0.0
    step_excess_1_s: float | None = None
    step_excess_2_s: float | None = None
    step_excess_alone_s: float | None = None
    stream_step_s: float | None = None
    step_excess_batch: tuple[tuple[int, float], ...] = ()
    neighbour_coefficients: tuple[float, float, float, float] | None = None
    load_stretch: tuple[tuple[int, float], ...] = ()
    load_stretch_beside: tuple[tuple[int, float], ...] = ()
    decode_beside_prefill: tuple[tuple[int, float], ...] = ()
    decode_beside_handover: tuple[tuple[int, float], ...] = ()
    path_cores: float = 0.0
    step_excess_quiet_s: float | None = None
    step_excess_spin_s: float | None = None
    step_excess_beside_prefill_s: float | None = None
    stretch_rule: str = STRETCH_STREAMS
    stretch_beside_prefill: float = 1.0
    step_excess_mix: tuple[tuple[int, float], ...] = ()
    path_beside_streams: tuple[tuple[int, float], ...] = ()
    length_stretch: tuple[tuple[int, float], ...] = ()
    length_stretch_beside: tuple[tuple[int, float], ...] = ()
    length_reference_tokens: int = 0
    length_shape: str = LENGTH_EXCESS
    length_alone: tuple[tuple[int, float], ...] = ()
    length_alone_beside: tuple[tuple[int, float], ...] = ()
    load_stretch_draws: tuple[float, ...] = ()
    load_stretch_beside_draws: tuple[float, ...] = ()
    draw_seed: int = 0
    stall_per_prefill_step: float = 0.0
    stall_excess_s: tuple[float, ...] = ()
    stall_seed: int = 0
    step_scatter_prefill: tuple[float, ...] = ()
    step_scatter_decode: tuple[float, ...] = ()
    scatter_seed: int = 0

    def __post_init__(self) -> None:
        if self.stretch_rule not in STRETCH_RULES:
            raise ValueError(f"host.stretch_rule must be one of {STRETCH_RULES}, got {self.stretch_rule!r}")
        if self.length_shape not in LENGTH_SHAPES:
            raise ValueError(f"host.length_shape must be one of {LENGTH_SHAPES}, got {self.length_shape!r}")
        if self.num_cores < 0:
            raise ValueError(f"host.num_cores must be >= 0, got {self.num_cores}")
        if self.cpu_s_per_token < 0:
            raise ValueError(f"host.cpu_s_per_token must be >= 0, got {self.cpu_s_per_token}")
        if self.path_cores < 0:
            raise ValueError(f"host.path_cores must be >= 0, got {self.path_cores}")
        if self.stretch_beside_prefill <= 0:
            raise ValueError(f"host.stretch_beside_prefill must be positive, got {self.stretch_beside_prefill}")
        if self.neighbour_coefficients is not None and len(self.neighbour_coefficients) != 4:
            raise ValueError(f"host.neighbour needs the four coefficients {COEFFICIENTS}")
        _check_counts("step_excess_batch", self.step_excess_batch, above=2)
        _check_counts("decode_beside_prefill", self.decode_beside_prefill, above=0)
        _check_counts("decode_beside_handover", self.decode_beside_handover, above=0)
        _check_counts("step_excess_mix", self.step_excess_mix, above=0)
        if self.step_excess_mix and (len(self.step_excess_mix) < 2 or self.step_excess_mix[0][0] != 1):
            raise ValueError(f"host.step_excess_mix needs the one-stream point and another, got "
                             f"{[n for n, _ in self.step_excess_mix]}")
        _check_counts("path_beside_streams", self.path_beside_streams, above=-1)
        if self.path_beside_streams and (self.path_beside_streams[0][0] != 0
                                         or any(v < 0 for _, v in self.path_beside_streams)):
            raise ValueError(f"host.path_beside_streams needs the point at no streams first and paths >= 0, "
                             f"got {self.path_beside_streams}")
        for name in ("load_stretch", "load_stretch_beside", "length_stretch", "length_stretch_beside",
                     "length_alone", "length_alone_beside"):
            points = getattr(self, name)
            _check_counts(name, points, above=0)
            if any(f <= 0 for _, f in points):
                raise ValueError(f"host.{name} factors must be positive, got {points}")
        for name in ("load_stretch_draws", "load_stretch_beside_draws", "step_scatter_prefill",
                     "step_scatter_decode"):
            draws = getattr(self, name)
            if any(f <= 0 for f in draws) or list(draws) != sorted(draws):
                raise ValueError(f"host.{name} needs positive factors in increasing order, got {draws}")
        if not 0 <= self.stall_per_prefill_step < 1:
            raise ValueError(f"host.stall_per_prefill_step is a probability below 1, "
                             f"got {self.stall_per_prefill_step}")
        if self.stall_per_prefill_step > 0 and not self.stall_excess_s:
            raise ValueError("host.stall_per_prefill_step needs stall_excess_s, the seconds a stall adds")
        if any(x <= 0 for x in self.stall_excess_s) or list(self.stall_excess_s) != sorted(self.stall_excess_s):
            raise ValueError(f"host.stall_excess_s needs positive seconds in increasing order, "
                             f"got {self.stall_excess_s}")
        for name in ("length_stretch", "length_stretch_beside"):
            points = getattr(self, name)
            if not points:
                continue
            if self.length_reference_tokens <= 0:
                raise ValueError(f"host.{name} needs length_reference_tokens, the load probe's prompt length")
            if self.length_shape == LENGTH_EXCESS and _length_excess(points, self.length_reference_tokens) <= 0:
                # the two probes disagree (the load probe stretched, this one not): no shape to scale by
                raise ValueError(f"host.{name} gives no stretch at the reference length "
                                 f"({self.length_reference_tokens} tokens): {points}")

    @property
    def is_modelled(self) -> bool:
        return self.num_cores > 0

    @property
    def stalls(self) -> bool:
        """Whether prefill steps stall now and then (`stall_per_prefill_step`)."""
        return self.stall_per_prefill_step > 0

    @property
    def scatters(self) -> bool:
        """Whether each step's time is drawn around its model's (`step_scatter_*` measured)."""
        return self.is_modelled and bool(self.step_scatter_prefill or self.step_scatter_decode)

    def scatter_factor(self, prefills: bool, quantile: float) -> float:
        """How many times its modelled time a step takes at its drawn `quantile`: the probe steps'
        time over their group's median at that quantile (`step_scatter_prefill` for a step with a
        prompt's chunk, `step_scatter_decode` for a decode-only one; the other where one is not
        measured). A step's median stays the model's; its spread, and so its mean, are the host's."""
        draws = self.step_scatter_prefill if prefills else self.step_scatter_decode
        draws = draws or self.step_scatter_decode or self.step_scatter_prefill
        if not self.is_modelled or not draws:
            return 1.0
        return _quantile(draws, quantile)

    @property
    def draws_stretch(self) -> bool:
        """Whether a prefill's stretch is drawn per step (`load_stretch_draws` measured)."""
        return self.is_modelled and bool(self.load_stretch_draws)

    def load_factor(self, num_streams: int, beside: bool = False, quantile: float | None = None) -> float:
        """How many times longer a prefill step or the request path takes with `num_streams`
        requests streaming on the host (`beside`: a prefill on a prefill-only engine, priced by
        `load_stretch_beside` when measured): 1 at none, the measured points joined linearly,
        beyond the last along its last segment; never below 1 (a measured point below 1 is
        noise: a load does not speed a prefill up). With `quantile` (a prefill step's draw) and
        the draws measured, the draw at that quantile instead, whatever the count (the probes'
        counts are pooled in them)."""
        if not self.is_modelled or num_streams <= 0:
            return 1.0
        draws = self.load_stretch_beside_draws if beside and self.load_stretch_beside_draws else self.load_stretch_draws
        if quantile is not None and draws:
            return max(1.0, _quantile(draws, quantile))
        stretch = self.load_stretch_beside if beside and self.load_stretch_beside else self.load_stretch
        if not stretch:
            return 1.0
        return max(1.0, _joined(((0, 1.0), *stretch), num_streams))

    def length_factor(self, factor: float, prompts: Sequence[tuple[int, int]], beside: bool = False) -> float:
        """A prefill step's `factor` (measured on the load probe's prompt of
        `length_reference_tokens`) for the prompts it computes, `prompts`: (tokens this step
        computes, the prompt's length) each. Its excess over 1 is scaled by the length probe's
        excess at each prompt's length over its excess at the reference (LENGTH_EXCESS; under
        LENGTH_RATIO the factor itself by the probe's factors), weighted by the tokens
        (`beside`: on a prefill-only engine, by `length_stretch_beside` when measured). The
        probe's points are joined linearly, held flat beyond its shortest and longest, a point
        below 1 read as no excess. Measured on colocated's engines (run 80): x1.78 at 256 tokens,
        x1.56 at 1,536 and x1.40 at 3,584, where one factor gave the load probe's x1.64 to all."""
        points = self.length_stretch_beside if beside and self.length_stretch_beside else self.length_stretch
        if not self.is_modelled or not points or factor <= 1.0 or not prompts:
            return factor
        if self.length_shape == LENGTH_RATIO:
            # the factor as a whole, not its excess, by the probe's factor at each length over its
            # factor at the reference: a probe with no stretch at the reference (hybrid's engine
            # that streams, x1.03 / 0.88 / 0.95 at 256 / 1,536 / 3,584 tokens on run 112) still
            # gives a shape, and one noisy point moves the result by its own share, not by the
            # share of a small excess. Never below 1: a load does not speed a prefill up.
            scale = _token_weighted(prompts, lambda length: _held(points, length))
            return max(1.0, factor * scale / _held(points, self.length_reference_tokens))
        scale = _token_weighted(prompts, lambda length: _length_excess(points, length))
        return 1.0 + (factor - 1.0) * scale / _length_excess(points, self.length_reference_tokens)

    def alone_factor(self, prompts: Sequence[tuple[int, int]], beside: bool = False) -> float:
        """How many times its calibrated time a prefill step computing `prompts` ((tokens this
        step computes, the prompt's length) each) takes on the idle engine: the length probe's
        alone parts over their calibrated steps at each prompt's length, joined linearly, flat
        beyond its shortest and longest, weighted by the tokens (`beside`: on a prefill-only
        engine, `length_alone_beside` when measured). 1 without them. The calibration fits one
        line to every engine's probes: alone on run 80's colocated and adaptive engines, a
        3,584-token prompt in 2,048-token chunks took x0.88-0.91 of its calibrated steps, a
        1,536-token one x0.85-1.00 and a 256-token one x1.01-1.07."""
        points = self.length_alone_beside if beside and self.length_alone_beside else self.length_alone
        if not self.is_modelled or not points or not prompts:
            return 1.0
        return _token_weighted(prompts, lambda length: _held(points, length))

    def stretched_path_s(self, path_s: float, num_streams: int) -> float:
        """A request path measured on the idle deployment (`path_s`), with `num_streams`
        streaming on the host: `load_factor` times longer. The hand-over's path, and the
        colocated route's where nothing measured it beside streams."""
        return path_s * self.load_factor(num_streams)

    def colocated_path_s(self, path_s: float, num_streams: int) -> float:
        """The colocated route's request path with `num_streams` streaming on the host: from
        `path_beside_streams` where measured (joined linearly; beyond the last count at the last:
        a probe's few paths at a count are noisy, and a line carried on past them is a guess),
        else `stretched_path_s` of the idle deployment's `path_s`."""
        points = self.path_beside_streams
        if not self.is_modelled or not points:
            return self.stretched_path_s(path_s, num_streams)
        if num_streams >= points[-1][0]:
            return points[-1][1]
        return _joined(points, max(0, num_streams))

    def prefill_neighbour_factor(self) -> float:
        """How many times its engine time a prefill takes beside another engine's step with a
        prompt's chunk: `stretch_beside_prefill`, never below 1 (a measured factor below 1 is
        noise: a neighbour's prefill does not speed a prefill up)."""
        return max(1.0, self.stretch_beside_prefill) if self.is_modelled else 1.0

    def beside_prefill_s(self, num_streams: int) -> float:
        """What a step streaming `num_streams` takes longer while a prefill-only engine prefills:
        the measured points joined linearly, below the first count at the first, beyond the last
        along its last segment; never below 0 (a measured point below 0 is noise)."""
        return self._beside_s(self.decode_beside_prefill, num_streams)

    def beside_handover_s(self, num_streams: int) -> float:
        """What a step streaming `num_streams` takes longer while a request is handed over to its
        engine, read from `decode_beside_handover` as `beside_prefill_s` reads its points."""
        return self._beside_s(self.decode_beside_handover, num_streams)

    def _beside_s(self, points: tuple[tuple[int, float], ...], num_streams: int) -> float:
        if not self.is_modelled or not points or num_streams <= 0:
            return 0.0
        if len(points) == 1 or num_streams <= points[0][0]:
            return max(0.0, points[0][1])
        return max(0.0, _joined(points, num_streams))

    def path_factor(self, num_paths: int) -> float:
        """How many times longer a step takes while `num_paths` requests are on their request
        path: their cores spread over all the host's cores (1 with no paths or no `path_cores`)."""
        if not self.is_modelled or self.path_cores <= 0 or num_paths <= 0:
            return 1.0
        return 1.0 + num_paths * self.path_cores / self.num_cores

    def step_delay_s(self, num_busy_engines: int, num_streamed_tokens: int, engine_s: float = 0.0,
                     neighbour_spinning: bool = False, beside_prefill: bool = False) -> float:
        """What a step of `engine_s` streaming `num_streamed_tokens` takes beyond its engine time,
        with `num_busy_engines` computing (its own included); `neighbour_spinning`: another
        engine, idle now, stepped within the last SPIN_WINDOW_S; `beside_prefill`: every other
        engine at work is in a prefill step, none of them prefill-only."""
        if not self.is_modelled or num_streamed_tokens <= 0:
            return 0.0
        if self.step_excess_1_s is not None and self.step_excess_2_s is not None:
            one = self.step_excess_1_s
            if num_busy_engines > 1 and beside_prefill and self.step_excess_beside_prefill_s is not None:
                # a neighbour in a prefill step does its host work once per 100-400 ms step, not
                # once per decode step: colocated's decode steps beside one ran +1.7-7.8 ms over
                # their model on runs 97-103, beside a decode step +3.8-10.0 (bench.step_scatter)
                one = self.step_excess_beside_prefill_s
            elif num_busy_engines <= 1:
                lone = self.step_excess_spin_s if neighbour_spinning else self.step_excess_quiet_s
                if lone is None:
                    lone = self.step_excess_alone_s
                if lone is not None:
                    one = lone
            return max(-engine_s / 2, one + self._further_streams_s(num_streamed_tokens))
        free_cores = max(1, self.num_cores - num_busy_engines)
        return num_streamed_tokens * self.cpu_s_per_token / free_cores

    @cached_property
    def _mix_slope_s(self) -> float:
        """What each further stream adds under `step_excess_mix`: fitted once, not per step."""
        return _slope(self.step_excess_mix)

    def _further_streams_s(self, num_streams: int) -> float:
        """What the streams of a decode step beyond its first add to its excess."""
        assert self.step_excess_1_s is not None and self.step_excess_2_s is not None
        if self.step_excess_mix:
            return (num_streams - 1) * self._mix_slope_s
        if self.step_excess_batch:
            points = ((1, self.step_excess_1_s), (2, self.step_excess_2_s), *self.step_excess_batch)
            return _joined(points, num_streams) - self.step_excess_1_s
        slope = (self.stream_step_s if self.stream_step_s is not None
                 else self.step_excess_2_s - self.step_excess_1_s)
        return (num_streams - 1) * slope


def _check_counts(name: str, points: tuple[tuple[int, float], ...], above: int) -> None:
    """Refuse measured (count, value) `points` whose counts are not increasing and above `above`."""
    counts = [n for n, _ in points]
    if any(n <= above for n in counts) or counts != sorted(set(counts)):
        raise ValueError(f"host.{name} needs increasing stream counts above {above}, got {counts}")


def _slope(points: tuple[tuple[int, float], ...]) -> float:
    """The least-squares slope of the measured (count, value) `points` (two or more, counts
    distinct), never below 0: a further stream does not make a decode step shorter."""
    counts, values = [n for n, _ in points], [v for _, v in points]
    mean_n, mean_v = sum(counts) / len(counts), sum(values) / len(values)
    spread = sum((n - mean_n) ** 2 for n in counts)
    return max(0.0, sum((n - mean_n) * (v - mean_v) for n, v in points) / spread)


def _token_weighted(prompts: Sequence[tuple[int, int]], value: Callable[[int], float]) -> float:
    """The mean of `value` at each prompt's length over a step's (tokens, prompt length)
    `prompts`, weighted by the tokens the step computes of each."""
    return sum(n * value(length) for n, length in prompts) / sum(n for n, _ in prompts)


def _length_excess(points: tuple[tuple[int, float], ...], length: int) -> float:
    """The length probe's excess over 1 at a prompt of `length` tokens (`_held`), never below 0."""
    return max(0.0, _held(points, length) - 1.0)


def _held(points: tuple[tuple[int, float], ...], length: int) -> float:
    """The value at `length` of the (length, value) `points` joined linearly, flat beyond the
    first and the last (a probe's shortest and longest prompts say nothing of what lies past them)."""
    if length <= points[0][0]:
        return points[0][1]
    if length >= points[-1][0]:
        return points[-1][1]
    return _joined(points, length)


def _quantile(values: Sequence[float], q: float) -> float:
    """The `q`-quantile (0 <= q <= 1) of `values`, interpolated linearly between neighbours
    (numpy's default; q = 0.5 gives the median)."""
    if not 0.0 <= q <= 1.0:
        raise ValueError(f"a quantile lies in [0, 1], got {q}")
    return float(np.quantile(values, q))


def _joined(points: tuple[tuple[int, float], ...], n: int) -> float:
    """The value at `n` of the measured (count, value) `points` (two or more, counts increasing)
    joined linearly; beyond the last, along its last segment."""
    for (n0, v0), (n1, v1) in zip(points, points[1:]):
        if n <= n1:
            break
    return v0 + (v1 - v0) * (n - n0) / (n1 - n0)

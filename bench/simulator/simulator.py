"""The discrete-event loop: requests arrive, the real policy routes them, engines step, KV moves.

A request's life here (the numbers of `pd_serve.router`):
1. arrival: too long for the engines -> a failed record; else `policy.decide()` on the view;
2a. colocated: the chosen worker prefills (chunked) and decodes; each sampled token is stamped
    with the end time of the step that produced it;
2b. disaggregated: the prefill worker runs the prompt as a prefill-only request and holds its
    blocks; the decode worker, when it admits the request, allocates blocks and starts the
    transfer over the (shared) link; when the bytes are in, the prefill worker frees its blocks
    and the decode worker computes the last prompt token (the first output token) and decodes;
3. the finished request becomes a `bench.metrics.RequestRecord`.

Under the adaptive policy, a prompt that waits its TTFT SLO on a stalled prefill worker is taken
back, as live (`bench.simulator.router`): aborted there (vLLM frees its blocks; one in the step
in flight is dropped when the step ends) and sent to its decode worker to prefill, after the
hand-over's path, as a colocated request with a `fallback`.

The cluster's `request_path` (measured live: client, Ray and router) delays each hand-over to a
worker: the first by its colocated seconds, a disaggregated request's second by the rest. On a
CPU host (`cluster.host`) a step that streams tokens takes longer by what streaming costs the
engines there, measured live (`bench.simulator.host`).

All events at one instant are applied before any idle worker plans its next step, so requests
arriving together can share a first step (the seeds' batches).
"""
from __future__ import annotations

import random
from dataclasses import dataclass, field, replace
from typing import Any, NamedTuple

from bench.metrics import RequestRecord
from bench.simulator import events as ev
from bench.simulator.engine_request import EngineRequest, Phase
from bench.simulator.host import (SPIN_WINDOW_S, STRETCH_DECODE_NEIGHBOUR, STRETCH_OWN_STREAMS,
                                  STRETCH_PREFILL_ONLY_BUSY, STRETCH_STREAMS)
from bench.simulator.links import SharedLink, Transfer
from bench.simulator.router import SimRouter, give_up_check_s
from bench.simulator.specs import ClusterSpec
from bench.simulator.step_cost import StepCost
from bench.simulator.stretch import StretchedStep
from bench.simulator.worker import FINISHED, PREFILL_DONE, TOKEN, SimWorker, StepPlan
from bench.workloads import RequestSpec, Workload
from schedulers.route_prediction import RoutePredictor
from schedulers.step_time import COEFFICIENTS
from schedulers.types import (ROLE_PREFILL, ROUTE_COLOCATED, ROUTE_DISAGGREGATED, Decision, NoCandidateError,
                              Policy, RequestInfo)

DEFAULT_MAX_EVENTS = 20_000_000
STALL_SEED_SALT = 1_000_003  # the stalls' draws: seed stall_seed + this, apart from the stretch's
SCATTER_SEED_SALT = 2_000_003  # the step scatter's draws: seed scatter_seed + this, apart from both


@dataclass(eq=False)
class Job:
    """The client's side of one request: what was asked and what it got."""

    spec: RequestSpec
    record: RequestRecord
    decision: Decision | None = None
    prefill_request: EngineRequest | None = None  # disaggregated: the prompt on its prefill worker


@dataclass
class WorkerStats:
    num_steps: int
    num_preemptions: int
    busy_s: float
    num_used_blocks_at_end: int


class StepRecord(NamedTuple):
    """One engine step as simulated: what it computed and when (its host's delays included), in
    the live engines' terms (`pd_serve.engine_stats`: prefill tokens, decode requests)."""

    worker_id: str
    start_s: float
    end_s: float
    num_prefill_tokens: int
    num_decode_reqs: int


@dataclass
class SimResult:
    """Records in workload order, plus what the engines and the router did."""

    records: list[RequestRecord]
    end_s: float
    workers: dict[str, WorkerStats]
    num_fallbacks: int
    decisions: list[Decision] = field(default_factory=list)
    # request_id -> when its prompt reached the engine that prefills it, and for a
    # disaggregated request when that engine's prefill was done (`bench.ttft_split`)
    prompt_reached_s: dict[str, float] = field(default_factory=dict)
    prompt_prefilled_s: dict[str, float] = field(default_factory=dict)
    num_stalls: int = 0  # engine stalls drawn (HostSpec.stall_per_prefill_step)
    num_worker_stalls: int = 0  # stalls the router saw (schedulers/stall.py), each counted once
    num_taken_back: int = 0  # prompts taken back from a stalled prefill worker
    steps: list[StepRecord] = field(default_factory=list)  # every engine step, when kept (`keep_steps`)

    @property
    def num_leaked_blocks(self) -> int:
        """KV blocks still allocated after every request ended: must be 0."""
        return sum(w.num_used_blocks_at_end for w in self.workers.values())

    @property
    def num_preemptions(self) -> int:
        return sum(w.num_preemptions for w in self.workers.values())


class Simulator:
    """One run of one workload on one cluster under one policy (build a new one per run)."""

    def __init__(self, cluster: ClusterSpec, policy: Policy, keep_decisions: bool = False,
                 max_events: int = DEFAULT_MAX_EVENTS, speed_by_role: bool = True, keep_steps: bool = False) -> None:
        self.cluster = cluster
        cost = StepCost.of(cluster.step_model)
        self.kv = cluster.step_model.kv
        self.workers = {w.worker_id: SimWorker(w, cost) for w in cluster.workers}
        coefficients = cluster.host.neighbour_coefficients if cluster.host.is_modelled else None
        # Steps that start beside a computing engine, priced as calibrated with all engines at once.
        self.neighbour_cost = None if coefficients is None else StepCost.of(
            replace(cluster.step_model, **dict(zip(COEFFICIENTS, coefficients))))
        # The TPOT SLO behind each running request's slack: the one the policy judges by.
        self.router = SimRouter(policy, self.workers, cluster.link.estimate(), self.kv.bytes_per_token,
                                RoutePredictor(cluster.step_model, cluster.chunk_tokens),
                                getattr(policy, "slo_table", None),
                                max(cluster.request_path.colocated_s, cluster.request_path.disaggregated_s),
                                speed_by_role)
        self.max_model_len = min(w.engine.max_model_len for w in cluster.workers)
        self.keep_decisions = keep_decisions
        # every step, to set beside the live engines' own (`bench.steps_beside`); a step's start
        # and what it computes are kept until it ends (a re-stretched step ends later)
        self.steps: list[StepRecord] | None = [] if keep_steps else None
        self._step_started: dict[str, tuple[float, int, int]] = {}
        self.max_events = max_events
        self.queue = ev.EventQueue()
        # One link per (prefill, decode) pair, or one for all; fills as pairs first transfer.
        self.links: dict[Any, SharedLink] = {}
        self.decisions: list[Decision] = []
        self._pending: list[RequestSpec] = []  # closed loop: requests not yet sent
        self._num_open_jobs = 0
        # Prefill steps in flight that the host's load stretches as it changes (stretch.py), and
        # each worker's step number: a STEP_DONE for an earlier end of a re-stretched step is stale.
        self._stretched: dict[str, StretchedStep] = {}
        # per decode worker, the disaggregated requests handed over to it (prefill done) that
        # have not yet had their first token there: the host's beside_handover_s
        self._incoming: dict[str, int] = {}
        self._step_number: dict[str, int] = {wid: 0 for wid in self.workers}
        self._num_paths = 0  # requests on their request path (a DISPATCH queued): the host's path_factor
        self.prompt_reached_s: dict[str, float] = {}  # SimResult.prompt_reached_s
        self.prompt_prefilled_s: dict[str, float] = {}  # SimResult.prompt_prefilled_s
        # When each worker's last step ended: its processes spin for SPIN_WINDOW_S after it (host.py).
        self._last_step_end_s: dict[str, float] = {}
        # Where the host draws each prefill step's stretch (stretch-draws, host.py): the quantile
        # drawn as the worker's current step started, kept while the load re-stretches it.
        self._draws = random.Random(cluster.host.draw_seed) if cluster.host.draws_stretch else None
        self._quantile: dict[str, float] = {}
        # Engine stalls as rare events (host.py): a stream of their own, so that a form that also
        # draws the stretch draws the same quantiles with them or without.
        self._stall_draws = random.Random(STALL_SEED_SALT + cluster.host.stall_seed) if cluster.host.stalls else None
        self.num_stalls = 0
        # Each step's scatter around its modelled time (host.py): a stream of its own as well.
        self._scatter_draws = (random.Random(SCATTER_SEED_SALT + cluster.host.scatter_seed)
                               if cluster.host.scatters else None)

    # ---- the loop ----------------------------------------------------------------------------

    def run(self, workload: Workload) -> SimResult:
        jobs = self._start(workload)
        num_events = 0
        now_s = 0.0
        while len(self.queue):
            now_s = self.queue.peek_time_s()
            dirty: set[str] = set()
            num_paths = self._num_paths
            while len(self.queue) and self.queue.peek_time_s() == now_s:
                _, kind, payload = self.queue.pop()
                dirty |= self._handle(now_s, kind, payload)
                num_events += 1
            for worker_id in sorted(dirty):
                self._kick(worker_id, now_s)
            if dirty or self._num_paths != num_paths:
                self._restretch(now_s)
            if num_events > self.max_events:
                raise RuntimeError(f"simulation exceeded {self.max_events} events at t={now_s:.3f} s")
        if self._num_open_jobs:
            raise RuntimeError(f"simulation stalled at t={now_s:.3f} s with {self._num_open_jobs} "
                               f"requests unfinished: {self._describe_workers()}")
        return self._result(jobs, now_s)

    def _start(self, workload: Workload) -> list[Job]:
        # A closed loop's arrival times are stamped when each request is sent.
        jobs = [Job(spec, RequestRecord(spec.request_id, spec.input_tokens, spec.output_tokens,
                                        arrival_s=float("nan") if spec.arrival_s is None else spec.arrival_s,
                                        bucket=spec.bucket)) for spec in workload.requests]
        if workload.is_closed_loop:
            self._pending = list(reversed(jobs))
            for _ in range(min(workload.concurrency, len(jobs))):
                self.queue.push(0.0, ev.ARRIVAL, self._pending.pop())
        else:
            for job in jobs:
                self.queue.push(job.spec.arrival_s, ev.ARRIVAL, job)
        self._num_open_jobs = len(jobs)
        return jobs

    def _handle(self, now_s: float, kind: str, payload: Any) -> set[str]:
        """Apply one event; returns the workers that may have new work."""
        if kind == ev.ARRIVAL:
            return self._arrive(payload, now_s)
        if kind == ev.DISPATCH:
            worker_id, request = payload
            self._num_paths -= 1
            return self._dispatch(worker_id, request, now_s, 0.0)
        if kind == ev.STEP_DONE:
            worker_id, number = payload
            if number != self._step_number[worker_id]:
                return set()  # the step was re-stretched to end at another time
            return self._step_done(worker_id, now_s)
        if kind == ev.TRANSFER_BYTES:
            self._link_add(payload, now_s)
            return set()
        if kind == ev.LINK_CHECK:
            return self._link_check(payload, now_s)
        if kind == ev.GIVE_UP_CHECK:
            return self._give_up_check(*payload, now_s)
        raise AssertionError(f"unknown event kind {kind!r}")

    def _kick(self, worker_id: str, now_s: float) -> None:
        worker = self.workers[worker_id]
        if not worker.is_idle:
            return
        plan = worker.schedule()
        for loading in plan.loads_started:
            self._start_transfer(loading, now_s)
        if not plan.is_empty:
            host = self.cluster.host
            stall_s = self._stall_s(plan)
            if host.is_modelled:
                num_busy = 1 + sum(not w.is_idle for w in self.workers.values())
                if self.neighbour_cost is not None and num_busy > 1:
                    plan.duration_s = max(plan.duration_s, self.neighbour_cost.step_s(plan.chunks, plan.decodes))
                scatter = (1.0 if self._scatter_draws is None
                           else host.scatter_factor(bool(plan.chunks), self._scatter_draws.random()))
                plan.duration_s *= scatter
                # a prefill loses a share of its core to the streams' work elsewhere (decode
                # steps: their excess is the delay below)
                if self._draws is not None and plan.chunks:
                    self._quantile[worker_id] = self._draws.random()
                factor = self._prefill_factor(worker_id, self._num_streams(plan), plan) if plan.chunks else 1.0
                delay_s = host.step_delay_s(num_busy, plan.num_streamed_tokens, plan.duration_s * factor,
                                            self._neighbour_spinning(worker_id, now_s),
                                            host.step_excess_beside_prefill_s is not None
                                            and self._neighbours_prefilling(worker_id))
                if plan.decodes and self._incoming.get(worker_id):
                    delay_s += host.beside_handover_s(len(plan.decodes))
                if plan.decodes and self._prefill_only_prefilling(worker_id):
                    delay_s += host.beside_prefill_s(len(plan.decodes))
                delay_s *= scatter  # the host's excess scatters with the step it is part of
                delay_s += stall_s  # a stall's seconds do not stretch with the load
                if plan.chunks or host.path_cores > 0:
                    # the prefill's share, and any step's share lost to the requests on their
                    # request path, re-read as they come and go
                    factor *= host.path_factor(self._num_paths)
                    step = StretchedStep(plan.duration_s, factor, now_s, delay_s)
                    self._stretched[worker_id] = step
                    plan.duration_s = step.end_s - now_s
                else:
                    plan.duration_s += delay_s
            else:
                plan.duration_s += stall_s
            worker.start(plan)
            if self.steps is not None:
                self._step_started[worker_id] = (now_s, sum(n for n, _ in plan.chunks), len(plan.decodes))
            self._push_step_done(worker_id, now_s + plan.duration_s)

    def _stall_s(self, plan: Any) -> float:
        """The seconds a stall adds to this step: none unless it prefills and the draw says so."""
        if self._stall_draws is None or not plan.chunks:
            return 0.0
        host = self.cluster.host
        if self._stall_draws.random() >= host.stall_per_prefill_step:
            return 0.0
        self.num_stalls += 1
        return self._stall_draws.choice(host.stall_excess_s)

    def _push_step_done(self, worker_id: str, end_s: float) -> None:
        self._step_number[worker_id] += 1
        self.queue.push(end_s, ev.STEP_DONE, (worker_id, self._step_number[worker_id]))

    def _restretch(self, now_s: float) -> None:
        """Re-read the load factor of every stretched prefill step in flight (the streams on the
        host may have changed) and move the ends that moved."""
        if not self._stretched:
            return
        host = self.cluster.host
        num_streams = self._num_streams()
        path_factor = host.path_factor(self._num_paths)
        for worker_id, step in self._stretched.items():
            old_end_s = step.end_s
            current = self.workers[worker_id].current
            factor = self._prefill_factor(worker_id, num_streams, current) if current.chunks else 1.0
            if step.restretch(now_s, factor * path_factor):
                self.workers[worker_id].busy_s += step.end_s - old_end_s
                self._push_step_done(worker_id, step.end_s)

    def _neighbour_spinning(self, worker_id: str, now_s: float) -> bool:
        """Whether another worker's last step ended within SPIN_WINDOW_S of `now_s`."""
        return any(now_s - end_s <= SPIN_WINDOW_S for wid, end_s in self._last_step_end_s.items()
                   if wid != worker_id)

    def _neighbours_prefilling(self, worker_id: str) -> bool:
        """Whether every other worker at work is in a prefill step, and none of them is
        prefill-only (what a decode step beside one loses is `host.beside_prefill_s`)."""
        others = [(wid, w.current) for wid, w in self.workers.items() if wid != worker_id and w.current is not None]
        return bool(others) and all(step.chunks and not self._is_prefill_only(wid) for wid, step in others)

    def _prefill_only_prefilling(self, worker_id: str) -> bool:
        """Whether a prefill-only engine other than `worker_id` is in a prefill step now."""
        return any(w.current is not None and w.current.chunks for wid, w in self.workers.items()
                   if wid != worker_id and self._is_prefill_only(wid))

    def _prefill_factor(self, worker_id: str, num_streams: int, plan: StepPlan) -> float:
        """How many times its engine time the prefill step `plan` on `worker_id` takes now, with
        `num_streams` streaming on the host, by the host's `stretch_rule` and, where measured,
        its prompts' lengths (host.py). Re-read as the engines' steps change (`_restretch`)."""
        host = self.cluster.host
        prefill_only = self._is_prefill_only(worker_id)
        prompts = [(n, r.num_prompt_tokens) for r, n in plan.num_new_tokens.items() if n > 1]  # as plan.chunks
        return (host.length_factor(self._load_factor(worker_id, num_streams, prefill_only), prompts,
                                   beside=prefill_only)
                * host.alone_factor(prompts, beside=prefill_only))

    def _load_factor(self, worker_id: str, num_streams: int, prefill_only: bool) -> float:
        """The prefill's factor on `worker_id` as the load probe's prompt would meet it."""
        host = self.cluster.host
        quantile = self._quantile.get(worker_id)
        if host.stretch_rule == STRETCH_STREAMS:
            return host.load_factor(num_streams, beside=prefill_only, quantile=quantile)
        if host.stretch_rule == STRETCH_PREFILL_ONLY_BUSY:
            return host.load_factor(num_streams, beside=prefill_only or self._prefill_only_prefilling(worker_id),
                                    quantile=quantile)
        assert host.stretch_rule in (STRETCH_DECODE_NEIGHBOUR, STRETCH_OWN_STREAMS), host.stretch_rule
        # what the probes measured, in the cases they measured: beside another engine's decode
        # steps, beside another engine's prefill, and on hybrid's engine that streams, beside a
        # prefill-only engine at work (decode-neighbour) or beside its own streams (own-streams);
        # nothing beside an idle engine
        factor = 1.0
        neighbours = [w.current for wid, w in self.workers.items() if wid != worker_id and w.current is not None]
        if any(step.decodes and not step.chunks for step in neighbours):
            factor = host.load_factor(num_streams, beside=prefill_only, quantile=quantile)
        if any(step.chunks for step in neighbours):
            # beside a neighbour's prefill: measured on its own (bench.prefill_beside)
            factor = max(factor, host.prefill_neighbour_factor())
        if prefill_only:
            return factor
        if host.stretch_rule == STRETCH_DECODE_NEIGHBOUR and self._prefill_only_prefilling(worker_id):
            factor = max(factor, host.load_factor(num_streams, beside=True, quantile=quantile))
        elif host.stretch_rule == STRETCH_OWN_STREAMS and self._only_streaming_engine(worker_id):
            # as the load probe measured it: a prompt on the engine that streams, beside its own
            # streams, whatever a prefill-only engine does (live, runs 90 and 94-96, hybrid's engine
            # that streams prefilled beside its prefill-only engine's prefills at x1.06-1.38 of its
            # calibrated steps, as beside it idle; the branch above gave x1.61-2.09;
            # `bench.steps_beside`)
            factor = max(factor, host.load_factor(num_streams, quantile=quantile))
        return factor

    def _only_streaming_engine(self, worker_id: str) -> bool:
        """Whether every other engine of the host is prefill-only (hybrid's engine that decodes)."""
        return all(self._is_prefill_only(wid) for wid in self.workers if wid != worker_id)

    def _is_prefill_only(self, worker_id: str) -> bool:
        return self.workers[worker_id].spec.role == ROLE_PREFILL

    def _num_streams(self, plan: StepPlan | None = None) -> int:
        """Requests streaming tokens on the host now: every worker's running decodes, with
        `plan`'s in place of its (idle) worker's."""
        running = sum(len(w.current.decodes) for w in self.workers.values() if w.current is not None)
        return running + (len(plan.decodes) if plan is not None else 0)

    # ---- requests ----------------------------------------------------------------------------

    def _arrive(self, job: Job, now_s: float) -> set[str]:
        record = job.record
        record.arrival_s = now_s
        if record.input_tokens + record.output_tokens > self.max_model_len:
            return self._fail(job, now_s, f"prompt ({record.input_tokens}) + output ({record.output_tokens}) "
                                          f"tokens exceed max_model_len {self.max_model_len}")
        info = RequestInfo(record.request_id, record.input_tokens, record.output_tokens)
        try:
            decision = self.router.decide(info, now_s)
        except NoCandidateError as error:
            return self._fail(job, now_s, f"no worker can serve the request: {error}")
        job.decision = decision
        if self.keep_decisions:
            self.decisions.append(decision)
        record.route, record.predicted_ttft_s = decision.route, decision.predicted_ttft_s
        record.decode_worker, record.prefill_worker = decision.decode_worker, decision.prefill_worker
        is_remote = decision.route == ROUTE_DISAGGREGATED
        target = decision.prefill_worker if is_remote else decision.decode_worker
        request = EngineRequest(job, record.input_tokens, record.output_tokens, is_prefill_only=is_remote)
        self.router.sent(target, record.request_id, record.input_tokens, now_s)
        if is_remote:
            job.prefill_request = request
            if self.router.takes_back(decision):
                first_s = give_up_check_s(now_s, now_s + self.router.ttft_slo_s(info))
                self.queue.push(first_s, ev.GIVE_UP_CHECK, (job, now_s))
        path_s = self.cluster.host.colocated_path_s(self.cluster.request_path.colocated_s, self._num_streams())
        return self._dispatch(target, request, now_s, path_s)

    def _step_done(self, worker_id: str, now_s: float) -> set[str]:
        dirty = {worker_id}
        self._last_step_end_s[worker_id] = now_s
        if self.steps is not None:
            start_s, num_prefill_tokens, num_decodes = self._step_started.pop(worker_id)
            self.steps.append(StepRecord(worker_id, start_s, now_s, num_prefill_tokens, num_decodes))
        self._stretched.pop(worker_id, None)
        for outcome, request in self.workers[worker_id].complete():
            job: Job = request.job
            record = job.record
            self.router.output(worker_id, record.request_id, now_s,
                               first_token=outcome != PREFILL_DONE and record.first_token_s is None)
            if outcome == PREFILL_DONE:
                dirty |= self._hand_over(job, request, worker_id, now_s)
                continue
            record.token_times.append(now_s)
            if record.first_token_s is None:
                record.first_token_s = now_s
                if job.decision.route == ROUTE_DISAGGREGATED:  # its hand-over ends with this token
                    self._incoming[worker_id] -= 1
                else:
                    self.router.prefilled(worker_id, record.request_id, now_s)
            if outcome == FINISHED:
                record.finish_s = now_s
                self.router.done(worker_id, record.request_id)
                dirty |= self._close(now_s)
            else:
                assert outcome == TOKEN
        return dirty

    def _dispatch(self, worker_id: str, request: EngineRequest, now_s: float, delay_s: float) -> set[str]:
        """The request reaches `worker_id` after `delay_s` (at once when 0)."""
        if delay_s > 0:
            self.queue.push(now_s + delay_s, ev.DISPATCH, (worker_id, request))
            self._num_paths += 1
            return set()
        if request.phase == Phase.FINISHED:  # taken back while on its way here
            return set()
        if not request.needs_remote_kv:  # the prompt reached the worker that prefills it
            self.prompt_reached_s[request.job.record.request_id] = now_s
            self.router.reached(request.job.record.request_id, now_s)
        self.workers[worker_id].add(request)
        return {worker_id}

    def _hand_over(self, job: Job, held: EngineRequest, prefill_id: str, now_s: float) -> set[str]:
        """Prefill done on P: the router sends the request to its decode worker."""
        self.prompt_prefilled_s[job.record.request_id] = now_s
        self.router.prefilled(prefill_id, job.record.request_id, now_s)
        self.router.done(prefill_id, job.record.request_id)
        decode_id = job.decision.decode_worker
        self._incoming[decode_id] = self._incoming.get(decode_id, 0) + 1
        loading = EngineRequest(job, job.record.input_tokens, job.record.output_tokens,
                                needs_remote_kv=True, held=held)
        self.router.sent(decode_id, job.record.request_id, 0, now_s)
        return self._dispatch(decode_id, loading, now_s, self._handover_path_s())

    def _handover_path_s(self) -> float:
        """The router's second call to a worker for one request: the path beyond the first."""
        return self.cluster.host.stretched_path_s(self.cluster.request_path.handover_s, self._num_streams())

    def _give_up_check(self, job: Job, sent_s: float, now_s: float) -> set[str]:
        """The live router's check on a prompt at its prefill worker: take it back if that worker
        is stalled (SimRouter.prefill_stalled), else ask again when it could be."""
        decision, record = job.decision, job.record
        pid, did = decision.prefill_worker, decision.decode_worker
        why, next_s = self.router.prefill_stalled(pid, did, record.request_id, now_s)
        if next_s is not None:
            self.queue.push(give_up_check_s(sent_s, next_s), ev.GIVE_UP_CHECK, (job, sent_s))
        if why is None:
            return set()
        held = job.prefill_request
        if not self.workers[pid].abort(held):  # still on its way there: dropped on arrival
            held.phase = Phase.FINISHED
        self.router.taken_back(pid, record.request_id)
        reason = f"{why}; prefilled locally"
        job.decision = Decision(ROUTE_COLOCATED, did, None, reason, decision.predicted_ttft_s, decision.predictions)
        record.route, record.prefill_worker, record.fallback = ROUTE_COLOCATED, None, reason
        local = EngineRequest(job, record.input_tokens, record.output_tokens)
        self.router.sent(did, record.request_id, record.input_tokens, now_s)
        return {pid} | self._dispatch(did, local, now_s, self._handover_path_s())

    def _fail(self, job: Job, now_s: float, error: str) -> set[str]:
        job.record.ok, job.record.error = False, error
        return self._close(now_s)

    def _close(self, now_s: float) -> set[str]:
        """One request ended; in a closed loop the next one is sent now."""
        self._num_open_jobs -= 1
        if self._pending:
            self.queue.push(now_s, ev.ARRIVAL, self._pending.pop())
        return set()

    # ---- transfers ---------------------------------------------------------------------------

    def _start_transfer(self, loading: EngineRequest, now_s: float) -> None:
        job: Job = loading.job
        num_bytes = self.kv.bytes_for_tokens(job.record.input_tokens)
        transfer = Transfer(num_bytes, job.decision.prefill_worker, job.decision.decode_worker,
                            loading.held, loading, now_s)
        self.queue.push(now_s + self.cluster.link.alpha_s, ev.TRANSFER_BYTES, transfer)

    def _link_key(self, transfer: Transfer) -> Any:
        return "shared" if self.cluster.shared_link else (transfer.prefill_id, transfer.decode_id)

    def _link_add(self, transfer: Transfer, now_s: float) -> None:
        key = self._link_key(transfer)
        link = self.links.setdefault(key, SharedLink(self.cluster.link))
        link.add(transfer, now_s)
        self._schedule_link_check(key, link)

    def _schedule_link_check(self, key: Any, link: SharedLink) -> None:
        done_s = link.next_done_s()
        if done_s is not None:
            self.queue.push(done_s, ev.LINK_CHECK, (key, link.version))

    def _link_check(self, payload: tuple[Any, int], now_s: float) -> set[str]:
        key, version = payload
        link = self.links[key]
        if version != link.version:  # a transfer joined or left since: a newer check is queued
            return set()
        dirty = set()
        for transfer in link.pop_done(now_s):
            job: Job = transfer.loading.job
            job.record.kv_transfer_bytes = transfer.num_bytes
            job.record.kv_transfer_s = transfer.duration_s
            self.workers[transfer.prefill_id].release_held(transfer.held)
            self.workers[transfer.decode_id].kv_loaded(transfer.loading)
            dirty |= {transfer.prefill_id, transfer.decode_id}
        self._schedule_link_check(key, link)
        return dirty

    # ---- results -----------------------------------------------------------------------------

    def _result(self, jobs: list[Job], end_s: float) -> SimResult:
        stats = {wid: WorkerStats(w.num_steps, w.num_preemptions, w.busy_s, w.pool.num_used)
                 for wid, w in self.workers.items()}
        return SimResult([j.record for j in jobs], end_s, stats, self.router.num_fallbacks, self.decisions,
                         self.prompt_reached_s, self.prompt_prefilled_s, self.num_stalls,
                         self.router.num_worker_stalls, self.router.num_taken_back, self.steps or [])

    def _describe_workers(self) -> str:
        return "; ".join(f"{wid}: {len(w.running)} running, {len(w.waiting)} waiting, "
                         f"{w.pool.num_free}/{w.pool.num_blocks} blocks free"
                         for wid, w in self.workers.items())


def simulate(workload: Workload, cluster: ClusterSpec, policy: Policy,
             keep_decisions: bool = False, speed_by_role: bool = True, keep_steps: bool = False) -> SimResult:
    """Serve `workload` on `cluster`, routing every request with `policy.decide` (the real policy
    object), and return one `RequestRecord` per request. `speed_by_role`: the router's speed
    factor per kind of engine (the live router's `scheduler.speed_by_role`). `keep_steps`: keep
    every engine step in `SimResult.steps`."""
    return Simulator(cluster, policy, keep_decisions, speed_by_role=speed_by_role,
                     keep_steps=keep_steps).run(workload)

"""The simulated router's side of a decision: the view it builds and the policy call it makes.

Mirrors `pd_serve.router.Router`: the view holds the engines' running/waiting counts and KV
usage (read here at the instant of arrival; the real router polls them every 0.25 s), the
router's own counts of requests in flight and prompt tokens queued per worker, and the link
estimate of every prefill/decode pair (the link's nominal line, as a probe would fit it). The
view's path per route stays 0: the simulator adds the measured request path to every request
itself, and the live router's path (router to engine and back) is a part of that. The policy
is called as `policy.decide(RequestInfo, ClusterView)`; when it finds no candidate, the
request is prefilled locally by the colocated policy, and that fallback is counted. A decision
without a predicted TTFT gets the cost model's prediction for the route taken, as live.
As live, the router learns how much slower than calibrated its prefills run at each load
(`schedulers.feedback.TtftFeedback`, fed with each prefill's simulated queue wait + compute on
its worker against the prediction), and gives every worker that factor for the requests in
flight on the host (the simulated cluster is one host), times its role's offset, in the view.

As live, the view gives each worker's wait for a running slot (`schedulers.decode_slots`: the
router's requests in flight there against the engine's `max_num_seqs`, timed by the remaining
tokens of those decoding) and each worker's stall (`schedulers.stall.worker_silence`: silent past
twice the longest it could take to give anything back), and under the adaptive policy a prompt
that has waited its whole TTFT SLO on a stalled prefill worker is taken back and prefilled on its
decode worker (`prefill_stalled`, checked on the live router's 0.05 s poll; the simulator moves
the request). Silence counts from what the engines give back at the end of their steps: a
streamed token, a prefilled prompt.
"""
from __future__ import annotations

import collections
import math
from typing import Mapping

from bench.simulator.worker import SimWorker
from schedulers.candidates import DECODE_ROLES, PREFILL_ROLES
from schedulers.decode_slack import DecodeProgress, worker_slack_s
from schedulers.decode_slots import worker_slot_wait_s
from schedulers.feedback import TtftFeedback, predicted_prefill_s
from schedulers.policies import ColocatedPolicy
from schedulers.prefill_queues import PrefillQueues
from schedulers.route_prediction import RoutePrediction, RoutePredictor
from schedulers.slo import SloTable
from schedulers.stall import STALL_TOLERANCE, Silence, take_back_reason, worker_silence
from schedulers.types import (ROLE_PREFILL, ROUTE_COLOCATED, ClusterView, Decision, LinkEstimate,
                              NoCandidateError, Policy, RequestInfo, WorkerView)

GIVE_UP_CHECK_S = 0.05  # the live router asks whether to take a prompt back this often (output_streams.py)
GIVE_UP_RECHECK_S = 0.25  # at most this long between checks while a prompt could be taken back


def give_up_check_s(sent_s: float, at_s: float) -> float:
    """The first of the live router's checks, every GIVE_UP_CHECK_S from `sent_s`, at or after `at_s`."""
    return sent_s + math.ceil((at_s - sent_s) / GIVE_UP_CHECK_S - 1e-9) * GIVE_UP_CHECK_S


class SimRouter:
    def __init__(self, policy: Policy, workers: Mapping[str, SimWorker], link: LinkEstimate,
                 kv_bytes_per_token: int, predictor: RoutePredictor | None = None,
                 slo_table: SloTable | None = None, path_s: float = 0.0, speed_by_role: bool = True) -> None:
        self.policy = policy
        self.predictor = predictor
        self.slo_table = slo_table or SloTable()
        self.workers = workers
        self.kv_bytes_per_token = kv_bytes_per_token
        self.links = {(p.worker_id, d.worker_id): link for p in workers.values() for d in workers.values()
                      if p.spec.role in PREFILL_ROLES and d.spec.role in DECODE_ROLES and p is not d}
        # Requests the router has sent to a worker and not yet seen finish there.
        self.num_inflight: collections.Counter[str] = collections.Counter()
        # Prompts sent to a worker for prefill whose first token (or KV) is not back yet.
        self.prefill_queues = PrefillQueues()
        self.num_fallbacks = 0
        self._fallback_policy = ColocatedPolicy()
        self.feedback = TtftFeedback(by_role=speed_by_role)
        # Per request decided with a prediction: (predicted queue + prefill on its prefilling
        # worker, that worker's speed factor, requests in flight on the host, the worker) at the
        # decision.
        self._at_decision: dict[str, tuple[float, float, int, str]] = {}
        self._prefill_start_s: dict[str, float] = {}  # when the prompt reached its prefilling worker
        # The stall rule's inputs, as the live router keeps them: the longest path outside the
        # engines, each worker's last output (a token or a prefilled prompt), the requests
        # streaming from it (from their first token), and the workers seen stalled (each stall
        # counted once).
        self.path_s = path_s
        self.last_output_s: dict[str, float] = {}
        self.streaming: dict[str, set[str]] = collections.defaultdict(set)
        self.stalled: set[str] = set()
        self.num_worker_stalls = 0
        self.num_taken_back = 0

    @property
    def host_inflight(self) -> int:
        return sum(self.num_inflight.values())

    def speed(self, wid: str) -> float:
        """`wid`'s speed factor now: the host's load line and its role's offset (feedback.py)."""
        return self.feedback.factor_at(self.host_inflight, self.workers[wid].spec.role)

    def view(self, now_s: float = 0.0) -> ClusterView:
        workers = tuple(WorkerView(
            worker_id=wid, role=w.spec.role, num_running=len(w.running), num_waiting=len(w.waiting),
            kv_cache_usage=w.pool.usage, num_inflight=self.num_inflight[wid],
            num_queued_prefill_tokens=self.prefill_queues.num_tokens(wid), speed_factor=speed,
            decode_slack_s=self._decode_slack_s(w, now_s, speed, decoding), stall_s=self._stall_s(wid, now_s, speed),
            slot_wait_s=worker_slot_wait_s(w.spec.role, decoding, self.num_inflight[wid], w.engine.max_num_seqs,
                                           self.predictor, speed),
            queue_head_tokens=head[0], queue_head_elapsed_s=head[1])
            for wid, w in self.workers.items()
            for speed, decoding, head in [(self.speed(wid), self._decoding(w), self.prefill_queues.head(wid, now_s))])
        return ClusterView(workers, self.links, self.kv_bytes_per_token)

    def _decoding(self, worker: SimWorker) -> list[DecodeProgress]:
        """The requests decoding on `worker`, by their tokens so far as the client got them (the
        live router's `decoding`)."""
        progress = []
        for r in worker.running:
            record = r.job.record if r.job is not None else None
            if r.is_prefill_only or r.num_generated < 1 or record is None or record.first_token_s is None:
                continue
            tpot_slo_s = self.slo_table.for_request(
                RequestInfo(record.request_id, record.input_tokens, record.output_tokens))[1]
            progress.append(DecodeProgress(record.first_token_s, len(record.token_times), r.max_output_tokens,
                                           tpot_slo_s))
        return progress

    def _decode_slack_s(self, worker: SimWorker, now_s: float, speed: float,
                        progress: list[DecodeProgress]) -> float:
        """The TPOT slack of the requests decoding on `worker` at `now_s` (`progress`: `_decoding`),
        from their tokens so far as the client got them (`pd_serve.router.Router._decode_slack_s`)."""
        step_s = 0.0
        if self.predictor is not None and progress:
            step_s = self.predictor.decode_step_s(len(worker.running), speed)
        return worker_slack_s(progress, now_s, step_s)

    def _silence(self, wid: str, now_s: float, speed: float) -> Silence | None:
        if self.predictor is None:
            return None
        worker = self.workers[wid]
        num_decodes = 0 if worker.spec.role == ROLE_PREFILL else max(len(worker.running), len(self.streaming[wid]))
        return worker_silence(wid, now_s, num_decodes=num_decodes, streaming=bool(self.streaming[wid]),
                              last_output_s=self.last_output_s.get(wid), queues=self.prefill_queues,
                              predictor=self.predictor, speed_factor=speed, path_s=self.path_s)

    def _stall_s(self, wid: str, now_s: float, speed: float | None = None) -> float:
        """`wid`'s stall at `now_s` (`pd_serve.router.Router._stall_s`), each stall counted once."""
        speed = self.speed(wid) if speed is None else speed
        return self._counted(wid, self._silence(wid, now_s, speed))

    def _counted(self, wid: str, silence: Silence | None) -> float:
        """The stall `silence` gives `wid`, each stall counted once as it begins."""
        stalled = 0.0 if silence is None else silence.stall_s()
        if stalled > 0 and wid not in self.stalled:
            self.stalled.add(wid)
            self.num_worker_stalls += 1
        elif stalled == 0:
            self.stalled.discard(wid)
        return stalled

    def takes_back(self, decision: Decision) -> bool:
        """Whether a prompt routed by `decision` may be taken back from its prefill worker: only
        what the adaptive policy chose from its predictions, as live (not a fallback's route)."""
        return (self.policy.name == "adaptive" and decision.route != ROUTE_COLOCATED
                and decision.prefill_worker is not None)

    def ttft_slo_s(self, request: RequestInfo) -> float:
        return self.slo_table.for_request(request)[0]

    def prefill_stalled(self, pid: str, did: str, request_id: str, now_s: float) -> tuple[str | None, float | None]:
        """Whether to take the prompt `request_id` back from its prefill worker `pid` now, by the
        live router's rule (`schedulers.stall.take_back_reason`; the simulator asks from when the
        prompt has waited its TTFT SLO): (why, None) to take it back; (None, when to ask again)
        while it waits there; (None, None) when it is no longer queued there."""
        if not self.prefill_queues.has(pid, request_id):
            return None, None
        silence = self._silence(pid, now_s, self.speed(pid))
        stalled_s = self._counted(pid, silence)
        why = take_back_reason(pid, stalled_s, lambda: self._stall_s(did, now_s))
        if why is not None:
            return why, None
        next_s = now_s + GIVE_UP_CHECK_S
        if stalled_s == 0 and silence is not None:  # when it would stall if nothing came back meanwhile
            onset_s = now_s - silence.silent_s + STALL_TOLERANCE * silence.longest_wait_s
            next_s = min(max(next_s, onset_s), now_s + GIVE_UP_RECHECK_S)
        return None, next_s

    def taken_back(self, pid: str, request_id: str) -> None:
        """The prompt left `pid` unprefilled: its wait there teaches the feedback nothing (live,
        a result with a fallback is not observed)."""
        self.prefill_queues.prefilled(pid, request_id)
        self._at_decision.pop(request_id, None)
        self._prefill_start_s.pop(request_id, None)
        self.num_taken_back += 1
        self.done(pid, request_id)

    def output(self, worker_id: str, request_id: str, now_s: float, first_token: bool = False) -> None:
        """`worker_id` gave something back at `now_s` (a token, or a prefilled prompt's KV)."""
        self.last_output_s[worker_id] = now_s
        if first_token:
            self.streaming[worker_id].add(request_id)

    def decide(self, request: RequestInfo, now_s: float = 0.0) -> Decision:
        """The policy's decision at `now_s`; NoCandidateError only when nothing can serve it."""
        view = self.view(now_s)
        try:
            decision = self.policy.decide(request, view)
        except NoCandidateError:
            decision = self._fallback_policy.decide(request, view)
            self.num_fallbacks += 1
        self._check(decision)
        if decision.predicted_ttft_s is None and self.predictor is not None:
            route = self._predict(decision, request, view)
            decision = Decision(decision.route, decision.decode_worker, decision.prefill_worker,
                                decision.reason, route.ttft_s, {**decision.predictions, **route.as_dict()})
        predicted_s = predicted_prefill_s(decision.route, decision.predictions)
        if predicted_s > 0:
            wid = decision.prefill_worker or decision.decode_worker
            speed = next(w.speed_factor for w in view.workers if w.worker_id == wid)
            self._at_decision[request.request_id] = (predicted_s, speed, self.host_inflight, wid)
        return decision

    def _predict(self, decision: Decision, request: RequestInfo, view: ClusterView) -> RoutePrediction:
        """The cost model's prediction for the route taken (`pd_serve.router.Router._with_predictions`)."""
        by_id = {w.worker_id: w for w in view.workers}
        slos = SloTable().for_request(request)  # SLOs do not change a predicted TTFT
        decode = by_id[decision.decode_worker]
        if decision.route == ROUTE_COLOCATED:
            return self.predictor.colocated(request, decode, slos)
        prefill = by_id[decision.prefill_worker]
        part = self.predictor.prefill_on(request, prefill)
        link = view.link(prefill.worker_id, decode.worker_id)
        kv_bytes = self.predictor.step_model.kv.bytes_for_tokens(request.num_prompt_tokens)
        return self.predictor.disaggregated(request, prefill, decode, part, link, kv_bytes, slos)

    def sent(self, worker_id: str, request_id: str, num_prefill_tokens: int, now_s: float = 0.0) -> None:
        self.num_inflight[worker_id] += 1
        if num_prefill_tokens:
            self.prefill_queues.sent(worker_id, request_id, num_prefill_tokens, now_s)

    def reached(self, request_id: str, now_s: float) -> None:
        """The prompt reached its prefilling worker (after the request path)."""
        if request_id in self._at_decision:
            self._prefill_start_s[request_id] = now_s

    def prefilled(self, worker_id: str, request_id: str, now_s: float) -> None:
        """The prompt's prefill is done on `worker_id`: the feedback learns its queue + compute."""
        self.prefill_queues.prefilled(worker_id, request_id, now_s)
        start_s = self._prefill_start_s.pop(request_id, None)
        at_decision = self._at_decision.pop(request_id, None)
        if start_s is not None and at_decision is not None:
            predicted_s, speed, num_inflight, wid = at_decision
            self.feedback.observe(predicted_s / speed, now_s - start_s, num_inflight, self.workers[wid].spec.role)

    def done(self, worker_id: str, request_id: str) -> None:
        self.num_inflight[worker_id] -= 1
        self.streaming[worker_id].discard(request_id)

    def _check(self, decision: Decision) -> None:
        """A decision naming unknown workers is a policy bug: fail loudly, never reroute."""
        if decision.decode_worker not in self.workers:
            raise ValueError(f"policy {self.policy.name!r} chose unknown decode worker "
                             f"{decision.decode_worker!r}")
        if decision.route == "disaggregated":
            if (decision.prefill_worker, decision.decode_worker) not in self.links:
                raise ValueError(f"policy {self.policy.name!r} chose {decision.prefill_worker!r} -> "
                                 f"{decision.decode_worker!r}, not a prefill/decode pair of this cluster")
        elif decision.route != "colocated":
            raise ValueError(f"policy {self.policy.name!r} returned unknown route {decision.route!r}")

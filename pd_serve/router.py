"""The router: one Ray actor between clients and workers.

A request's life (numbered as in DESIGN.md):
1. validate against the model (vocabulary, length);
2. build the cluster view (router's in-flight counts + engines' polled load) and ask the policy
   (`schedulers/`) for a Decision; a forced route uses the colocated/disaggregated policy itself;
3a. colocated: the decode-capable worker prefills (chunked) and decodes, tokens stream back;
3b. disaggregated: the prefill worker runs the prompt with max_tokens=1 and do_remote_decode and
   returns kv_transfer_params; the decode worker pulls the KV blocks through them and decodes.
   If the prefill worker fails, or (for a prompt the adaptive policy sent there) it stalls
   (silent past twice the longest its queue could take, schedulers/stall.py) after the prompt
   waited its TTFT SLO while the decode worker does not, the decode worker prefills locally:
   the fallback is counted and reported in the result, never hidden;
4. the result carries route, workers, TTFT, inter-token latencies, transfer bytes and seconds.
"""
from __future__ import annotations

import asyncio
import collections
import logging
import time
import uuid
from dataclasses import replace
from typing import Any, AsyncIterator

from pd_serve.config import DeploymentConfig
from pd_serve.gc_pauses import GcPauses
from pd_serve.loop_stalls import LoopStalls
from pd_serve.metrics import RouterMetrics, decision_reason_label, prefill_time_s  # [frontdoors]
from pd_serve.output_streams import GaveUp, Outbox, OutputStreams, Running
from pd_serve.prompts import random_prompt
from pd_serve.request import GenerateRequest, GenerateResult, check_against_model
from pd_serve.worker import WorkerInfo
from schedulers.decode_slack import DecodeProgress, worker_slack_s
from schedulers.decode_slots import worker_slot_wait_s
from schedulers.feedback import TtftFeedback, predicted_prefill_s
from schedulers.path_estimate import RecentMedian
from schedulers.prefill_queues import PrefillQueues
from schedulers.registry import make_policy
from schedulers.route_prediction import RoutePredictor
from schedulers.stall import take_back_reason, worker_silence
from schedulers.step_time import StepTimeModel
from schedulers.types import (ROLE_PREFILL, ClusterView, Decision, LinkEstimate, NoCandidateError,
                              RequestInfo, WorkerView)
from transfer.kv_geometry import KVGeometry
from transfer.link_model import EngineExcess, LinkFit, LinkModelRegistry, engine_excess, fit_link

logger = logging.getLogger(__name__)

LOAD_POLL_INTERVAL_S = 0.25
# A worker that begins a call this long after the router made it has left the request waiting
# outside its engine. Seen on 2026-12-01 (docs/MEASUREMENTS.md, "Late starts"): 0.6-0.9 s, several calls begun
# together, the engine idle meanwhile; the cause is not found. Counted and logged so it shows.
# (Both times are wall clocks; across nodes they differ by the clocks' skew, far below this.)
LATE_START_S = 0.1
# Blocks per warm-up transfer of each pair: the first pays the NIXL handshake; the rest measure
# what vLLM's load path adds to the probed link (`engine_excess`), at a small size and at a long
# prompt's, three times each: identical transfers swing 4x on a busy CPU host. The long size
# (128 blocks: 4,096 tokens at block size 32) spans the prompts served: on run 32's machine the
# excess grew faster past 8 MiB than below, and a line fitted to 2 and 8 MiB transfers predicted
# 15.6 MiB ones at half their time. Capped by the engines' max_model_len (`warmup_blocks`).
WARMUP_TRANSFER_BLOCKS = (2, 2, 16, 128, 16, 128, 16, 128)
PREFILL_KV_PARAMS = {"do_remote_decode": True, "do_remote_prefill": False, "remote_engine_id": None,
                     "remote_block_ids": None, "remote_host": None, "remote_port": None}


def warmup_blocks(max_model_len: int, block_size: int) -> list[int]:
    """WARMUP_TRANSFER_BLOCKS, each capped so that its prompt (blocks * block_size + 1 tokens)
    and the one token it generates fit in `max_model_len`."""
    cap = max(1, (max_model_len - 2) // block_size)
    return [min(n, cap) for n in WARMUP_TRANSFER_BLOCKS]


def _fit_or_bound(samples: list[tuple[int, float]]) -> LinkFit:
    """A line through the warm-up transfers; when they are too noisy to give a positive slope
    (tiny transfers on a busy host), the bandwidth the largest one achieved, with no latency."""
    try:
        return fit_link(samples)
    except ValueError as err:
        num_bytes, seconds = max(samples)
        logger.warning("link fit from warm-up transfers failed (%s); using %.2f GB/s", err,
                       num_bytes / seconds / 1e9)
        return LinkFit(0.0, num_bytes / seconds)


class NoWorkerAvailableError(RuntimeError):
    """No healthy worker can serve the request (all candidates are down)."""


def engines_share_s(route: str, engine_s: dict[str, float | None]) -> float | None:
    """The part of a request's TTFT inside the engines: each worker's own (None when a worker
    reported none: vLLM kept no request stats)."""
    inside = [engine_s.get(n) for n in (("prefill", "decode") if route == "disaggregated" else ("decode",))]
    return sum(inside) if all(x is not None for x in inside) else None


def _is_actor_failure(err: BaseException) -> bool:
    import ray.exceptions as rex
    return isinstance(err, (rex.RayActorError, rex.ActorUnavailableError, rex.WorkerCrashedError))


class Router:
    def __init__(self, config: DeploymentConfig, workers: dict[str, Any], infos: dict[str, WorkerInfo],
                 tokenizer_path: str, step_model: StepTimeModel | None = None):
        from pd_serve.logs import log_to_stderr
        log_to_stderr()  # the one-line explanation of every decision must reach the logs
        self.config = config
        self.workers = workers
        self.infos = infos
        self.healthy = {wid: True for wid in workers}
        self.loads: dict[str, dict] = {wid: {} for wid in workers}
        self.inflight = collections.Counter()
        self.prefill_queues = PrefillQueues()
        # Per worker, the requests streaming tokens from it: their TPOT slack is in the view.
        self.decoding: dict[str, dict[str, DecodeProgress]] = collections.defaultdict(dict)
        # Per worker, when it last gave anything back (a streamed token, or a prefilled prompt's
        # KV on a prefill worker), and the workers seen stalled (stall.py).
        self.last_output_s: dict[str, float] = {}
        self.stalled: set[str] = set()
        any_info = next(iter(infos.values()))
        self.vocab_size = any_info.vocab_size
        self.max_model_len = min(i.max_model_len for i in infos.values())
        self.geometry = {wid: KVGeometry.from_hf_config(i.hf_config, i.block_size, i.kv_dtype)
                         for wid, i in infos.items()}
        self.step_model = step_model  # as calibrated at start-up, on an idle host
        # How much slower than calibrated the engines run, by the load on their host and by
        # role (the view gives each worker its factor; feedback.py).
        self.feedback = TtftFeedback(by_role=config.scheduler.speed_by_role)
        # What TTFTs hold outside the engines, measured per request (path_estimate.py).
        self.paths = {route: RecentMedian() for route in ("colocated", "disaggregated")}
        self.slo_table = config.scheduler.slo.table()
        # The chunk that interferes with decodes is the decode-capable workers' token budget.
        self.chunk_tokens = min(rc.engine.max_num_batched_tokens for role, rc in config.workers.items()
                                if role in ("decode", "both") and rc.count > 0)
        self.predictor = RoutePredictor(step_model, self.chunk_tokens) if step_model else None
        self.links = LinkModelRegistry()
        self.probe_fits: dict[tuple[str, str], LinkFit] = {}  # the NIXL probe's raw link fits
        self.engine_excesses: dict[tuple[str, str], EngineExcess] = {}  # what vLLM adds to the probe's line
        self.warmup_transfers: dict[tuple[str, str], list] = {}  # (bytes, seconds) it was measured on
        self.gc = GcPauses().install()  # every collection in this actor, timed (gc_pauses.py)
        # its event loop watched from ready() on (loop_stalls.py)
        self.loop = LoopStalls(dump_after_s=config.diagnostics.stack_dump_after_s)
        self.prediction_log: collections.deque = collections.deque(maxlen=10000)
        # Per request decided with a prediction: its prefilling worker's (speed factor, requests
        # in flight on that worker's host, id) at the decision, to undo them when it is observed.
        self._load_at_decision: dict[str, tuple[float, int, str]] = {}
        self.auto_policy = self._build_auto_policy()
        self.route_policies = {"colocated": make_policy("colocated"),
                               "disaggregated": make_policy("disaggregated")}
        self.counters: collections.Counter = collections.Counter()
        self.metrics = RouterMetrics(workers)  # [frontdoors] Prometheus, served via metrics_text()
        self._tokenizer_path = tokenizer_path
        self._tokenizer = None
        self._poll_task: asyncio.Task | None = None
        # Every request's outputs come from its worker on one stream per worker (output_streams.py).
        self.worker_streams = OutputStreams(self._worker_outputs, self._abort_on_worker)
        # Each caller's (a frontend actor, a Deployment) requests' items, on one stream per caller.
        self._caller_outboxes: dict[str, Outbox] = {}
        self._caller_requests = Running(lambda _, err: {"error": err})  # the error itself: the caller raises it

    def _build_auto_policy(self):
        sched = self.config.scheduler
        params = dict(sched.params)
        if sched.policy == "adaptive":
            if self.step_model is None:
                raise ValueError("policy 'adaptive' needs the calibrated step-time model")
            params.setdefault("step_model", self.step_model)
            params.setdefault("slo_table", self.slo_table)
            params.setdefault("chunk_tokens", self.chunk_tokens)
        return make_policy(sched.policy, **params)

    async def _worker_outputs(self, wid: str) -> AsyncIterator[list]:
        async for ref in self.workers[wid].outputs.options(num_returns="streaming").remote():
            yield await ref

    def _abort_on_worker(self, wid: str, rid: str) -> None:
        if self.healthy.get(wid, False):
            self.workers[wid].abort.remote(rid)  # the worker cancels it; nothing to wait for

    # ---- lifecycle -------------------------------------------------------------------------
    async def ready(self) -> dict:
        from transformers import AutoTokenizer

        await self.loop.start()
        self._tokenizer = AutoTokenizer.from_pretrained(self._tokenizer_path)
        await self._poll_loads_once()
        self._poll_task = asyncio.get_running_loop().create_task(self._poll_loads_forever())
        return {"vocab_size": self.vocab_size, "max_model_len": self.max_model_len}

    async def _poll_loads_forever(self) -> None:
        while True:
            await asyncio.sleep(LOAD_POLL_INTERVAL_S)
            try:
                await self._poll_loads_once()
            except Exception:  # polling must never die; a worker failure is recorded below
                logger.exception("load poll failed")

    async def _poll_loads_once(self) -> None:
        ids = [w for w in self.workers if self.healthy[w]]
        results = await asyncio.gather(*(self.workers[w].load.remote() for w in ids),
                                       return_exceptions=True)
        for wid, res in zip(ids, results):
            if isinstance(res, BaseException):
                if _is_actor_failure(res):
                    self._mark_dead(wid, res)
            else:
                self.loads[wid] = res
                self.metrics.observe_load(wid, res)  # [frontdoors]

    def _mark_dead(self, wid: str, err: BaseException) -> None:
        if self.healthy.get(wid):
            logger.error("worker %s is down: %s", wid, type(err).__name__)
            self.counters["worker_failures"] += 1
        self.healthy[wid] = False

    # ---- views -----------------------------------------------------------------------------
    def host_inflight(self, wid: str) -> int:
        """Requests in flight on the workers sharing `wid`'s host (node), each counted once: a
        disaggregated request is in flight on its prefill worker, then on its decode worker."""
        node = self.infos[wid].node_ip
        return sum(self.inflight[w] for w, info in self.infos.items() if info.node_ip == node)

    def _running_and_speed(self, wid: str) -> tuple[int, float]:
        """`wid`'s running requests as it last reported them, and its speed factor now (its host's
        load line and its role's offset)."""
        num_running = int((self.loads.get(wid) or {}).get("num_running", 0))
        return num_running, self.feedback.factor_at(self.host_inflight(wid), self.infos[wid].role)

    def view(self) -> ClusterView:
        workers = []
        now = time.time()
        for wid, info in self.infos.items():
            load = self.loads.get(wid) or {}
            num_running, speed = self._running_and_speed(wid)
            head_tokens, head_elapsed_s = self.prefill_queues.head(wid, now)
            workers.append(WorkerView(
                worker_id=wid, role=info.role, is_healthy=self.healthy[wid],
                num_running=num_running, num_waiting=int(load.get("num_waiting", 0)),
                kv_cache_usage=float(load.get("kv_cache_usage", 0.0)),
                num_inflight=self.inflight[wid],
                num_queued_prefill_tokens=self.prefill_queues.num_tokens(wid),
                max_model_len=info.max_model_len, speed_factor=speed,
                decode_slack_s=self._decode_slack_s(wid, num_running, speed),
                stall_s=self._stall_s(wid, num_running, speed), slot_wait_s=self._slot_wait_s(wid, speed),
                queue_head_tokens=head_tokens, queue_head_elapsed_s=head_elapsed_s))
        any_geo = next(iter(self.geometry.values()))
        links = {pair: LinkEstimate(m.alpha_s, m.beta_bytes_per_s)
                 for pair in self.links.pairs() for m in [self.links.get(*pair)]}
        return ClusterView(workers=tuple(workers), links=links, kv_bytes_per_token=any_geo.bytes_per_token,
                           path_s={route: m.value for route, m in self.paths.items()})

    def _decode_slack_s(self, wid: str, num_running: int, speed: float) -> float:
        """The TPOT slack of the requests streaming from `wid` (schedulers/decode_slack.py); a
        request with one token so far is priced at the model's decode step for the worker."""
        step_s = self.predictor.decode_step_s(num_running, speed) if self.predictor is not None else 0.0
        return worker_slack_s(self.decoding[wid].values(), time.time(), step_s)

    def _slot_wait_s(self, wid: str, speed: float) -> float:
        """How long a request sent to `wid` now waits for a running slot (schedulers/decode_slots.py),
        from the router's own counts: its requests in flight there and the tokens of those streaming.
        0 on a prefill-only worker: its prompts leave once prefilled, and its queue times them."""
        info = self.infos[wid]
        return worker_slot_wait_s(info.role, self.decoding[wid].values(), self.inflight[wid], info.max_num_seqs,
                                  self.predictor, speed)

    def _stall_s(self, wid: str, num_running: int, speed: float) -> float:
        """How long `wid` has been silent past twice the longest it could take to give anything
        back (schedulers/stall.py: `worker_silence`, which the simulated router applies too);
        logged once per stall."""
        if self.predictor is None:
            return 0.0
        # vLLM counts a prefill worker's prompts as running: none of them decodes
        num_decodes = 0 if self.infos[wid].role == ROLE_PREFILL else max(num_running, len(self.decoding[wid]))
        silence = worker_silence(
            wid, time.time(), num_decodes=num_decodes,
            streaming=bool(self.decoding[wid]),  # entered at its first token, after last_output_s was set
            last_output_s=self.last_output_s.get(wid), queues=self.prefill_queues, predictor=self.predictor,
            speed_factor=speed, path_s=max(m.value for m in self.paths.values()))
        stalled = 0.0 if silence is None else silence.stall_s()
        if stalled > 0 and wid not in self.stalled:
            self.stalled.add(wid)
            self.counters["worker_stalls"] += 1
            logger.warning("worker %s: no %s for %.2f s while %d requests stream from it and %d prompts "
                           "wait on it; its predictions wait %.2f s more until it steps again", wid,
                           silence.awaited, silence.silent_s, len(self.decoding[wid]),
                           self.prefill_queues.num_prompts(wid), stalled)
        elif stalled == 0:
            self.stalled.discard(wid)
        return stalled

    def _with_predictions(self, decision: Decision, info: RequestInfo, view: ClusterView) -> Decision:
        """The decision with the calibrated cost model's predictions for the route taken, whichever
        policy chose it (the adaptive policy brings its own)."""
        if decision.predicted_ttft_s is not None or self.predictor is None:
            return decision
        by_id = {w.worker_id: w for w in view.workers}
        slos = self.slo_table.for_request(info)
        decode = by_id[decision.decode_worker]
        path_s = view.path_s.get(decision.route, 0.0)
        if decision.route == "colocated":
            route = self.predictor.colocated(info, decode, slos, path_s)
        else:
            link = view.link(decision.prefill_worker, decision.decode_worker)
            if link is None:
                return decision
            prefill = by_id[decision.prefill_worker]
            kv_bytes = self.geometry[decision.decode_worker].bytes_for_tokens(info.num_prompt_tokens)
            part = self.predictor.prefill_on(info, prefill)
            route = self.predictor.disaggregated(info, prefill, decode, part, link, kv_bytes, slos, path_s)
        return Decision(decision.route, decision.decode_worker, decision.prefill_worker,
                        decision.reason, route.ttft_s, {**decision.predictions, **route.as_dict()})

    async def status(self) -> dict:
        await self._poll_loads_once()
        return {
            "workers": {wid: {"role": i.role, "healthy": self.healthy[wid], "engine_id": i.engine_id,
                              "node_ip": i.node_ip, "load": self.loads.get(wid, {}),
                              "inflight": self.inflight[wid], "niceness": i.niceness}
                        for wid, i in self.infos.items()},
            "policy": self.auto_policy.name,
            "counters": dict(self.counters),
            "speed_feedback": self._feedback_summary(),
            "gc": self.gc.summary(),
            "loop": self.loop.summary(),
        }

    def _feedback_summary(self) -> dict:
        """How much slower than calibrated the prefills run, idle and at 1, 2, 4 and 8 in flight,
        and each kind of engine against that (feedback.py)."""
        fb = self.feedback
        return {"observed": fb.num_observed, "load_slope": fb.line()[1],
                "factor_by_inflight": {n: fb.factor_at(n) for n in (0, 1, 2, 4, 8)},
                "role_factors": fb.role_factors()}

    def metrics_text(self) -> str:  # [frontdoors]
        """The Prometheus exposition of this deployment's metrics (pd_serve/metrics.py)."""
        return self.metrics.text()

    # ---- requests --------------------------------------------------------------------------
    def _decide(self, req: GenerateRequest, rid: str, num_tokens: int) -> tuple[Decision, str | None]:
        info = RequestInfo(request_id=rid, num_prompt_tokens=num_tokens, max_tokens=req.max_tokens)
        view = self.view()
        policy = self.auto_policy if req.route == "auto" else self.route_policies[req.route]
        try:
            decision = self._with_predictions(policy.decide(info, view), info, view)
            if decision.predicted_ttft_s is not None:
                wid = decision.prefill_worker or decision.decode_worker
                speed = next(w.speed_factor for w in view.workers if w.worker_id == wid)
                self._load_at_decision[rid] = (speed, self.host_inflight(wid), wid)
            return decision, None
        except NoCandidateError as err:
            if req.route == "colocated":
                raise NoWorkerAvailableError(f"no healthy worker can serve route 'colocated': {err}")
            try:  # no prefill/decode pair left: a local prefill is the honest way to still serve
                decision = self.route_policies["colocated"].decide(info, view)
            except NoCandidateError as err2:
                raise NoWorkerAvailableError(f"no healthy worker can serve the request: {err2}")
            self.counters["route_fallbacks"] += 1
            return decision, f"no prefill/decode pair available ({err}); prefilled locally"

    def _tokenize(self, req: GenerateRequest) -> list[int]:
        if req.prompt_token_ids is not None:
            return list(req.prompt_token_ids)
        return list(self._tokenizer.encode(req.prompt, add_special_tokens=False))

    async def generate(self, req: GenerateRequest) -> AsyncIterator[dict]:
        """Stream `{"type": "token", ...}` items, then one `{"type": "result", ...}`."""
        t_arrival = time.time()
        rid = req.request_id or uuid.uuid4().hex
        token_ids = self._tokenize(req)
        if not token_ids:
            from pd_serve.request import InvalidRequestError
            raise InvalidRequestError("prompt is empty after tokenization")
        check_against_model(token_ids, req.max_tokens, self.vocab_size, self.max_model_len)
        decision, fallback = self._decide(req, rid, len(token_ids))
        try:
            async for item in self._run(req, rid, token_ids, decision, fallback, t_arrival):
                yield item
        finally:
            self._load_at_decision.pop(rid, None)  # also when the request failed or was cancelled

    # ---- a caller's requests on one stream (output_streams.py) -------------------------------
    async def submit(self, caller: str, req: GenerateRequest) -> None:
        """Start `req` (its `request_id` set) for `caller`: its items, as `generate` yields them,
        go out on `outputs(caller)` as (request id, item); a failure as {"error": exception}.
        One stream per caller carries all its requests, an item per turn of this loop: a Ray
        stream item costs CPU whatever it holds (output_streams.py)."""
        rid = req.request_id
        if not rid:
            raise ValueError("submit needs the request's request_id (the caller keys its items by it)")
        if rid in self._caller_requests:
            from pd_serve.request import InvalidRequestError
            raise InvalidRequestError(f"request_id {rid!r} is already in flight")
        self._caller_requests.start(rid, self.generate(req), self._caller_outboxes.setdefault(caller, Outbox()),
                                    owner=caller)

    async def outputs(self, caller: str) -> AsyncIterator[list]:
        """Every item of `caller`'s submitted requests, a list per batch; until the caller goes.
        A new call takes over from the previous one."""
        outbox = self._caller_outboxes.setdefault(caller, Outbox())
        try:
            async for batch in outbox.batches():
                yield batch
        finally:
            if self._caller_outboxes.get(caller) is outbox and not outbox.is_read:
                # The caller went: nothing waits for its requests' items any more.
                del self._caller_outboxes[caller]
                self._caller_requests.cancel_owned_by(caller)

    async def cancel(self, request_id: str) -> None:
        """Stop a submitted request whose caller left; its workers abort it."""
        self._caller_requests.cancel(request_id)

    async def num_submitted(self) -> int:
        """Submitted requests not yet finished (none after a batch: nothing leaked)."""
        return len(self._caller_requests)

    async def _run(self, req: GenerateRequest, rid: str, token_ids: list[int], decision: Decision,
                   fallback: str | None, t_arrival: float) -> AsyncIterator[dict]:
        self.metrics.observe_decision(decision.route, decision_reason_label(  # [frontdoors]
            req.route, self.auto_policy.name, fallback is not None))
        t_dispatch = time.time()  # [frontdoors] prefill timing for the metrics
        self.counters[f"route_decisions:{decision.route}"] += 1
        logger.info("request %s: %d prompt tokens, route=%s -> %s (prefill=%s decode=%s): %s",
                    rid, len(token_ids), req.route, decision.route, decision.prefill_worker,
                    decision.decode_worker, decision.reason)
        kv_params = None
        prefill_worker = None
        engine_s: dict[str, float | None] = {}  # each worker's TTFT inside its engine
        if decision.route == "disaggregated":
            kv_params, fallback, engine_s["prefill"] = await self._remote_prefill(
                rid, token_ids, req, decision)
            prefill_worker = decision.prefill_worker if kv_params else None
        decode_worker = decision.decode_worker
        t_decode_start = time.time()  # [frontdoors]
        result = GenerateResult(
            request_id=rid, token_ids=[], text="",
            route="disaggregated" if kv_params else "colocated", ttft_s=0.0, e2e_s=0.0, itl_s=[],
            prefill_worker=prefill_worker, decode_worker=decode_worker, kv_transfer_bytes=0,
            kv_transfer_s=None, finish_reason=None, num_prompt_tokens=len(token_ids),
            predicted_ttft_s=decision.predicted_ttft_s, decision_reason=decision.reason,
            fallback=fallback)
        async for item in self._decode(rid, token_ids, req, decode_worker, kv_params, result, engine_s):
            yield item
        result.e2e_s = time.time() - t_arrival
        if result.token_times:
            result.ttft_s = result.token_times[0] - t_arrival
            result.itl_s = [b - a for a, b in zip(result.token_times, result.token_times[1:])]
        result.text = self._tokenizer.decode(result.token_ids, skip_special_tokens=True)
        self.counters["requests_finished"] += 1
        prefill_s = prefill_time_s(result, t_dispatch, t_decode_start)
        self._observe_actuals(result, decision, engine_s)
        self.metrics.observe_result(result, prefill_s)  # [frontdoors]
        yield {"type": "result", "result": result.to_dict()}

    def _observe_actuals(self, result: GenerateResult, decision: Decision,
                         engine_s: dict[str, float | None]) -> None:
        """Feed what really happened back: the link model learns every transfer; the step
        model's speed factor learns from every prefill inside its engine; the route's path
        from every TTFT."""
        if result.route == "disaggregated" and result.kv_transfer_bytes > 0 and result.kv_transfer_s:
            self.links.observe(result.prefill_worker, result.decode_worker, result.kv_transfer_bytes,
                               result.kv_transfer_s)
        if result.predicted_ttft_s is None or result.ttft_s <= 0 or result.fallback is not None:
            return
        engines_s = engines_share_s(result.route, engine_s)
        at_decision = self._load_at_decision.get(result.request_id)
        self.prediction_log.append({
            "request_id": result.request_id, "route": result.route,
            "num_prompt_tokens": result.num_prompt_tokens,
            "predicted_ttft_s": result.predicted_ttft_s, "ttft_s": result.ttft_s,
            "predicted": dict(decision.predictions), "engine_s": dict(engine_s), "engines_s": engines_s,
            "speed_factor": at_decision[0] if at_decision else None,
            "host_inflight": at_decision[1] if at_decision else None})
        if engines_s is not None:  # the route's path: the TTFT less the engines' share
            self.paths[result.route].observe(result.ttft_s - engines_s)
        # The speed factor compares the prefill's queue + compute inside its engine, not the whole
        # TTFT: a disaggregated request's wait on a decode worker that later arrivals keep busy
        # says nothing about how fast the engines run, and scaling every step by it would make all
        # predictions, colocated ones included, too slow (seen here: 600-token prompts
        # predicted at 110 ms while they took 75); nor does the path, a few ms per request that
        # made short prompts look 30-50% slow.
        predicted_s = predicted_prefill_s(result.route, decision.predictions)
        prefill_s = engine_s.get("prefill" if result.route == "disaggregated" else "decode")
        if prefill_s and predicted_s > 0 and at_decision is not None:
            speed, num_inflight, wid = at_decision
            self.feedback.observe(predicted_s / speed, prefill_s, num_inflight, self.infos[wid].role)

    async def prediction_errors(self) -> list[dict]:
        """Recent requests that had a prediction: route, predicted and actual TTFT, the named
        predictions, each worker's TTFT inside its engine and their sum (seconds)."""
        return list(self.prediction_log)

    async def handles(self) -> dict[str, Any]:
        """The worker actors (for `pd-serve down` on a detached deployment)."""
        return dict(self.workers)

    async def seed_links(self, probe: dict) -> None:
        """Start each pair's link model from a NIXL probe (transfer.probe_report JSON)."""
        self.links.load_probe_results(probe)
        for pair in probe["pairs"]:
            self.probe_fits[(pair["prefill_id"], pair["decode_id"])] = LinkFit.from_dict(pair["fit"])

    async def link_models(self) -> dict:
        """Each pair's current model, with the engine overhead measured at start-up."""
        out = self.links.to_dict()
        for entry in out["models"]:
            pair = (entry["prefill_id"], entry["decode_id"])
            excess = self.engine_excesses.get(pair)
            entry["engine_overhead_s"] = None if excess is None else excess.overhead_s
            entry["engine_s_per_byte"] = None if excess is None else excess.s_per_byte
            entry["warmup_transfers"] = self.warmup_transfers.get(pair, [])
        return out

    async def _remote_prefill(self, rid: str, token_ids: list[int], req: GenerateRequest,
                              decision: Decision) -> tuple[dict | None, str | None, float | None]:
        """Run the prompt on the prefill worker: its KV params, else why not (the caller then
        prefills locally), and the prompt's TTFT inside the prefill engine."""
        pid = decision.prefill_worker
        self.inflight[pid] += 1
        t_sent = time.time()
        self.prefill_queues.sent(pid, rid, len(token_ids), t_sent)
        params = dict(req.sampling_params(), max_tokens=1)
        last = None
        give_up = None
        # Only what the adaptive policy chose from its predictions is taken back: a forced route,
        # or another policy's (the disaggregated baseline's), waits on as asked.
        if req.route == "auto" and self.auto_policy.name == "adaptive":
            ttft_slo_s = self._slos_s(rid, len(token_ids), req)[0]
            give_up = lambda: self._prefill_stalled(pid, decision.decode_worker, t_sent, ttft_slo_s)  # noqa: E731
        try:
            t_call = time.time()
            prefill_rid = rid + "-prefill"
            async for item in self.worker_streams.stream(pid, prefill_rid, lambda: self.workers[pid].submit.remote(
                    prefill_rid, token_ids, params, dict(PREFILL_KV_PARAMS)),
                    give_up=give_up):
                self.last_output_s[pid] = time.time()
                if last is None:
                    self.prefill_queues.prefilled(pid, rid, self.last_output_s[pid])  # its one token: done
                    self._note_start(rid, pid, t_call, item)
                last = item
        except GaveUp as why:  # aborted there; a prefill it finished meanwhile is freed by abort_timeout_s
            self.counters["route_fallbacks"] += 1
            self.counters["prefills_taken_back"] += 1
            reason = f"{why}; prefilled locally"
            logger.warning("request %s: %s", rid, reason)
            return None, reason, None
        except Exception as err:
            if not _is_actor_failure(err):
                raise
            self._mark_dead(pid, err)
            self.counters["route_fallbacks"] += 1
            reason = f"prefill worker {pid} failed ({type(err).__name__}); prefilled locally"
            logger.warning("request %s: %s", rid, reason)
            return None, reason, None
        finally:
            self.inflight[pid] -= 1
            self.prefill_queues.prefilled(pid, rid)
        kv_params = (last or {}).get("kv_transfer_params")
        if not kv_params:
            self.counters["route_fallbacks"] += 1
            reason = f"prefill worker {pid} returned no kv_transfer_params; prefilled locally"
            logger.warning("request %s: %s", rid, reason)
            return None, reason, None
        return kv_params, None, last.get("engine_ttft_s")

    def _worker_stall_s(self, wid: str) -> float:
        """`wid`'s stall now, as the view gives it to the policy (`_stall_s`)."""
        return self._stall_s(wid, *self._running_and_speed(wid))

    def _slos_s(self, rid: str, num_tokens: int, req: GenerateRequest) -> tuple[float, float]:
        """The request's (TTFT, TPOT) SLOs, from its prompt's length bucket."""
        return self.slo_table.for_request(RequestInfo(rid, num_tokens, req.max_tokens))

    def _prefill_stalled(self, pid: str, did: str, t_sent: float, ttft_slo_s: float) -> str | None:
        """Why to take a prompt sent at `t_sent` back from its prefill worker `pid` and prefill it
        on its decode worker `did`: the prompt has waited its whole TTFT SLO, `pid` is stalled
        and `did` is not; else None. A stalled worker may never answer (a stopped process):
        measured in run 44 (2026-12-02), hybrid's prefill worker stalled for 2.47 s and two
        430-token prompts routed to it just before waited 2.6 and 2.7 s for their first tokens.
        Waiting out the SLO first keeps the short silences of a busy prefill worker, which the
        stall rule also flags (0.08-0.42 s on the disaggregated deployment at 8 req/s, run 44),
        from costing a prompt its place in a queue that was about to serve it."""
        if time.time() - t_sent < ttft_slo_s:
            return None
        return take_back_reason(pid, self._worker_stall_s(pid), lambda: self._worker_stall_s(did))

    async def _decode(self, rid: str, token_ids: list[int], req: GenerateRequest, wid: str,
                      kv_params: dict | None, result: GenerateResult,
                      engine_s: dict[str, float | None] | None = None) -> AsyncIterator[dict]:
        self.inflight[wid] += 1
        if kv_params is None:
            self.prefill_queues.sent(wid, rid, len(token_ids), time.time())
        first = True
        tpot_slo_s = self._slos_s(rid, len(token_ids), req)[1]
        try:
            t_call = time.time()
            async for item in self.worker_streams.stream(wid, rid, lambda: self.workers[wid].submit.remote(
                    rid, token_ids, req.sampling_params(), kv_params)):
                now = time.time()
                if first:
                    first = False
                    self.prefill_queues.prefilled(wid, rid, now)  # nothing queued when its KV came in
                    self._note_start(rid, wid, t_call, item)
                    if engine_s is not None:
                        engine_s["decode"] = item.get("engine_ttft_s")
                    transfers = item.get("transfers") or []
                    if transfers:
                        result.kv_transfer_bytes = sum(t["num_bytes"] for t in transfers)
                        result.kv_transfer_s = sum(t["duration_s"] for t in transfers)
                new = item["token_ids"]
                if new:
                    result.token_ids.extend(new)
                    result.token_times.extend([now] * len(new))
                    self.last_output_s[wid] = now
                    progress = self.decoding[wid].get(rid)
                    self.decoding[wid][rid] = (
                        DecodeProgress(now, len(new), req.max_tokens, tpot_slo_s) if progress is None
                        else replace(progress, num_tokens=progress.num_tokens + len(new)))
                    yield {"type": "token", "token_ids": new, "t": now,
                           "finish_reason": item["finish_reason"] if item["finished"] else None}  # [frontdoors]
                if item["finished"]:
                    result.finish_reason = item["finish_reason"]
        except Exception as err:
            if _is_actor_failure(err):
                self._mark_dead(wid, err)
            raise
        finally:
            self.inflight[wid] -= 1
            self.prefill_queues.prefilled(wid, rid)  # failed before its first token
            self.decoding[wid].pop(rid, None)

    def _note_start(self, rid: str, wid: str, t_call: float, first_item: dict) -> None:
        """Count and log a worker that began a call late (LATE_START_S)."""
        delay = first_item.get("t_start", t_call) - t_call
        if delay > LATE_START_S:
            self.counters["late_worker_starts"] += 1
            logger.warning("request %s: worker %s began it %.3f s after the router called", rid, wid, delay)

    # ---- start-up ----------------------------------------------------------------------------
    async def warm_handshakes(self) -> dict:
        """One tiny disaggregated request per (prefill, decode) pair, so that no user request
        pays the NIXL handshake (tens of ms to seconds). Returns seconds per pair."""
        prefills = [w for w, i in self.infos.items() if i.role in ("prefill", "both")]
        decodes = [w for w, i in self.infos.items() if i.role in ("decode", "both")]
        block = next(iter(self.infos.values())).block_size
        out = {}
        for p in prefills:
            for d in decodes:
                if p == d:
                    continue
                t0 = time.perf_counter()
                samples = []
                # The first transfer pays the handshake; the next ones are real vLLM transfers
                # of several sizes, refined later by every request.
                max_len = min(self.infos[p].max_model_len, self.infos[d].max_model_len)
                for k, num_blocks in enumerate(warmup_blocks(max_len, block)):
                    salt = 10 * len(out) + k  # distinct prompts: no prefix-cache hit on either side
                    num_bytes, seconds = await self._warm_transfer(p, d, num_blocks * block + 1, salt)
                    if k == 0:
                        out[f"{p}->{d}"] = time.perf_counter() - t0
                    else:
                        samples.append((num_bytes, seconds))
                self.warmup_transfers[(p, d)] = [list(x) for x in samples]
                fit = self.probe_fits.get((p, d))
                if fit is not None:
                    # Probed: the probe gives the link's shape over the whole size range;
                    # the real transfers add what the engine's load path costs on top of it.
                    excess = engine_excess(fit, samples)
                    self.engine_excesses[(p, d)] = excess
                    self.links.seed(p, d, excess.on(fit))
                    logger.info("link %s->%s: engine adds %.2f ms + %.3f ms/MiB per transfer to the "
                                "probe's %.3f ms + bytes / %.2f GB/s", p, d, excess.overhead_s * 1e3,
                                excess.s_per_byte * 2**20 * 1e3, fit.alpha_s * 1e3,
                                fit.beta_bytes_per_s / 1e9)
                else:
                    self.links.seed(p, d, _fit_or_bound(samples))
        self.counters.clear()
        return out

    async def _warm_transfer(self, p: str, d: str, num_tokens: int, salt: int) -> tuple[int, float]:
        rid = f"warmup-{p}-{d}-{salt}-{uuid.uuid4().hex[:8]}"
        ids = random_prompt(num_tokens, rid, self.vocab_size)
        dec = Decision(route="disaggregated", decode_worker=d, prefill_worker=p, reason="warm-up")
        # A forced route: the adaptive policy's take-back (`_prefill_stalled`) must not fire here.
        # The first transfer pays the handshake, which no prediction prices; on run 89
        # (2026-12-06) a warm-up was taken back as a stall and the deployment failed to start.
        req = GenerateRequest(prompt_token_ids=tuple(ids), max_tokens=1, route="disaggregated")
        kv, fb, _ = await self._remote_prefill(rid, ids, req, dec)
        if kv is None:
            raise RuntimeError(f"handshake warm-up {p}->{d} failed: {fb}")
        res = GenerateResult(rid, [], "", "disaggregated", 0, 0, [], p, d, 0, None, None)
        async for _ in self._decode(rid, ids, req, d, kv, res):
            pass
        if res.kv_transfer_bytes <= 0 or not res.kv_transfer_s:
            raise RuntimeError(f"handshake warm-up {p}->{d}: no KV transfer was measured")
        return res.kv_transfer_bytes, res.kv_transfer_s

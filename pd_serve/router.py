"""The router: one Ray actor between clients and workers.

A request's life (numbered as in DESIGN.md):
1. validate against the model (vocabulary, length);
2. build the cluster view (router's in-flight counts + engines' polled load) and ask the policy
   (`schedulers/`) for a Decision; a forced route uses the colocated/disaggregated policy itself;
3a. colocated: the decode-capable worker prefills (chunked) and decodes, tokens stream back;
3b. disaggregated: the prefill worker runs the prompt with max_tokens=1 and do_remote_decode and
   returns kv_transfer_params; the decode worker pulls the KV blocks through them and decodes.
   If the prefill worker fails, the decode worker prefills locally: the fallback is counted and
   reported in the result, never hidden;
4. the result carries route, workers, TTFT, inter-token latencies, transfer bytes and seconds.
"""
from __future__ import annotations

import asyncio
import collections
import logging
import time
import uuid
from typing import Any, AsyncIterator

from pd_serve.config import DeploymentConfig
from pd_serve.request import GenerateRequest, GenerateResult, check_against_model
from pd_serve.worker import WorkerInfo
from schedulers.registry import make_policy
from schedulers.types import ClusterView, Decision, NoCandidateError, RequestInfo, WorkerView
from transfer.kv_geometry import KVGeometry

logger = logging.getLogger(__name__)

LOAD_POLL_INTERVAL_S = 0.25
PREFILL_KV_PARAMS = {"do_remote_decode": True, "do_remote_prefill": False, "remote_engine_id": None,
                     "remote_block_ids": None, "remote_host": None, "remote_port": None}


class NoWorkerAvailableError(RuntimeError):
    """No healthy worker can serve the request (all candidates are down)."""


def _is_actor_failure(err: BaseException) -> bool:
    import ray.exceptions as rex
    return isinstance(err, (rex.RayActorError, rex.ActorUnavailableError, rex.WorkerCrashedError))


class Router:
    def __init__(self, config: DeploymentConfig, workers: dict[str, Any], infos: dict[str, WorkerInfo],
                 tokenizer_path: str):
        self.config = config
        self.workers = workers
        self.infos = infos
        self.healthy = {wid: True for wid in workers}
        self.loads: dict[str, dict] = {wid: {} for wid in workers}
        self.inflight = collections.Counter()
        self.queued_prefill_tokens = collections.Counter()
        any_info = next(iter(infos.values()))
        self.vocab_size = any_info.vocab_size
        self.max_model_len = min(i.max_model_len for i in infos.values())
        self.geometry = {wid: KVGeometry.from_hf_config(i.hf_config, i.block_size, i.kv_dtype)
                         for wid, i in infos.items()}
        self.auto_policy = make_policy(config.scheduler.policy, **config.scheduler.params)
        self.route_policies = {"colocated": make_policy("colocated"),
                               "disaggregated": make_policy("disaggregated")}
        self.counters: collections.Counter = collections.Counter()
        self._tokenizer_path = tokenizer_path
        self._tokenizer = None
        self._poll_task: asyncio.Task | None = None

    # ---- lifecycle -------------------------------------------------------------------------
    async def ready(self) -> dict:
        from transformers import AutoTokenizer

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

    def _mark_dead(self, wid: str, err: BaseException) -> None:
        if self.healthy.get(wid):
            logger.error("worker %s is down: %s", wid, type(err).__name__)
            self.counters["worker_failures"] += 1
        self.healthy[wid] = False

    # ---- views -----------------------------------------------------------------------------
    def view(self) -> ClusterView:
        workers = []
        for wid, info in self.infos.items():
            load = self.loads.get(wid) or {}
            workers.append(WorkerView(
                worker_id=wid, role=info.role, is_healthy=self.healthy[wid],
                num_running=int(load.get("num_running", 0)), num_waiting=int(load.get("num_waiting", 0)),
                kv_cache_usage=float(load.get("kv_cache_usage", 0.0)),
                num_inflight=self.inflight[wid],
                num_queued_prefill_tokens=self.queued_prefill_tokens[wid]))
        any_geo = next(iter(self.geometry.values()))
        return ClusterView(workers=tuple(workers), kv_bytes_per_token=any_geo.bytes_per_token)

    async def status(self) -> dict:
        await self._poll_loads_once()
        return {
            "workers": {wid: {"role": i.role, "healthy": self.healthy[wid], "engine_id": i.engine_id,
                              "node_ip": i.node_ip, "load": self.loads.get(wid, {}),
                              "inflight": self.inflight[wid]} for wid, i in self.infos.items()},
            "policy": self.auto_policy.name,
            "counters": dict(self.counters),
        }

    # ---- requests --------------------------------------------------------------------------
    def _decide(self, req: GenerateRequest, rid: str, num_tokens: int) -> tuple[Decision, str | None]:
        info = RequestInfo(request_id=rid, num_prompt_tokens=num_tokens, max_tokens=req.max_tokens)
        view = self.view()
        policy = self.auto_policy if req.route == "auto" else self.route_policies[req.route]
        try:
            return policy.decide(info, view), None
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
        self.counters[f"route_decisions:{decision.route}"] += 1
        logger.info("request %s: %d prompt tokens, route=%s -> %s (prefill=%s decode=%s): %s",
                    rid, len(token_ids), req.route, decision.route, decision.prefill_worker,
                    decision.decode_worker, decision.reason)
        kv_params = None
        prefill_worker = None
        if decision.route == "disaggregated":
            kv_params, fallback = await self._remote_prefill(rid, token_ids, req, decision)
            prefill_worker = decision.prefill_worker if kv_params else None
        decode_worker = decision.decode_worker
        result = GenerateResult(
            request_id=rid, token_ids=[], text="",
            route="disaggregated" if kv_params else "colocated", ttft_s=0.0, e2e_s=0.0, itl_s=[],
            prefill_worker=prefill_worker, decode_worker=decode_worker, kv_transfer_bytes=0,
            kv_transfer_s=None, finish_reason=None, num_prompt_tokens=len(token_ids),
            predicted_ttft_s=decision.predicted_ttft_s, decision_reason=decision.reason,
            fallback=fallback)
        async for item in self._decode(rid, token_ids, req, decode_worker, kv_params, result):
            yield item
        result.e2e_s = time.time() - t_arrival
        if result.token_times:
            result.ttft_s = result.token_times[0] - t_arrival
            result.itl_s = [b - a for a, b in zip(result.token_times, result.token_times[1:])]
        result.text = self._tokenizer.decode(result.token_ids, skip_special_tokens=True)
        self.counters["requests_finished"] += 1
        yield {"type": "result", "result": result.to_dict()}

    async def _remote_prefill(self, rid: str, token_ids: list[int], req: GenerateRequest,
                              decision: Decision) -> tuple[dict | None, str | None]:
        """Run the prompt on the prefill worker; on its failure say why and prefill locally."""
        pid = decision.prefill_worker
        self.inflight[pid] += 1
        self.queued_prefill_tokens[pid] += len(token_ids)
        params = dict(req.sampling_params(), max_tokens=1)
        last = None
        try:
            gen = self.workers[pid].generate.options(num_returns="streaming").remote(
                rid + "-prefill", token_ids, params, dict(PREFILL_KV_PARAMS))
            async for ref in gen:
                last = await ref
        except Exception as err:
            if not _is_actor_failure(err):
                raise
            self._mark_dead(pid, err)
            self.counters["route_fallbacks"] += 1
            reason = f"prefill worker {pid} failed ({type(err).__name__}); prefilled locally"
            logger.warning("request %s: %s", rid, reason)
            return None, reason
        finally:
            self.inflight[pid] -= 1
            self.queued_prefill_tokens[pid] -= len(token_ids)
        kv_params = (last or {}).get("kv_transfer_params")
        if not kv_params:
            self.counters["route_fallbacks"] += 1
            reason = f"prefill worker {pid} returned no kv_transfer_params; prefilled locally"
            logger.warning("request %s: %s", rid, reason)
            return None, reason
        return kv_params, None

    async def _decode(self, rid: str, token_ids: list[int], req: GenerateRequest, wid: str,
                      kv_params: dict | None, result: GenerateResult) -> AsyncIterator[dict]:
        self.inflight[wid] += 1
        if kv_params is None:
            self.queued_prefill_tokens[wid] += len(token_ids)
        first = True
        try:
            gen = self.workers[wid].generate.options(num_returns="streaming").remote(
                rid, token_ids, req.sampling_params(), kv_params)
            async for ref in gen:
                item = await ref
                now = time.time()
                if first and kv_params is None:
                    self.queued_prefill_tokens[wid] -= len(token_ids)
                if first:
                    first = False
                    transfers = item.get("transfers") or []
                    if transfers:
                        result.kv_transfer_bytes = sum(t["num_bytes"] for t in transfers)
                        result.kv_transfer_s = sum(t["duration_s"] for t in transfers)
                new = item["token_ids"]
                if new:
                    result.token_ids.extend(new)
                    result.token_times.extend([now] * len(new))
                    yield {"type": "token", "token_ids": new, "t": now}
                if item["finished"]:
                    result.finish_reason = item["finish_reason"]
        except Exception as err:
            if _is_actor_failure(err):
                self._mark_dead(wid, err)
            raise
        finally:
            self.inflight[wid] -= 1
            if first and kv_params is None:
                self.queued_prefill_tokens[wid] -= len(token_ids)

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
                ids = [(7 * k + len(out)) % min(self.vocab_size, 256) for k in range(2 * block + 1)]
                dec = Decision(route="disaggregated", decode_worker=d, prefill_worker=p, reason="warm-up")
                req = GenerateRequest(prompt_token_ids=tuple(ids), max_tokens=1)
                kv, fb = await self._remote_prefill(f"warmup-{p}-{d}", ids, req, dec)
                if kv is None:
                    raise RuntimeError(f"handshake warm-up {p}->{d} failed: {fb}")
                res = GenerateResult("w", [], "", "disaggregated", 0, 0, [], p, d, 0, None, None)
                async for _ in self._decode(f"warmup-{p}-{d}", ids, req, d, kv, res):
                    pass
                if res.kv_transfer_bytes <= 0:
                    raise RuntimeError(f"handshake warm-up {p}->{d}: no KV bytes moved")
                out[f"{p}->{d}"] = time.perf_counter() - t0
        self.counters.clear()
        return out

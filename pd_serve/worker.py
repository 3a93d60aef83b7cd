"""A pd-serve worker: one vLLM AsyncLLM engine inside one Ray actor.

Role `prefill` runs prompts for others (max_tokens=1, do_remote_decode) and holds their KV blocks
until a decode worker has read them; `decode` pulls KV blocks over the connector and decodes;
`both` also prefills locally with chunked prefill. Every worker carries the KV connector
(`kv_both`), so any worker can take either side of a transfer when the router asks.

The actor is async. `generate` streams one request, a dict per engine output. The router instead
starts requests with `submit` and reads every request's outputs from the one stream `outputs`
gives it (output_streams.py: a Ray stream item costs CPU, one per engine step beats one per
token). The engine's own statistics (engine_stats.py) give load, per-step timings and transfer
records.
"""
from __future__ import annotations

import asyncio
import logging
import os
import time
from dataclasses import dataclass
from typing import Any, AsyncIterator

from pd_serve.config import EngineConfig
from pd_serve.gc_pauses import GcPauses
from pd_serve.loop_stalls import LoopStalls
from pd_serve.nixl_peers import QUALNAME as NIXL_PEERS
from pd_serve.output_streams import Outbox, Running
from pd_serve.prompts import random_prompt
from transfer.probe_host import AsyncProbeHost

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class WorkerSpec:
    """Everything a worker needs to start its engine; built by the deployment, sent to the actor."""

    worker_id: str
    role: str
    model: str
    tokenizer: str | None
    engine: EngineConfig
    device: str
    transfer_backend: str
    abort_timeout_s: int
    single_node: bool
    cpu_core: int | None = None  # CPU only: the core this engine's OpenMP threads are pinned to
    stack_dump_after_s: float | None = None  # config.diagnostics: the loop watch's all-thread dump


@dataclass(frozen=True)
class WorkerInfo:
    """What a started worker reports back (typed record across the actor boundary)."""

    worker_id: str
    role: str
    engine_id: str
    node_ip: str
    side_channel_port: int
    vocab_size: int
    max_model_len: int
    block_size: int
    hf_config: dict
    kv_dtype: str
    start_s: float
    pid: int
    niceness: int = 0  # the process's; Ray renices workers to 15 unless told not to (deployment.init_ray)
    max_num_seqs: int = 0  # the engine's running slots (0: not known); the router prices waiting for one


def _engine_args(spec: WorkerSpec, kv_transfer_config: dict | None):
    from vllm.engine.arg_utils import AsyncEngineArgs

    e = spec.engine
    kwargs: dict[str, Any] = dict(
        model=spec.model,
        tokenizer=spec.tokenizer or spec.model,
        dtype=e.dtype,
        max_model_len=e.max_model_len,
        max_num_batched_tokens=e.max_num_batched_tokens,
        max_num_seqs=e.max_num_seqs,
        block_size=e.block_size,
        enable_chunked_prefill=e.enable_chunked_prefill,
        enable_prefix_caching=e.enable_prefix_caching,
        enforce_eager=e.enforce_eager,
        tensor_parallel_size=e.tensor_parallel_size,
        kv_transfer_config=kv_transfer_config,
        enable_logging_iteration_details=True,  # per-step timings for calibration and load
        seed=0,
    )
    if kv_transfer_config is not None:
        kwargs["worker_extension_cls"] = NIXL_PEERS  # Worker.nixl_peers() asks the engine through it
    if e.long_prefill_token_threshold:
        kwargs["long_prefill_token_threshold"] = e.long_prefill_token_threshold
    if spec.device == "gpu":
        kwargs["kv_cache_memory_bytes"] = int(e.kv_cache_gib * 2**30)
    if e.tensor_parallel_size > 1:
        kwargs["distributed_executor_backend"] = "ray"  # TP ranks in the deployment's placement group
    kwargs.update(e.extra)
    return AsyncEngineArgs(**kwargs)


def _engine_ttft_s(out, t_submit_mono: float) -> float | None:
    """Seconds from handing the request to the engine (`t_submit_mono`, time.monotonic()) to the
    engine core's output of the step that sampled its first token (vLLM's own timestamp, the same
    monotonic clock): the request's TTFT inside the engine, the step the core was in when the
    request came included, the way to and from the engine not. None when vLLM kept no request
    stats."""
    first = getattr(getattr(out, "metrics", None), "first_token_ts", 0.0)
    return first - t_submit_mono if first >= t_submit_mono else None


class EngineWorker(AsyncProbeHost):
    """Ray actor hosting one AsyncLLM. Create with `ray.remote(EngineWorker).options(...)`.

    As an AsyncProbeHost it can also hold a NIXL probe endpoint, so that links are probed from
    the very node and devices whose engines transfer KV. The endpoint runs in a child process of
    the actor (transfer/probe_child.py), so that UCX never maps into the serving process, and
    each probe call on a thread, so that the event loop is never held by one."""

    probe_in_child = True

    def __init__(self, spec: WorkerSpec):
        from pd_serve.logs import log_to_stderr
        log_to_stderr()
        self.spec = spec
        self.engine = None
        self.info: WorkerInfo | None = None
        self.num_inflight = 0
        self.num_queued_prefill_tokens = 0
        self._stats = None
        self._outbox = Outbox()  # what `submit`ted requests put out, for `outputs`
        self._submitted = Running(self._failure_item)
        self.gc = GcPauses().install()  # every collection in this actor, timed (gc_pauses.py)
        # its event loop watched from start() on (loop_stalls.py)
        self.loop = LoopStalls(dump_after_s=spec.stack_dump_after_s)

    # ---- lifecycle -------------------------------------------------------------------------
    async def start(self) -> WorkerInfo:
        """Configure the connector on this node, then start the engine (tens of seconds on CPU)."""
        import ray

        from transfer.connector_config import connector_settings

        await self.loop.start()
        t0 = time.perf_counter()
        spec = self.spec
        node_ip = ray.util.get_node_ip_address()
        engine_id = f"{spec.worker_id}-{os.getpid()}"
        conn = connector_settings(spec.transfer_backend, spec.device, engine_id, node_ip,
                                  spec.abort_timeout_s, spec.single_node)
        os.environ.update(conn.env)
        if spec.device == "cpu":
            os.environ["VLLM_CPU_KVCACHE_SPACE"] = str(max(1, round(spec.engine.kv_cache_gib)))
            if spec.cpu_core is not None:
                os.environ["VLLM_CPU_OMP_THREADS_BIND"] = str(spec.cpu_core)
        # vLLM's INFO stat logger would print every step once iteration details are on.
        logging.getLogger("vllm.v1.metrics.loggers").setLevel(logging.WARNING)

        from vllm.v1.engine.async_llm import AsyncLLM

        from pd_serve.engine_stats import EngineStatsCollector, stat_logger_factory

        self._stats = EngineStatsCollector()
        args = _engine_args(spec, conn.kv_transfer_config)
        self.engine = AsyncLLM.from_engine_args(args, stat_loggers=[stat_logger_factory(self._stats)])
        cfg = self.engine.vllm_config
        hf = cfg.model_config.hf_config.to_dict()
        self.info = WorkerInfo(
            worker_id=spec.worker_id, role=spec.role, engine_id=engine_id, node_ip=node_ip,
            side_channel_port=conn.side_channel_port,
            vocab_size=cfg.model_config.get_vocab_size(),
            max_model_len=cfg.model_config.max_model_len,
            block_size=cfg.cache_config.block_size, max_num_seqs=cfg.scheduler_config.max_num_seqs,
            hf_config=hf, kv_dtype=str(cfg.model_config.dtype).replace("torch.", ""),
            start_s=time.perf_counter() - t0, pid=os.getpid(), niceness=os.getpriority(os.PRIO_PROCESS, 0))
        if self.info.niceness > 0:
            logger.warning("worker %s runs at nice %d: any process at nice 0 on its cores takes "
                           "precedence over its engine (start the cluster with "
                           "RAY_worker_niceness=0)", spec.worker_id, self.info.niceness)
        await self._warm_up()
        logger.info("worker %s (%s) started in %.1fs", spec.worker_id, spec.role, self.info.start_s)
        return self.info

    async def _warm_up(self) -> None:
        """Run one full-budget prefill so the first real request does not pay for first-use
        allocations and kernel selection; then drop it from the prefix cache."""
        e = self.spec.engine
        n = max(1, min(e.max_num_batched_tokens, e.max_model_len - 2, 4096))
        vocab = self.info.vocab_size
        ids = random_prompt(n, f"warmup/{self.spec.worker_id}", vocab)
        async for _ in self.generate(f"warmup-{self.spec.worker_id}", ids, {"max_tokens": 2}):
            pass
        await self.engine.reset_prefix_cache()

    async def gc_pauses(self) -> dict:
        """This actor's garbage-collection pauses since it started (gc_pauses.py)."""
        return self.gc.summary()

    async def loop_stalls(self) -> dict:
        """This actor's event-loop stalls since start() (loop_stalls.py)."""
        return self.loop.summary()

    async def shutdown(self) -> None:
        """Stop the engine and its processes (the actor itself is then killed by the caller)."""
        if self.engine is not None:
            self.engine.shutdown()
            self.engine = None

    # ---- requests --------------------------------------------------------------------------
    async def generate(self, request_id: str, prompt_token_ids: list[int], params: dict,
                       kv_transfer_params: dict | None = None) -> AsyncIterator[dict]:
        """Stream one request: a dict per engine output with the new tokens and their time.

        `params`: max_tokens, temperature, ignore_eos, seed, top_p. `kv_transfer_params` makes it
        the prefill half (do_remote_decode) or the decode half (from the prefill's output).
        """
        from vllm import SamplingParams
        from vllm.sampling_params import RequestOutputKind

        assert self.engine is not None, "worker not started"
        sp = SamplingParams(
            max_tokens=int(params["max_tokens"]),
            temperature=float(params.get("temperature", 0.0)),
            top_p=float(params.get("top_p", 1.0)),
            ignore_eos=bool(params.get("ignore_eos", False)),
            seed=params.get("seed"),
            output_kind=RequestOutputKind.DELTA,
            extra_args={"kv_transfer_params": kv_transfer_params} if kv_transfer_params else None,
        )
        is_remote_decode = bool(kv_transfer_params and kv_transfer_params.get("do_remote_prefill"))
        is_local_prefill = not is_remote_decode
        t_submit = time.time()
        t_submit_mono = time.monotonic()
        self.num_inflight += 1
        if is_local_prefill:
            self.num_queued_prefill_tokens += len(prompt_token_ids)
        first = True
        try:
            async for out in self.engine.generate({"prompt_token_ids": prompt_token_ids}, sp,
                                                  request_id):
                comp = out.outputs[0]
                item = {"token_ids": list(comp.token_ids), "t": time.time(),
                        "finished": out.finished, "finish_reason": comp.finish_reason}
                if first:
                    first = False
                    if is_local_prefill:
                        self.num_queued_prefill_tokens -= len(prompt_token_ids)
                    item["t_start"] = t_submit  # when this call began here (the router's LATE_START_S)
                    item["num_cached_tokens"] = out.num_cached_tokens or 0
                    item["engine_ttft_s"] = _engine_ttft_s(out, t_submit_mono)
                    if is_remote_decode:  # one READ per remote TP rank
                        ranks = int(kv_transfer_params.get("tp_size") or 1)
                        item["transfers"] = [vars(r) for r in self._stats.claim_transfers(t_submit, ranks)]
                if out.finished:
                    item["kv_transfer_params"] = out.kv_transfer_params
                yield item
        finally:
            self.num_inflight -= 1
            if first and is_local_prefill:
                self.num_queued_prefill_tokens -= len(prompt_token_ids)

    async def submit(self, request_id: str, prompt_token_ids: list[int], params: dict,
                     kv_transfer_params: dict | None = None) -> None:
        """Start one request as `generate` would; its outputs go out on `outputs` as
        (request_id, item), and a failure as an item {"error": ...}."""
        if request_id in self._submitted:
            raise ValueError(f"request {request_id} is already running on {self.spec.worker_id}")
        self._submitted.start(request_id, self.generate(request_id, prompt_token_ids, params, kv_transfer_params),
                              self._outbox)

    def _failure_item(self, request_id: str, err: Exception) -> dict:
        """A submitted request's failure, as its last item: its text (vLLM's errors need not pickle)."""
        logger.warning("request %s failed on %s: %s", request_id, self.spec.worker_id, err)
        return {"error": f"{type(err).__name__}: {err}"}

    async def outputs(self) -> AsyncIterator[list[tuple[str, dict]]]:
        """Every submitted request's outputs, a list per batch (output_streams.py); forever. A
        new call takes over from the previous one."""
        async for batch in self._outbox.batches():
            yield batch

    async def abort(self, request_id: str) -> None:
        """Stop a request: a submitted one's task (vLLM aborts what the task was waiting for),
        else the engine's request of that id."""
        if not self._submitted.cancel(request_id) and self.engine is not None:
            await self.engine.abort(request_id)

    async def num_submitted(self) -> int:
        """Requests started with `submit` and not yet finished (none after a batch: nothing leaked)."""
        return len(self._submitted)

    async def outputs_sent(self) -> dict[str, int]:
        """Outputs sent on `outputs` so far, and in how many batches (Ray stream items)."""
        return {"items": self._outbox.num_items, "batches": self._outbox.num_batches}

    async def calibrate(self, salt: int = 0) -> dict[str, list]:
        """Run the calibration probes on this engine: StepSample dicts and step gaps (see
        calibration.py)."""
        from pd_serve.calibration import run_calibration_probes

        async def run(rid: str, ids: list[int], max_tokens: int, first: asyncio.Event | None) -> None:
            params = {"max_tokens": max_tokens, "ignore_eos": True}
            async for _ in self.generate(rid, ids, params):
                if first is not None:
                    first.set()

        result = await run_calibration_probes(run, self._stats.recent_steps, self.info.vocab_size,
                                              self.info.max_model_len, salt)
        await self.engine.reset_prefix_cache()
        return result

    async def step_once(self, salt: int = 0) -> tuple[float, float]:
        """Run a four-token, one-output request here: one short step. Returns its wall-clock
        (start, end). `bench.host_cpu` steps an engine with it to keep vLLM's processes in
        their busy-poll window after a step (bench.simulator.host, the spin form) at next to
        no compute."""
        ids = random_prompt(4, f"step-once/{self.spec.worker_id}/{salt}", self.info.vocab_size)
        t0 = time.time()
        async for _ in self.generate(f"step-once-{self.spec.worker_id}-{salt}-{time.monotonic_ns()}", ids,
                                     {"max_tokens": 1}):
            pass
        return t0, time.time()

    # ---- observation -----------------------------------------------------------------------
    async def health(self) -> bool:
        if self.engine is None:
            return False
        await self.engine.check_health()
        return True

    async def load(self) -> dict:
        """Running and waiting requests, KV usage (engine's view) and in-flight count (ours)."""
        snap = self._stats.snapshot() if self._stats else {}
        snap.update(worker_id=self.spec.worker_id, role=self.spec.role,
                    num_inflight=self.num_inflight,
                    num_queued_prefill_tokens=self.num_queued_prefill_tokens)
        return snap

    async def nixl_peers(self) -> list[str]:
        """The engine ids this engine has done a NIXL handshake with (nixl_peers.py), sorted."""
        ranks = await self.engine.collective_rpc("nixl_peer_engines")
        return sorted({eid for peers in ranks for eid in peers})

    async def steps(self, since_t: float = 0.0) -> list[dict]:
        """Per-step timings from the engine (token counts and elapsed seconds)."""
        return self._stats.recent_steps(since_t) if self._stats else []

    async def transfers(self, since_t: float = 0.0) -> list[dict]:
        """KV transfers this engine loaded, as NIXL's telemetry measured them (engine_stats.py)."""
        return self._stats.recent_transfers(since_t) if self._stats else []

    async def reset_prefix_cache(self) -> bool:
        return await self.engine.reset_prefix_cache()

    def child_pids(self) -> list[int]:
        """The engine's processes (EngineCore and its workers), for reaping after a hard kill."""
        import psutil
        return [p.pid for p in psutil.Process().children(recursive=True)]

    def shm_segments(self) -> list[str]:
        """The /dev/shm segments this actor (vLLM's front-end runs here) and its engine's
        processes have mapped, for removal after a hard kill (shm_leftovers.py)."""
        import os

        from pd_serve.shm_leftovers import mapped_segments
        return mapped_segments([os.getpid(), *self.child_pids()])

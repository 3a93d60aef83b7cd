"""`deploy(config)`: start workers and the router on Ray, warm every P->D handshake, hand back
a Deployment that generates, streams and shuts everything down again.

The builder reads: validate the config -> resolve model and device -> start worker actors
(all engines start in parallel) -> start the router -> warm handshakes -> ready.
"""
from __future__ import annotations

import logging
import os
import threading
import time
import uuid
from dataclasses import dataclass, field, replace
from typing import Any, Callable, Iterator, Sequence

from pd_serve.caller_streams import CallerStreams
from pd_serve.config import DeploymentConfig, as_config
from pd_serve.link_probe import probe_links, transfer_pairs
from pd_serve.frontend.settings import FrontendAddresses, FrontendSettings, ModelInfo  # [frontdoors]
from pd_serve.request import GenerateResult, InvalidRequestError, make_request
from pd_serve.shm_leftovers import unlink_leftovers
from pd_serve.worker import EngineWorker, WorkerInfo, WorkerSpec

logger = logging.getLogger(__name__)

NAMESPACE = "pd_serve"
WORKER_SHUTDOWN_TIMEOUT_S = 30
_STREAMS_LOCK = threading.Lock()  # one CallerStreams per Deployment, whichever thread asks first


def resolve_model(model: str) -> str:
    if model == "default":
        from pd_serve.default_model import ensure_default_model
        return ensure_default_model()
    return os.path.expanduser(model) if os.path.exists(os.path.expanduser(model)) else model


def init_ray(address: str | None = None, namespace: str = NAMESPACE) -> bool:
    """Connect to `address` (or RAY_ADDRESS), else start a local cluster. True if we started it."""
    import ray

    if ray.is_initialized():
        return False
    os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")  # listeners on loopback
    address = address or os.environ.get("RAY_ADDRESS")
    started = not address
    # "local", not None: with no address Ray attaches to the cluster named in
    # /tmp/ray/ray_current_cluster, and when that cluster died without `ray stop` (a killed
    # session) ray.init() waits for its GCS forever. We mean "start one of our own".
    # A cluster we start runs its workers at normal priority. Ray's default renices every worker
    # process to 15 (`worker_niceness`), and the engines' processes inherit it: against a
    # process at nice 0 (Ray's own daemons, the driver, a benchmark client) CFS then gives them
    # 36/1024 of a shared core. Beside a nice-0 process burning 0.3 s of a core every 2 s, the
    # short prompts' longest TTFT was 0.62-0.83 s at nice 15 and 0.26-0.47 s at nice 0 on this
    # 2-core host (docs/MEASUREMENTS.md, "Found since"). A GPU node has cores to spare; a CPU node serves on
    # the very cores it shares. An attached cluster keeps its own setting
    # (`RAY_worker_niceness=0 ray start ...`); each worker reports its niceness (WorkerInfo).
    system_config = {"worker_niceness": 0} if started else None
    ray.init(address=address or "local", namespace=namespace, include_dashboard=False,
             log_to_driver=os.environ.get("PD_SERVE_RAY_LOGS", "0") == "1",
             ignore_reinit_error=True, _system_config=system_config)
    return started


@dataclass
class Deployment:
    """A running deployment: handles to the router and workers, and what it took to start."""

    config: DeploymentConfig
    router: Any
    workers: dict[str, Any]
    infos: dict[str, WorkerInfo]
    start_s: float
    handshake_s: dict[str, float]
    owns_ray: bool
    child_pids: list[int] = field(default_factory=list)
    # The engines' shared-memory segments seen at start-up (pd_serve/shm_leftovers.py).
    shm_segments: list[str] = field(default_factory=list)
    max_model_len: int = 0
    vocab_size: int = 0
    calibration: Any = None  # pd_serve.calibration.Calibration when scheduler.calibrate is on
    link_probes: list = field(default_factory=list)  # transfer.probe_records.PairProbeResult per pair
    links_at_start: dict = field(default_factory=dict)  # the router's link models once deploy() returns
    # Seconds of each start-up phase in order ("model", "ray", "engines", "calibration", "router",
    # "link probe", "handshakes"): where a slow start went.
    start_phases: dict[str, float] = field(default_factory=dict)
    frontend: Any = None  # [frontdoors] the actor serving gRPC/HTTP, None when no server runs
    addresses: FrontendAddresses | None = None  # [frontdoors] where those servers listen
    _closed: bool = False
    _streams: CallerStreams | None = None  # made by the first request (_caller_streams)

    def phases_text(self) -> str:
        """'model 0.0s, ray 2.0s, engines 19.8s, ...': the start-up phases' seconds."""
        return ", ".join(f"{name} {s:.1f}s" for name, s in self.start_phases.items())

    # ---- requests --------------------------------------------------------------------------
    def stream(self, prompt: str | None = None, prompt_token_ids: Sequence[int] | None = None,
               max_tokens: int = 16, temperature: float = 0.0, ignore_eos: bool = False,
               route: str = "auto", **kw: Any) -> Iterator[dict]:
        """Yield `{"type": "token", "token_ids": [...], "t": ...}` as tokens come, then one
        `{"type": "result", "result": GenerateResult}`."""
        import ray

        req = make_request(prompt, prompt_token_ids, max_tokens, temperature, ignore_eos, route, **kw)
        if not req.request_id:
            req = replace(req, request_id=uuid.uuid4().hex)
        items = self._caller_streams().stream(req, self.config.router.request_timeout_s)
        while True:
            try:
                item = next(items, None)
            except ray.exceptions.RayTaskError as err:
                # Bad input is the caller's error: raise it as itself, not wrapped in Ray's trace.
                if isinstance(err.cause, InvalidRequestError):
                    raise err.cause from None
                raise
            if item is None:
                return
            if item["type"] == "result":
                item = {"type": "result", "result": GenerateResult(**item["result"])}
            yield item

    def _caller_streams(self) -> CallerStreams:
        """This process's end of the router's stream for it (caller_streams.py), made once."""
        with _STREAMS_LOCK:
            if self._streams is None:
                self._streams = CallerStreams(self.router)
            return self._streams

    def generate(self, prompt: str | None = None, prompt_token_ids: Sequence[int] | None = None,
                 max_tokens: int = 16, temperature: float = 0.0, ignore_eos: bool = False,
                 route: str = "auto", **kw: Any) -> GenerateResult:
        """Run one request to completion and return its GenerateResult."""
        result = None
        for item in self.stream(prompt, prompt_token_ids, max_tokens, temperature, ignore_eos,
                                route, **kw):
            if item["type"] == "result":
                result = item["result"]
        assert result is not None, "router ended the stream without a result"
        return result

    def status(self) -> dict:
        import ray
        return ray.get(self.router.status.remote())

    def metrics_text(self) -> str:  # [frontdoors]
        """The deployment's Prometheus metrics (what the HTTP server's /metrics serves)."""
        import ray
        return ray.get(self.router.metrics_text.remote())

    def worker_loads(self) -> dict[str, dict]:
        """Each live worker's load as its engine reports it."""
        import ray
        out = {}
        for wid, w in self.workers.items():
            try:
                out[wid] = ray.get(w.load.remote(), timeout=10)
            except Exception as err:  # a dead worker has no load; say so rather than hide it
                out[wid] = {"error": type(err).__name__}
        return out

    # ---- teardown ----------------------------------------------------------------------------
    def shutdown(self) -> None:
        """Stop the router, every engine and its processes, and Ray if deploy() started it."""
        import ray

        if self._closed:
            return
        self._closed = True
        if self._streams is not None:
            self._streams.close()
        if self.frontend is not None:  # [frontdoors] stop taking requests first
            from pd_serve.frontend.actor import stop_frontend
            stop_frontend(self.frontend)
        try:
            ray.kill(self.router)
        except Exception:
            pass
        _stop_workers(self.workers, self.child_pids, self.shm_segments)
        if self.owns_ray:
            ray.shutdown()

    def __enter__(self) -> "Deployment":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.shutdown()


def _stop_workers(workers: dict[str, Any], child_pids: Sequence[int] = (),
                  shm_segments: Sequence[str] = ()) -> None:
    """Stop each worker's engine, kill the actors, reap the engine processes left and unlink the
    shared memory they mapped. Killed processes do not unlink theirs (pd_serve/shm_leftovers.py),
    so a deploy that fails after its engines started needs this as much as shutdown does:
    a failed detached deploy left four segments, 830 MB, in a clean clone's tests (2026-12-02).
    What a worker that is already dead cannot say (its pids, its segments) is what the caller
    saw of it earlier, passed in."""
    import ray

    pids = set(child_pids) | {pid for found in _ask_live(workers, "child_pids", 10.0) for pid in found}
    segments = set(shm_segments) | set(_engine_shm_segments(workers))
    refs = {wid: w.shutdown.remote() for wid, w in workers.items()}
    ready, _ = ray.wait(list(refs.values()), num_returns=len(refs), timeout=WORKER_SHUTDOWN_TIMEOUT_S)
    for wid, ref in refs.items():
        if ref not in ready:
            logger.info("worker %s did not shut down within %d s", wid, WORKER_SHUTDOWN_TIMEOUT_S)
            continue
        try:
            ray.get(ref)
        except Exception as err:
            logger.info("worker %s did not shut down cleanly: %s", wid, type(err).__name__)
    for w in workers.values():
        try:
            ray.kill(w, no_restart=True)
        except Exception:
            pass
    _reap(sorted(pids))
    unlink_leftovers(segments)  # every engine process is gone now


def _reap(pids: list[int], timeout_s: float = 10.0) -> None:
    """Engine processes whose actor was killed before it could stop them: terminate, then kill."""
    import psutil

    procs = []
    for pid in pids:
        try:
            procs.append(psutil.Process(pid))
        except psutil.NoSuchProcess:
            pass
    for p in procs:
        try:
            p.terminate()
        except psutil.NoSuchProcess:
            pass
    _, alive = psutil.wait_procs(procs, timeout=timeout_s)
    for p in alive:
        try:
            p.kill()
        except psutil.NoSuchProcess:
            pass


def _worker_specs(config: DeploymentConfig, model: str, tokenizer: str | None, device: str,
                  single_node: bool, num_cores: int) -> list[WorkerSpec]:
    specs = []
    order = [r for r in ("prefill", "decode", "both") if r in config.workers]
    for role in order:
        rc = config.workers[role]
        for i in range(rc.count):
            core = len(specs) % num_cores if device == "cpu" and single_node else None
            specs.append(WorkerSpec(
                worker_id=f"{role}-{i}", role=role, model=model, tokenizer=tokenizer,
                engine=rc.engine, device=device, transfer_backend=config.transfer.backend,
                abort_timeout_s=config.transfer.abort_timeout_s, single_node=single_node,
                cpu_core=core, stack_dump_after_s=config.diagnostics.stack_dump_after_s))
    return specs


def _actor_options(config: DeploymentConfig, spec: WorkerSpec, name_prefix: str | None) -> dict:
    res = config.workers[spec.role].resources
    opts: dict[str, Any] = {"num_cpus": res.num_cpus, "num_gpus": res.num_gpus,
                            "max_concurrency": 1000}
    if res.memory_gib:
        opts["memory"] = int(res.memory_gib * 2**30)
    if name_prefix:
        opts.update(name=f"{name_prefix}:{spec.worker_id}", lifetime="detached")
    tp = spec.engine.tensor_parallel_size
    if tp > 1:  # vLLM's Ray executor places its TP ranks in the placement group it runs in
        from ray.util.placement_group import placement_group
        from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

        pg = placement_group([{"GPU": 1, "CPU": 1}] * tp, strategy="STRICT_PACK")
        opts.update(num_gpus=0, scheduling_strategy=PlacementGroupSchedulingStrategy(
            pg, placement_group_capture_child_tasks=True))
    return opts


def deploy(config: "DeploymentConfig | dict | str", address: str | None = None,
           detached_name: str | None = None, *, grpc_port: int | None = None,
           http_port: int | None = None, host: str = "127.0.0.1",
           token: str | None = None) -> Deployment:
    """Start a deployment from a config (path, dict or DeploymentConfig) and wait until ready.

    `detached_name`: name the actors `<name>:<worker>` in namespace `pd_serve` and let them
    outlive this process (for `pd-serve up --detach` under Ray job submission).
    `grpc_port` / `http_port`: serve the gRPC API / OpenAI-compatible HTTP there (None: no such
    server; 0: any free port), on `host`; `token`: require `authorization: Bearer <token>`.
    Where they listen is in `Deployment.addresses`.
    """
    frontend_settings = FrontendSettings(host=host, grpc_port=grpc_port, http_port=http_port,
                                         token=token)  # [frontdoors] checked before anything starts
    import ray

    from transfer.connector_config import resolve_backend

    t0 = time.perf_counter()
    phases: dict[str, float] = {}
    phase_start = t0

    def phase_done(name: str) -> None:
        nonlocal phase_start
        now = time.perf_counter()
        phases[name], phase_start = now - phase_start, now

    cfg = as_config(config)
    device = cfg.resolved_device
    resolve_backend(cfg.transfer.backend, device)  # a backend that cannot run fails before any actor
    model = resolve_model(cfg.model)
    phase_done("model")  # the default model is generated here on a machine's first run
    owns_ray = init_ray(address)
    phase_done("ray")
    workers: dict[str, Any] = {}
    child_pids: list[int] = []
    try:
        single_node = len([n for n in ray.nodes() if n.get("Alive")]) == 1
        num_cores = max(1, int(ray.cluster_resources().get("CPU", os.cpu_count() or 1)))
        specs = _worker_specs(cfg, model, cfg.tokenizer, device, single_node, num_cores)
        actor_cls = ray.remote(EngineWorker)
        spec_of = {s.worker_id: s for s in specs}

        def new_worker(wid: str) -> Any:
            return actor_cls.options(**_actor_options(cfg, spec_of[wid], detached_name)).remote(spec_of[wid])

        workers.update({wid: new_worker(wid) for wid in spec_of})
        infos = _start_engines(workers, new_worker, cfg.resolved_engine_start_timeout_s)
        child_pids = _engine_child_pids(workers)
        phase_done("engines")
        calibration = calibrate_engines(workers, infos) if cfg.scheduler.calibrate else None
        phase_done("calibration")
        from pd_serve.router import Router

        router_opts: dict[str, Any] = {"num_cpus": cfg.router.num_cpus, "max_concurrency": 10000}
        if detached_name:
            router_opts.update(name=f"{detached_name}:router", lifetime="detached")
        router = ray.remote(Router).options(**router_opts).remote(
            cfg, workers, infos, cfg.tokenizer or model, calibration.model if calibration else None)
        ready = ray.get(router.ready.remote())
        phase_done("router")
        probe_results = []
        if cfg.transfer.probe_at_start and transfer_pairs(infos):
            from transfer.probe_report import probe_json
            probe_results = probe_links(workers, infos, device, cfg.transfer.probe_max_seconds)
            ray.get(router.seed_links.remote(probe_json(probe_results)))
        phase_done("link probe")
        handshake_s = ray.get(router.warm_handshakes.remote()) if cfg.transfer.handshake_warmup else {}
        links_at_start = ray.get(router.link_models.remote())
        # The engines' shared memory is all made by now (the handshakes' transfers included);
        # reading it off /proc takes tens of ms, counted with the handshakes so the phases add up.
        shm_segments = _engine_shm_segments(workers)
        phase_done("handshakes")
    except BaseException:
        # Nothing of a deployment that did not start is kept: not its actors on a cluster that
        # lives on, nor its engines' processes or shared memory on either kind of cluster.
        try:
            _stop_workers(workers, child_pids)
        finally:
            if owns_ray:
                ray.shutdown()
        raise
    dep = Deployment(cfg, router, workers, infos, time.perf_counter() - t0, handshake_s, owns_ray,
                     child_pids, shm_segments, ready["max_model_len"], ready["vocab_size"], calibration,
                     probe_results, links_at_start, phases)
    if frontend_settings.is_enabled:  # [frontdoors]
        _start_frontend(dep, model, frontend_settings, detached_name)
    logger.info("deployment %s ready in %.1fs (%d workers; %s)", cfg.name, dep.start_s, len(workers),
                dep.phases_text())
    return dep


def _start_frontend(dep: Deployment, model: str, settings: FrontendSettings,
                    detached_name: str | None) -> None:  # [frontdoors]
    """Start the gRPC/HTTP servers in their actor; if they cannot start, take the deployment down."""
    from pd_serve.frontend.actor import start_frontend

    cfg = dep.config
    info = ModelInfo(id=os.path.basename(model.rstrip("/")) if cfg.model == "default" else cfg.model,
                     root=model, tokenizer=cfg.tokenizer or model, max_model_len=dep.max_model_len,
                     vocab_size=dep.vocab_size)
    try:
        dep.frontend, dep.addresses = start_frontend(
            dep.router, info, settings, name=f"{detached_name}:frontend" if detached_name else None)
    except BaseException:
        dep.shutdown()
        raise
    logger.info("deployment %s serving gRPC at %s, HTTP at %s", cfg.name, dep.addresses.grpc,
                dep.addresses.http)


def calibrate_engines(workers: dict[str, Any], infos: dict[str, WorkerInfo], one_at_a_time: bool = False):
    """Probe the engines and fit one step-time model to all their steps.

    The router's model (deploy) probes all engines at once. On a CPU host the engines then share
    the socket's caches and memory bandwidth, so each step is measured under a neighbour's load,
    as serving at once on both engines sees it; the router has no other account of that load.
    `one_at_a_time` gives each engine's steps alone, for a model that adds the host's load
    itself (the simulator's, `bench.sim_fidelity`). On 2026-12-01, with two engines on two
    cores: probed together, long prompts served alone came out 23-29% faster than predicted, and
    6-14% probed one at a time (2,048-token chunks: 168-175 ms against 150-160 ms). For the
    router's predictions on its concurrent mixed workload (`bench.prediction_accuracy`, 20
    requests, 2 at a time) the evidence does not decide: median errors 0.16-0.40 (six runs,
    median 0.31) with the probes together, 0.33-0.38 (three runs) one at a time. The router
    keeps the probes together, as it had them before 2026-12-01.
    """
    import ray

    from pd_serve.calibration import fit_step_model
    from transfer.kv_geometry import KVGeometry

    t0 = time.perf_counter()
    if one_at_a_time:
        per_worker = [ray.get(w.calibrate.remote(i)) for i, w in enumerate(workers.values())]
    else:
        per_worker = ray.get([w.calibrate.remote(i) for i, w in enumerate(workers.values())])
    info = next(iter(infos.values()))
    kv = KVGeometry.from_hf_config(info.hf_config, info.block_size, info.kv_dtype)
    cal = fit_step_model(info.hf_config, kv, [s for r in per_worker for s in r["samples"]],
                         time.perf_counter() - t0, [g for r in per_worker for g in r["step_gaps_s"]],
                         one_at_a_time)
    logger.info("step-time model calibrated on %d engine steps in %.1fs: %s", cal.num_samples,
                cal.seconds, cal.summary())
    return cal


class EngineStartTimeout(RuntimeError):
    """A worker's engine did not start in time, twice."""


def _start_engines(workers: dict[str, Any], new_worker: Callable[[str], Any],
                   timeout_s: float) -> dict[str, WorkerInfo]:
    """Start every worker's engine at once and return their infos. A worker not started within
    `timeout_s` is killed and started afresh once: vLLM waits without a timeout for its NIXL
    handshake listener, which dies if its port was taken meanwhile (seen in a clean clone's tests,
    2026-12-02), and a fresh worker draws a fresh port. Replaced workers are swapped in `workers`
    in place, so that the caller's clean-up finds them. A second miss raises EngineStartTimeout."""
    import ray

    infos: dict[str, WorkerInfo] = {}
    todo, retried = list(workers), False
    while True:
        refs = {wid: workers[wid].start.remote() for wid in todo}
        _, pending = ray.wait(list(refs.values()), num_returns=len(refs), timeout=timeout_s)
        late = sorted(wid for wid, ref in refs.items() if ref in pending)
        infos.update(zip([w for w in todo if w not in late],
                         ray.get([refs[w] for w in todo if w not in late])))
        if not late:
            return {wid: infos[wid] for wid in workers}
        msg = (f"worker(s) {', '.join(late)} did not start their engines within {timeout_s:.0f} s "
               f"(engine_start_timeout_s); their logs are in the Ray session's logs folder")
        if retried:
            raise EngineStartTimeout(msg)
        logger.warning("%s; starting them afresh", msg)
        for wid in late:  # Ray ends a killed actor's child processes (the engine core) with it
            ray.kill(workers[wid], no_restart=True)
            workers[wid] = new_worker(wid)
        todo, retried = late, True


def _engine_child_pids(workers: dict[str, Any]) -> list[int]:
    import ray
    return [pid for pids in ray.get([w.child_pids.remote() for w in workers.values()]) for pid in pids]


def _engine_shm_segments(workers: dict[str, Any], timeout_s: float = 10.0) -> list[str]:
    """The shared-memory segments the live workers' engines have mapped (dead workers: none)."""
    return [path for paths in _ask_live(workers, "shm_segments", timeout_s) for path in paths]


def _ask_live(workers: dict[str, Any], method: str, timeout_s: float) -> list[Any]:
    """Each worker's answer to `method`, asked of all at once; a dead worker, or one that does
    not answer within `timeout_s` (an engine start blocks its actor's loop), gives none."""
    import ray
    refs = [getattr(w, method).remote() for w in workers.values()]
    ready, _ = ray.wait(refs, num_returns=len(refs), timeout=timeout_s)
    answers = []
    for ref in ready:
        try:
            answers.append(ray.get(ref))
        except Exception:  # a dead worker: what the caller saw of it earlier stands
            pass
    return answers

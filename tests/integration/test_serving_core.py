"""The serving core end to end on CPU: a hybrid deployment (one prefill worker, one decode worker
that can also prefill) with real vLLM engines in Ray actors and real NIXL KV transfer.

One deployment serves the whole module (engines take ~30 s to start); the tests run in file order
and the last ones kill the prefill worker and shut everything down.
"""
from __future__ import annotations

import os
import signal
import statistics
import threading
import time
from collections import Counter
from pathlib import Path

import psutil
import pytest
import ray

from bench.compare import write_engine_steps
from bench.decode_growth import MIN_GAPS, measure_decode_growth
from bench.engine_stalls import STEPS_FILE, saved_steps
from bench.speed_scaled import run_window
from bench.host_cpu import BATCH_STREAMS_PER_ENGINE, EXCESS_REPEATS, measure_path_cpu
from bench.host_load import STREAMS_PER_ENGINE, measure_load_stretch
from bench.length_stretch import measure_length_stretch
from bench.metrics import SloSpec
from bench.metrics import num_within_slos
from bench.paired import ROUTES, paired_rows, run_pairs
from bench.prediction_accuracy import median_rel_error, run_mixed_workload
from bench.prefill_beside import ProbeRoutes, measure_prefill_beside, probe_routes
from pd_serve import InvalidRequestError, deploy
from pd_serve.request_path import measure_request_path
from pd_serve.router import WARMUP_TRANSFER_BLOCKS
from schedulers.candidates import DECODE_ROLES, decode_engines
from transfer.kv_geometry import KVGeometry
from transfer.link_model import OnlineLinkModel, engine_excess

from .conftest import BAD_INPUTS, LEFT_MAX_TOKENS, distinct_prompt, wait_until_nothing_left

pytestmark = pytest.mark.integration

HANDSHAKE_PROMPT_TOKENS = 1000


@pytest.fixture(scope="module")
def hybrid():
    semaphores_before = set(Path("/dev/shm").glob("sem.mp-*"))
    dep = deploy("configs/hybrid.yaml")
    dep.semaphores_before = semaphores_before
    # The very first request after deploy() returns, before anything else touches the
    # deployment, then three more of the same length; and the NIXL peers the decode engine had
    # handshaken with before and after them.
    peers_before = ray.get(dep.workers["both-0"].nixl_peers.remote())
    first = dep.generate(prompt_token_ids=distinct_prompt(HANDSHAKE_PROMPT_TOKENS, 1000),
                         max_tokens=2, route="disaggregated")
    steady = [dep.generate(prompt_token_ids=distinct_prompt(HANDSHAKE_PROMPT_TOKENS, 1001 + i),
                           max_tokens=2, route="disaggregated") for i in range(3)]
    peers_after = ray.get(dep.workers["both-0"].nixl_peers.remote())
    dep.startup_probe = (first, steady, peers_before, peers_after)
    yield dep
    dep.shutdown()


def _geometry(dep, worker_id: str) -> KVGeometry:
    info = dep.infos[worker_id]
    return KVGeometry.from_hf_config(info.hf_config, info.block_size, info.kv_dtype)


def test_the_start_up_says_where_its_time_went(hybrid):
    """deploy() times each phase, so that a slow start names the phase that was slow."""
    phases = hybrid.start_phases
    assert list(phases) == ["model", "ray", "engines", "calibration", "router", "link probe", "handshakes"]
    assert all(s >= 0 for s in phases.values()) and phases["engines"] > 1, phases
    assert sum(phases.values()) == pytest.approx(hybrid.start_s, abs=0.05), (phases, hybrid.start_s)
    assert hybrid.phases_text().startswith("model ") and "link probe" in hybrid.phases_text()


def test_the_link_probe_left_no_ucx_in_the_serving_processes(hybrid):
    """The start-up probe ran (its fits are there) in child processes of the workers: UCX (its
    memory hooks included) and NIXL's UCX backend are not mapped into the worker actors, which
    serve (transfer/probe_child.py). vLLM's front-end maps NIXL's core library itself."""
    assert hybrid.link_probes and all(p.is_verified for p in hybrid.link_probes)
    for wid, info in hybrid.infos.items():
        with open(f"/proc/{info.pid}/maps") as maps:
            loaded = {line.split()[-1] for line in maps if "libuc" in line or "plugin_UCX" in line}
        assert not loaded, (wid, sorted(loaded))


def test_first_disaggregated_request_pays_no_handshake(hybrid):
    """deploy()'s warm-up (`Router.warm_handshakes`) did the NIXL handshake, so the first user
    request has none to pay: the decode engine had already loaded the prefill engine's agent
    before it, and did no other handshake since. Asked of the engine itself (nixl_peers.py), not
    timed: until stop 59 this test bounded the first request's TTFT at 1.5x the next three's
    median, and a clean clone failed it once in three (1.08 s against 0.15 s) on a host stall,
    which looks the same as a handshake (74-189 ms here, the demo's warm-ups) but bigger."""
    first, steady, before, after = hybrid.startup_probe
    assert first.route == "disaggregated" and first.kv_transfer_bytes > 0
    assert all(r.route == "disaggregated" and r.kv_transfer_bytes > 0 for r in steady)
    assert set(hybrid.handshake_s) == {"prefill-0->both-0"} and hybrid.handshake_s["prefill-0->both-0"] > 0
    prefill = hybrid.infos["prefill-0"].engine_id
    assert before == after == [prefill], (before, after, prefill, "TTFT s: first, then the next three",
                                          first.ttft_s, [r.ttft_s for r in steady])


@pytest.mark.parametrize("num_tokens", [1500, 4000])
def test_start_up_link_model_predicts_real_vllm_transfers(hybrid, num_tokens):
    """The model deploy() ends with (NIXL probe sweep + the engine's excess from the warm-up
    transfers), before any user request refined it, against seven real transfers of each size."""
    start = next(m for m in hybrid.links_at_start["models"]
                 if (m["prefill_id"], m["decode_id"]) == ("prefill-0", "both-0"))
    assert start["engine_overhead_s"] is not None  # the probe ran and the warm-up measured it
    # ... on the real transfers it records, one per warm-up request after the handshake's
    warm = start["warmup_transfers"]
    assert len(warm) == len(WARMUP_TRANSFER_BLOCKS) - 1 and all(b > 0 and t > 0 for b, t in warm)
    probe = next(p.fit for p in hybrid.link_probes if (p.prefill_id, p.decode_id) == ("prefill-0", "both-0"))
    excess = engine_excess(probe, warm)
    assert (start["engine_overhead_s"], start["engine_s_per_byte"]) == pytest.approx(
        (excess.overhead_s, excess.s_per_byte))
    model = OnlineLinkModel.from_dict(start["model"])
    sets = []  # (median predicted / actual, [(actual ms, predicted ms)]) per set of seven transfers
    for attempt in range(3):
        ratios, pairs = [], []
        for k in range(7):
            salt = 9000 + 10 * num_tokens + 100 * attempt + k
            r = hybrid.generate(prompt_token_ids=distinct_prompt(num_tokens, salt), max_tokens=2, route="disaggregated")
            assert r.route == "disaggregated" and r.kv_transfer_bytes > 0 and r.kv_transfer_s
            predicted = model.predict(r.kv_transfer_bytes)
            pairs.append((round(r.kv_transfer_s * 1e3, 2), round(predicted * 1e3, 2)))
            ratios.append(predicted / r.kv_transfer_s)
        sets.append((round(statistics.median(ratios), 3), pairs))
        if 0.4 <= sets[-1][0] <= 2.5:
            break
    # The target is 30%, measured by `python -m bench.transfer_prediction`. Here the test
    # guards the model's shape: the probe alone predicted 0.27-0.36 of the median real time in
    # runs F and G (docs/MEASUREMENTS.md), 0.2-0.35 before. Identical transfers swing 2-4x on these shared
    # 2-core machines: in one deployment on the AVX2-only AMD one, 1,500-token transfers took
    # 3.0-12.9 ms (median 6.5) and 4,000-token ones 11.5-22.4 ms, consecutive or interleaved. The
    # warm-ups the excess comes from swing with them, in either direction. A factor of 2 failed
    # three times, once in CI: at 4,000 tokens with a constant excess (0.48x), then with a line
    # at 4,000 tokens (0.50x, warm-ups up to 8 MiB) and at 1,500 tokens (2.04x: four of five
    # transfers took 3-4.5 ms). Hence seven transfers and a factor of 2.5 either way, which the
    # probe alone would still fail on those runs' figures. On 2026-12-04 a clean clone's seven
    # transfers all ran 4-7x slower than that deployment's warm-ups of the same sizes (43-82 ms at
    # 4,000 tokens against 8 ms predicted), and the test passed run again minutes later: the host
    # slows for stretches of seconds. So up to three sets of seven, one after another; a model of
    # the wrong shape or scale misses on every set.
    assert any(0.4 <= median <= 2.5 for median, _ in sets), (
        "(median ratio, [(actual ms, predicted ms)]) per set", sets, "warm-ups (MiB, ms)", [(round(b / 2**20, 1), round(t * 1e3, 2)) for b, t in warm],
        "excess (ms, ms/MiB)", (round(excess.overhead_s * 1e3, 2), round(excess.s_per_byte * 2**20 * 1e3, 3)))


@pytest.mark.parametrize("num_tokens", [10, 1500, 4000])
def test_disaggregated_returns_the_colocated_tokens(hybrid, num_tokens):
    prompt = distinct_prompt(num_tokens, num_tokens)
    decode = hybrid.workers["both-0"]
    before = ray.get(decode.load.remote())
    dis = hybrid.generate(prompt_token_ids=prompt, max_tokens=12, ignore_eos=True, route="disaggregated")
    after = ray.get(decode.load.remote())
    assert dis.route == "disaggregated" and dis.prefill_worker == "prefill-0"
    assert dis.decode_worker == "both-0" and dis.fallback is None

    # The KV that moved is exactly the prompt's blocks, as the engine's NIXL telemetry counted it.
    geo = _geometry(hybrid, "both-0")
    assert dis.kv_transfer_bytes == geo.bytes_for_tokens(num_tokens) > 0
    assert dis.kv_transfer_s is not None and dis.kv_transfer_s > 0

    # The decode worker loaded the prompt instead of computing it: vLLM's own prompt-token
    # counters by source say so (it recomputes only the last token, to sample from it).
    computed = after["prompt_tokens_computed"] - before["prompt_tokens_computed"]
    external = after["prompt_tokens_external"] - before["prompt_tokens_external"]
    assert external >= num_tokens - 1 and computed <= 1, (computed, external)

    # The same prompt prefilled locally (prefix cache dropped, so it is computed again).
    assert ray.get(decode.reset_prefix_cache.remote())
    col = hybrid.generate(prompt_token_ids=prompt, max_tokens=12, ignore_eos=True, route="colocated")
    assert col.route == "colocated" and col.prefill_worker is None and col.kv_transfer_bytes == 0
    assert len(dis.token_ids) == 12
    assert dis.token_ids == col.token_ids


def test_streaming_yields_tokens_before_the_result(hybrid):
    items = list(hybrid.stream(prompt="stream me", max_tokens=6, ignore_eos=True, route="colocated"))
    tokens = [t for it in items if it["type"] == "token" for t in it["token_ids"]]
    assert items[-1]["type"] == "result" and len(items) >= 3
    assert tokens == items[-1]["result"].token_ids and len(tokens) == 6
    assert items[-1]["result"].text  # detokenized


@pytest.mark.parametrize("kwargs, message", BAD_INPUTS)
def test_bad_input_gets_a_clear_error_and_service_continues(hybrid, kwargs, message):
    with pytest.raises(InvalidRequestError, match=message):
        hybrid.generate(**kwargs)
    ok = hybrid.generate(prompt="still serving?", max_tokens=3, ignore_eos=True)
    assert len(ok.token_ids) == 3


def test_kv_cache_returns_to_zero_after_a_batch(hybrid):
    results, errors = [], []

    def one(i: int) -> None:
        route = ("colocated", "disaggregated", "auto")[i % 3]
        try:
            results.append(hybrid.generate(prompt_token_ids=distinct_prompt(300 + 150 * i, 500 + i),
                                           max_tokens=8, ignore_eos=True, route=route))
        except Exception as err:  # collected: a failure must fail the test, not vanish in a thread
            errors.append(err)

    threads = [threading.Thread(target=one, args=(i,)) for i in range(9)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=300)
    assert not errors and len(results) == 9
    assert {r.route for r in results} == {"colocated", "disaggregated"}
    deadline = time.time() + 30
    while True:
        usage = {w: load["kv_cache_usage"] for w, load in hybrid.worker_loads().items()}
        if all(u == 0.0 for u in usage.values()) or time.time() > deadline:
            break
        time.sleep(0.5)
    assert all(u == 0.0 for u in usage.values()), usage


@pytest.mark.parametrize("route", ["colocated", "disaggregated"])
@pytest.mark.parametrize("how", ["stream closed", "router call cancelled"])
def test_a_request_its_client_leaves_stops_on_its_worker(hybrid, route, how):
    from pd_serve.request import make_request

    prompt = distinct_prompt(400, 900 + len(route) + len(how))
    if how == "stream closed":  # a Deployment caller stops reading (caller_streams.py)
        items = hybrid.stream(prompt_token_ids=prompt, max_tokens=LEFT_MAX_TOKENS, ignore_eos=True, route=route)
        for _ in range(3):
            assert next(items)["type"] == "token"
        items.close()
    else:  # a caller of the router's generate whose call is cancelled
        req = make_request(None, prompt, LEFT_MAX_TOKENS, 0.0, True, route)
        gen = hybrid.router.generate.options(num_returns="streaming").remote(req)
        for _ in range(3):
            assert ray.get(next(gen))["type"] == "token"
        # Ray's default, recursive: it cancels the remote calls made in the call's context too;
        # the router's abort to its worker must not be one of them (output_streams.py).
        ray.cancel(gen)
    after = wait_until_nothing_left(hybrid)
    assert not any(after["left"].values()) and not any(after["kv_usage"].values()), after
    # and the deployment serves on
    assert hybrid.generate(prompt_token_ids=distinct_prompt(100, 950), max_tokens=4, route=route).token_ids


def _router_log_lines(dep) -> list[str]:
    """What the router actor wrote to stderr, from the Ray session's log folder."""
    pid = ray.get(dep.router.__ray_call__.remote(lambda self: os.getpid()))
    logs = Path(ray._private.worker._global_node.get_logs_dir_path())
    return [line for f in logs.glob(f"worker-*-{pid}.err") for line in f.read_text().splitlines()]


def test_adaptive_predictions_track_actual_ttft_and_every_decision_is_logged(hybrid):
    outcomes = run_mixed_workload(hybrid, num_requests=20, concurrency=2, max_tokens=4, salt=77)
    assert len(outcomes) == 20 and all(o.predicted_ttft_s for o in outcomes)
    # The target is 25% (measured 14% by `python -m bench.prediction_accuracy`); this
    # bound leaves room for this shared machine's noise and still fails a model that is off by
    # a constant factor, as the uncalibrated roofline would be (orders of magnitude on a CPU).
    # The noise reached 0.38 once, on a clean clone's CI run (stop 53): the host ran the test's
    # requests up to twice as fast as it had the calibration's probes minutes before.
    error = median_rel_error(outcomes)
    assert error <= 0.45, [(o.num_prompt_tokens, o.route, o.predicted_ttft_s, o.ttft_s) for o in outcomes]
    deadline = time.time() + 10  # Ray copies nothing: the file is the actor's stderr
    while True:
        lines = _router_log_lines(hybrid)
        missing = [o for o in outcomes if not any(f"request {o.request_id}:" in ln for ln in lines)]
        if not missing or time.time() > deadline:
            break
        time.sleep(0.5)
    assert not missing, (len(lines), missing[:2])
    for o in outcomes:
        # One decision line per request; a late start adds a warning line of its own (router.py).
        mine = [ln for ln in lines if f"request {o.request_id}:" in ln and "route=auto ->" in ln]
        assert len(mine) == 1 and f"route=auto -> {o.route}" in mine[0] and "chose" in mine[0], mine


def test_request_path_is_the_ttft_beyond_the_engines_steps_and_the_transfer(hybrid):
    """What `bench.sim_fidelity` gives the simulator: the step gap the calibration measured and
    the time outside the engines per route; a disaggregated request calls two workers."""
    assert hybrid.calibration.step_gap_s > 0
    path = measure_request_path(hybrid, num_requests=3)
    for route in ("colocated", "disaggregated"):
        for s in path.samples[route]:
            assert 0 < s["engine_s"] < s["ttft_s"] and s["path_s"] > 0, (route, s)
    assert all(s["transfer_s"] > 0 for s in path.samples["disaggregated"])
    assert path.disaggregated_s > path.colocated_s, path.samples


def test_the_paths_cpu_is_measured_per_request_and_per_token(hybrid):
    """What the simulator's host model gets (bench.host_cpu): measured, so it can be any size,
    but streaming tokens costs the client, router and front-ends CPU."""
    host = measure_path_cpu(hybrid)
    assert host.num_cores == len(os.sched_getaffinity(0))
    assert host.cpu_s_per_token > 0 and host.cpu_s_per_request >= 0 and host.background_cores >= 0, host
    assert [s["window"] for s in host.samples] == ["idle", "4 tokens", "64 tokens"] + [
        f"excess repeat {k}" for k in range(EXCESS_REPEATS)] + [
        f"{k} streams per engine" for k in BATCH_STREAMS_PER_ENGINE]
    # Each large-batch burst ran its streams together: the excess at that batch was seen.
    assert [n for n, _ in host.step_excess_batch] == list(BATCH_STREAMS_PER_ENGINE), host.samples[-2:]
    assert all(abs(e) < 0.05 for _, e in host.step_excess_batch), host.step_excess_batch
    # The decode steps with one and two streams per engine, and with a lone stream, against the
    # calibration: a few ms either way, never whole steps (the calibrated decode steps of the
    # tiny model take 3-10 ms here).
    for excess in (host.step_excess_1_s, host.step_excess_2_s, host.step_excess_alone_s):
        assert excess is not None and abs(excess) < 0.02, host
    # ... and the lone stream's by the other engine's spin window (bench.neighbour_spin): hybrid's
    # lone streams go colocated, so its prefill-only engine is idle past the window in the quiet
    # sets and inside it in the stepped ones; both classes are seen in every repeat.
    for excess in (host.step_excess_quiet_s, host.step_excess_spin_s):
        assert excess is not None and abs(excess) < 0.02, host
    for s in host.samples[3:3 + EXCESS_REPEATS]:
        assert {"quiet", "spin"} <= set(s["lone_by_neighbour"]), s


def test_a_prefill_beside_streams_is_measured_and_no_stream_is_left_behind(hybrid):
    """What the simulator's load form gets (bench.host_load): the probe's TTFT with nothing else
    running and beside 1, 2 and 4 streams per decode-capable engine; afterwards every background
    stream has ended, on the router and in the engines."""
    # Three probes per count: the factor is their median, so one probe caught in a host stall
    # (this VM's worker processes sleep 1-33 s at times, docs/MEASUREMENTS.md) cannot carry it. With two, one
    # such probe made a factor of 12.8 (the bound is 10).
    # Sent where bench.sim_fidelity sends it on hybrid (the engine that streams), and timed inside
    # that engine by the router's log, so each probe's request path is measured as well.
    router_log = lambda: ray.get(hybrid.router.prediction_errors.remote())  # noqa: E731
    stretch = measure_load_stretch(hybrid, repeats=3, route="colocated", router_log=router_log)
    engines = sum(1 for i in hybrid.infos.values() if i.role in DECODE_ROLES)
    assert [n for n, _ in stretch.points] == [k * engines for k in STREAMS_PER_ENGINE]
    assert sorted(stretch.samples) == [0] + [k * engines for k in STREAMS_PER_ENGINE]
    assert all(len(v) == 3 and min(v) > 0 for v in stretch.samples.values()), stretch.samples
    factors = [f for _, f in stretch.points]
    assert factors == sorted(factors) and all(0 < f < 10 for f in factors), stretch.points
    # Every probe was found in the log: a path at each count, none up, of milliseconds (10-30 here).
    assert [n for n, _ in stretch.path_points] == sorted(stretch.samples), stretch.path_points
    assert all(0 < s < 0.5 for _, s in stretch.path_points), stretch.path_points
    # The probe sent to the prefill-only engine (bench.sim_fidelity measures it there too).
    # Split where each probe's prefill ended, by the engines' own timestamps in the router's log.
    beside = measure_load_stretch(hybrid, repeats=2, streams_per_engine=(1,), route="disaggregated",
                                  salt_base=100, router_log=router_log)
    assert [n for n, _ in beside.points] == [engines] and min(beside.samples[0]) > 0, beside.samples
    # The stream's token gaps inside the probe's prefill and away from it were both timed (about
    # 20 and 40 of them), and what a decode step lost beside the prefill is a few milliseconds.
    inside, outside = beside.gap_counts[engines]
    assert inside > 0 and outside > 0, beside.gap_counts
    assert all(abs(e) < 0.05 for _, e in beside.decode_beside), beside.decode_beside
    # The probes were found in the router's log with both engines' parts, so their hand-over (the
    # way to the decode engine, the KV load, the first step) was timed apart; it lasts a few
    # token gaps, so a handful of gaps at most fall inside.
    _, outside = beside.handover_gap_counts[engines]
    assert outside > 0, beside.handover_gap_counts
    assert all(abs(e) < 0.05 for _, e in beside.decode_handover), beside.decode_handover
    workers = hybrid.status()["workers"]  # the router's counts and each engine's, polled now
    assert all(w["inflight"] == 0 and w["load"]["num_running"] == 0 and w["load"]["num_waiting"] == 0
               for w in workers.values()), workers


def test_a_prefill_beside_streams_is_measured_by_prompt_length_inside_its_engine(hybrid):
    """What bench.length_stretch records: probes of each length alone and beside the streams,
    each timed inside the engine that prefilled it (the prefill-only engine's on route
    disaggregated), a factor per length; afterwards nothing is left running."""
    router_log = lambda: ray.get(hybrid.router.prediction_errors.remote())  # noqa: E731
    engines = sum(1 for i in hybrid.infos.values() if i.role in DECODE_ROLES)
    for k, route in enumerate(("colocated", "disaggregated")):
        probe = measure_length_stretch(hybrid, route, router_log, lengths=(64, 512), repeats=1, salt_base=1000 * k)
        assert probe.streams == engines and [n for n, _ in probe.points] == [64, 512], probe
        assert all(0 < f < 20 for _, f in probe.points), probe.points
        for n in (64, 512):
            assert sorted(probe.engine_s[n]) == [0, engines] and all(len(v) == 1 for v in probe.engine_s[n].values())
            # inside the engine is part of the TTFT: the request path is outside it
            assert all(0 < e < t for e, t in zip(probe.engine_s[n][0] + probe.engine_s[n][engines],
                                                 probe.ttft_s[n][0] + probe.ttft_s[n][engines])), probe
    workers = hybrid.status()["workers"]
    assert all(w["inflight"] == 0 and w["load"]["num_running"] == 0 and w["load"]["num_waiting"] == 0
               for w in workers.values()), workers


def test_a_prefill_beside_the_other_engines_prefills_is_measured_and_no_prompt_is_left_behind(hybrid):
    """What the simulator's prefill-neighbour form gets (bench.prefill_beside): probes on the
    prefill-only engine, alone and beside the other engine's prompts, timed inside the engine by
    the router's log; the router sent them to different engines, and nothing is left running."""
    routes = probe_routes(Counter(i.role for i in hybrid.infos.values()))
    assert routes == ProbeRoutes("disaggregated", "colocated", "prefill")
    measured = measure_prefill_beside(hybrid, routes, lambda: ray.get(hybrid.router.prediction_errors.remote()),
                                      repeats=2, rounds=1)
    # the background's prompts went to the engine that does both, the probes to the other one
    assert measured.dropped == 0 and len(measured.alone_s) == 2 and len(measured.beside_s) == 2, measured
    assert measured.background >= 2
    assert min(measured.alone_s + measured.beside_s) > 0 and 0 < measured.factor < 10, measured
    workers = hybrid.status()["workers"]
    assert all(w["inflight"] == 0 and w["load"]["num_running"] == 0 and w["load"]["num_waiting"] == 0
               for w in workers.values()), workers


def test_a_decode_steps_growth_by_batch_is_measured_in_loops_and_nothing_is_left_running(hybrid):
    """What the simulator's mix-growth form gets (bench.decode_growth): closed loops of a short
    prompt mix at 1 and 2 streams on hybrid's one decode engine; the quiet gaps at each loop's
    batch are timed against the calibration, and every request has ended afterwards."""
    assert decode_engines(Counter(i.role for i in hybrid.infos.values())) == 1
    growth = measure_decode_growth(hybrid, {"short": (1.0, 64, 256)}, loop_streams=(1, 2), repeats=1)
    assert [n for n, _ in growth.counts] == [1, 2] and all(c > 0 for _, c in growth.counts), growth
    # One loop of one stream: every gap of its six requests but those beside another's way to its
    # first token, so nearly all of them (64 tokens each).
    assert growth.counts[0][1] >= MIN_GAPS and growth.usable, growth
    # Against the calibration, a few ms either way: never whole steps (3-10 ms here).
    assert all(abs(e) < 0.02 for _, e in growth.points), growth.points
    assert 64 < growth.context_tokens < 256 + 64, growth.context_tokens
    workers = hybrid.status()["workers"]
    assert all(w["inflight"] == 0 and w["load"]["num_running"] == 0 and w["load"]["num_waiting"] == 0
               for w in workers.values()), workers


def test_every_process_times_its_garbage_collections(hybrid):
    """After the requests above, each worker actor and the router have run collections, each
    timed (pd_serve/gc_pauses.py), at least the young generation's."""
    reports = {wid: ray.get(w.gc_pauses.remote()) for wid, w in hybrid.workers.items()}
    reports["router"] = hybrid.status()["gc"]
    for name, r in reports.items():
        young = r["collections"].get("0", {})
        assert young.get("count", 0) > 0 and young["seconds"] > 0, (name, r)
        assert r["max_pause_s"] > 0 and all(p["pause_s"] >= r["long_pause_s"] for p in r["long"]), (name, r)


def test_workers_and_their_engines_run_at_normal_priority(hybrid):
    """The local cluster deploy() starts does not renice its workers (Ray's default is 15), so no
    process at nice 0 on the same cores can starve an engine (deployment.init_ray)."""
    assert {wid: i.niceness for wid, i in hybrid.infos.items()} == {wid: 0 for wid in hybrid.infos}
    engines = [psutil.Process(pid) for pid in hybrid.child_pids]
    assert engines and all(p.nice() == 0 for p in engines), [(p.pid, p.name(), p.nice()) for p in engines]
    assert all(w["niceness"] == 0 for w in hybrid.status()["workers"].values())


def test_every_process_watches_its_event_loop(hybrid):
    """Each worker actor and the router have had their event loop watched since start-up
    (pd_serve/loop_stalls.py): the heartbeat has been turning, and every stall kept is one the
    heartbeat measured (at least the threshold late), with when it began."""
    reports = {wid: ray.get(w.loop_stalls.remote()) for wid, w in hybrid.workers.items()}
    reports["router"] = hybrid.status()["loop"]
    for name, r in reports.items():
        assert r["num_beats"] > 10, (name, r)
        assert r["num_stalls"] >= len(r["stalls"]), (name, r)
        for stall in r["stalls"]:
            assert stall["stall_s"] >= r["threshold_s"] and stall["t_start"] > 0, (name, stall)


STOP_S = 25.0  # how long the stalled prefill engine stays stopped


def test_a_paired_run_serves_the_same_workload_on_both_routes_by_turns(hybrid, tmp_path):
    """bench.paired on a live deployment: each pair serves the same arrivals on route colocated
    and on route auto, writes every run, and the table counts what the records say."""
    slo = SloSpec()
    runs = run_pairs(hybrid, rates=[4.0], pairs=2, num_requests=6, output_tokens=4, out=tmp_path, slo=slo)
    assert sorted(runs) == [(k, route, 4.0) for k in (0, 1) for route in sorted(ROUTES)]
    for (k, route, _), recs in runs.items():
        assert len(recs) == 6 and all(r.ok and len(r.token_times) == 4 for r in recs), (k, route)
        assert (tmp_path / f"pair_{k}" / route / "rate_4" / "records.json").exists()
    # Route colocated never leaves the engine that does both; the pair's arrivals are the same.
    assert {(r.route, r.decode_worker) for r in runs[(0, "colocated", 4.0)]} == {("colocated", "both-0")}
    assert [r.input_tokens for r in runs[(0, "colocated", 4.0)]] == [r.input_tokens for r in runs[(0, "auto", 4.0)]]
    (row,) = paired_rows(runs, [4.0], slo)
    assert row["colocated_ok"] == [num_within_slos(runs[(k, "colocated", 4.0)], slo) for k in (0, 1)]
    assert not any(wait_until_nothing_left(hybrid)["left"].values())
    # The engines' own steps, as bench.compare saves them for bench.engine_stalls: inside a run on
    # route colocated only the engine that does both stepped, and prefilled no more than its prompts.
    write_engine_steps(hybrid, tmp_path / STEPS_FILE)
    steps = saved_steps(tmp_path)
    assert {s["worker"] for s in steps} <= set(hybrid.workers)
    colocated = runs[(0, "colocated", 4.0)]
    start, end = run_window(colocated)
    inside = [s for s in steps if start <= s["t"] <= end]
    assert {s["worker"] for s in inside} == {"both-0"}
    assert {(s["worker"], s["role"]) for s in steps} <= {(wid, info.role) for wid, info in hybrid.infos.items()}
    assert 0 < sum(s["num_prefill_tokens"] for s in inside) <= sum(r.input_tokens for r in colocated)
    assert all(s["elapsed_s"] > 0 for s in inside)


def test_a_prompt_on_a_stalled_prefill_worker_is_taken_back_and_prefilled_locally(hybrid):
    """The adaptive router sends a long prompt to the prefill worker, whose engine then stops
    (SIGSTOP: a process that gets no CPU). Waiting would cost the whole stop; once the prompt has
    waited its TTFT SLO and the router sees the worker silent past twice its longest wait, it
    aborts the prompt there and prefills it on the decode worker (router.py `_prefill_stalled`)."""
    # A long prompt forced onto the decode-capable worker first: behind it, the second long
    # prompt would miss its SLO there, and the policy sends it to the prefill-only worker.
    # (On an idle deployment a 7,000-token prefill is predicted to meet the 1 s SLO locally.)
    ahead = distinct_prompt(7000, 79)
    prompt = distinct_prompt(7000, 77)
    engine_pids = ray.get(hybrid.workers["prefill-0"].child_pids.remote())
    assert engine_pids
    box: dict = {}

    def run(key: str, ids: list[int], route: str) -> None:
        try:
            box[key] = hybrid.generate(prompt_token_ids=ids, max_tokens=8, ignore_eos=True, route=route)
        except Exception as err:
            box[key + " error"] = err

    first = threading.Thread(target=run, args=("ahead", ahead, "colocated"))
    first.start()
    time.sleep(0.2)  # the router has it on both-0's queue
    t = threading.Thread(target=run, args=("result", prompt, "auto"))
    t.start()
    time.sleep(0.5)  # routed and sent, its prefill under way
    stopped = time.time()
    for pid in engine_pids:
        os.kill(pid, signal.SIGSTOP)
    try:
        t.join(timeout=STOP_S)
        served_in_s = time.time() - stopped
    finally:
        for pid in engine_pids:
            os.kill(pid, signal.SIGCONT)
    t.join(timeout=120)
    first.join(timeout=120)
    assert not [k for k in box if k.endswith("error")], box
    assert box["ahead"].route == "colocated"
    r = box["result"]
    assert r.route == "colocated" and r.decode_worker == "both-0" and r.prefill_worker is None, r
    assert r.fallback and "prefill worker prefill-0 stalled" in r.fallback, (r.fallback, r.decision_reason, r.ttft_s, r.predicted_ttft_s)
    assert served_in_s < STOP_S - 1, served_in_s  # it did not wait for the engine to go on
    assert len(r.token_ids) == 8
    print(f"taken back: served {served_in_s:.2f} s after the stop, TTFT {r.ttft_s:.2f} s")
    assert hybrid.status()["counters"]["prefills_taken_back"] >= 1
    # Nothing is left behind: the aborted prompt's KV on the prefill worker (its step may finish
    # first when it goes on; abort_timeout_s, 30 s, frees what no decode reads), the request.
    after = wait_until_nothing_left(hybrid, within_s=45)
    assert not any(after["left"].values()) and not any(after["kv_usage"].values()), after
    # The prefill worker serves again.
    again = hybrid.generate(prompt_token_ids=distinct_prompt(1000, 78), max_tokens=2, route="disaggregated")
    assert again.route == "disaggregated" and again.prefill_worker == "prefill-0"


def test_prefill_worker_death_falls_back_to_a_local_prefill(hybrid):
    prompt = distinct_prompt(7000, 7)
    box: dict = {}

    def run() -> None:
        try:
            box["result"] = hybrid.generate(prompt_token_ids=prompt, max_tokens=8, ignore_eos=True,
                                            route="disaggregated")
        except Exception as err:
            box["error"] = err

    t = threading.Thread(target=run)
    t.start()
    time.sleep(0.6)  # the 7,000-token prefill takes seconds: kill the prefill worker inside it
    ray.kill(hybrid.workers["prefill-0"], no_restart=True)
    t.join(timeout=300)
    assert not t.is_alive(), "request hung after the prefill worker died"
    assert "error" not in box, box.get("error")
    r = box["result"]
    assert r.route == "colocated" and r.decode_worker == "both-0" and r.prefill_worker is None
    assert r.fallback and "prefill worker prefill-0 failed" in r.fallback
    assert len(r.token_ids) == 8
    assert hybrid.status()["counters"]["route_fallbacks"] >= 1

    # Later requests keep working, long ones included, on the surviving worker.
    later = hybrid.generate(prompt_token_ids=distinct_prompt(3000, 8), max_tokens=4, route="auto")
    assert later.route == "colocated" and later.decode_worker == "both-0"
    assert hybrid.status()["workers"]["prefill-0"]["healthy"] is False


def test_shutdown_leaves_no_engine_process_behind(hybrid):
    pids = list(hybrid.child_pids)
    assert pids, "the deployment should know its engine processes"
    hybrid.shutdown()
    deadline = time.time() + 15
    while time.time() < deadline and any(psutil.pid_exists(p) for p in pids):
        time.sleep(0.5)
    alive = [p for p in pids if psutil.pid_exists(p) and psutil.Process(p).status() != psutil.STATUS_ZOMBIE]
    assert not alive
    assert not ray.is_initialized()
    # Nor their shared memory, though the prefill worker above was killed, not stopped.
    assert hybrid.shm_segments, "the deployment should know its engines' shared memory"
    assert not [p for p in hybrid.shm_segments if os.path.exists(p)]
    # Nor a named semaphore, which the killed worker's resource tracker can no longer remove
    # (tqdm's lock made one per engine: vllm_plugin keeps it from being made).
    assert not set(Path("/dev/shm").glob("sem.mp-*")) - hybrid.semaphores_before

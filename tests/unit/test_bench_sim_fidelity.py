"""bench.sim_fidelity's pure parts: calibration records, mirrored sim configs, errors (no Ray/vLLM)."""
from __future__ import annotations

from dataclasses import replace

import json
import statistics
from pathlib import Path
from types import SimpleNamespace

import pytest
import yaml

from bench import sim_fidelity as sf
from bench.compare import DEFAULT_OUTPUT_TOKENS, RATES_BUCKETS, rates_workload
from bench.metrics import summarize
from bench.simulator import build_cluster, build_policy
from bench.simulator.host import HostSpec
from bench.simulator.specs import EngineSpec
from bench.step_scatter import EXCESS_KEY, STRETCH_KEY
from pd_serve.default_model import LLAMA_CONFIG, VOCAB_SIZE
from schedulers.candidates import decode_engines
from schedulers.model_spec import ModelSpec
from schedulers.policies import AdaptivePolicy
from schedulers.step_time import StepTimeModel

ROOT = Path(__file__).resolve().parents[2]
HF_CONFIG = {**LLAMA_CONFIG, "vocab_size": VOCAB_SIZE}
COEFFS = {"overhead_s": 4e-3, "s_per_linear_flop": 2e-11, "s_per_attention_flop": 4e-11, "s_per_kv_byte": 1e-10}
LINK = {"alpha_s": 2e-3, "beta_bytes_per_s": 2e9}


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory) -> str:
    d = tmp_path_factory.mktemp("tiny-llama")
    (d / "config.json").write_text(json.dumps(HF_CONFIG))
    return str(d)


@pytest.fixture(scope="module")
def cal() -> dict:
    spec = ModelSpec.from_hf_config(HF_CONFIG, dtype=None)
    return sf.calibration_record(COEFFS, spec, spec.kv_geometry(32), LINK)


def load(name: str) -> dict:
    return yaml.safe_load((ROOT / "configs" / name).read_text())


def test_calibration_record_round_trips_through_json(cal):
    model = sf.step_model_from_calibration(json.loads(json.dumps(cal)))
    assert isinstance(model, StepTimeModel)
    assert [getattr(model, k) for k in sf.COEFFICIENTS] == [COEFFS[k] for k in sf.COEFFICIENTS]
    assert model.kv.block_size == 32 and model.kv.dtype_bytes == 4  # float32, as the live engine
    assert cal["link"] == LINK


def test_step_model_from_hf_config_matches_the_deployments_geometry():
    cal = {**COEFFS, "hf_config": HF_CONFIG, "block_size": 32, "kv_dtype": "float32", "link": LINK}
    model = sf.step_model_from_calibration(cal)
    assert model.spec == ModelSpec.from_hf_config(HF_CONFIG, dtype=None)
    assert model.kv.bytes_per_block == 4 * 2 * 2 * 64 * 4 * 32
    with pytest.raises(ValueError, match="calibration needs"):
        sf.step_model_from_calibration(COEFFS)


def test_calibration_from_deployment_prefers_the_routers_start_up_link(cal):
    spec = ModelSpec.from_hf_config(HF_CONFIG, dtype=None)
    model = StepTimeModel(spec, spec.kv_geometry(32), *COEFFS.values())
    dep = SimpleNamespace(
        calibration=SimpleNamespace(model=model, summary=lambda: {"num_samples": 3}),
        infos={"prefill-0": SimpleNamespace(hf_config=HF_CONFIG, block_size=32, kv_dtype="float32")},
        link_probes=[SimpleNamespace(fit=SimpleNamespace(alpha_s=1e-4, beta_bytes_per_s=5e9, r2=0.99))],
        links_at_start={"models": [{"prefill_id": "prefill-0", "decode_id": "both-0", "engine_overhead_s": 3e-3,
                                    "model": {"alpha_s": 3.1e-3, "beta_bytes_per_s": 5e9}}]},
        config=SimpleNamespace(name="pd-serve-hybrid"))
    out = sf.calibration_from_deployment(dep)
    assert out["link"] == {"alpha_s": 3.1e-3, "beta_bytes_per_s": 5e9}
    assert out["probe_fit"]["alpha_s"] == 1e-4
    assert sf.step_model_from_calibration(out) == model
    dep.links_at_start = {}
    assert sf.calibration_from_deployment(dep)["link"] == {"alpha_s": 1e-4, "beta_bytes_per_s": 5e9}
    # The router's own calibration (engines probed together) rides along when given.
    assert out["router_calibration"] == {}
    together = {"overhead_s": 4.4e-3, "probed": "all engines at once"}
    assert sf.calibration_from_deployment(dep, router_calibration=together)["router_calibration"] == together


def test_cpu_kv_blocks_follow_the_workers_whole_gib(cal):
    kv = sf.step_model_from_calibration(cal).kv
    assert sf.cpu_kv_blocks(1, kv) == (1 << 30) // kv.bytes_per_block
    assert sf.cpu_kv_blocks(0.2, kv) == sf.cpu_kv_blocks(1, kv)  # at least 1 GiB
    assert sf.cpu_kv_blocks(2.4, kv) == 2 * sf.cpu_kv_blocks(1, kv)


@pytest.mark.parametrize("label, path, policy, workers", [
    ("colocated", "colocated.yaml", "colocated", {"both": 2}),
    ("disaggregated", "disaggregated.yaml", "disaggregated", {"prefill": 1, "decode": 1}),
    ("adaptive", "adaptive.yaml", "adaptive", {"both": 2}),
    ("hybrid adaptive", "hybrid.yaml", "adaptive", {"prefill": 1, "both": 1}),
])
def test_sim_config_mirrors_each_deployment(label, path, policy, workers, cal, model_dir):
    deployment = load(path)
    config = sf.sim_config_for(label, deployment, cal, model_dir)
    run = config.policies[label]
    assert run.policy == policy and run.workers == workers
    step_model = sf.step_model_from_calibration(cal)
    cluster = build_cluster(config, label, step_model=step_model)
    assert cluster.step_model is step_model  # calibrated, not the roofline
    assert (cluster.link.alpha_s, cluster.link.bandwidth_bytes_per_s) == (LINK["alpha_s"], LINK["beta_bytes_per_s"])
    assert sorted(w.role for w in cluster.workers) == sorted(r for r, n in workers.items() for _ in range(n))
    for w in cluster.workers:
        live = deployment["workers"][w.role]["engine"]
        assert w.engine.max_num_batched_tokens == live["max_num_batched_tokens"]
        assert w.engine.max_model_len == live["max_model_len"]
        assert w.engine.block_size == live["block_size"]
        assert w.engine.enable_chunked_prefill is True
        # the config's, else pd_serve's engine default, not the simulator's 256
        assert w.engine.max_num_seqs == live.get("max_num_seqs", 16)
        assert w.engine.num_kv_blocks == sf.cpu_kv_blocks(live["kv_cache_gib"], step_model.kv)
    policy_obj = build_policy(config, label, cluster)
    assert policy_obj.name == policy
    if policy == "adaptive":
        assert isinstance(policy_obj, AdaptivePolicy)
        assert config.slo_spec.tpot_slo_s == deployment["scheduler"]["slo"]["tpot_s"]
        assert cluster.chunk_tokens == 2048  # the live router's chunk: decode-capable budgets
    assert run.speed_by_role is True  # the live router's default: each kind of engine's own speed
    deployment.setdefault("scheduler", {})["speed_by_role"] = False
    assert sf.sim_config_for(label, deployment, cal, model_dir).policies[label].speed_by_role is False


def test_build_cluster_without_a_step_model_keeps_the_roofline(cal, model_dir):
    config = sf.sim_config_for("colocated", load("colocated.yaml"), cal, model_dir)
    assert build_cluster(config, "colocated").step_model == config.step_model(32)


def test_block_size_must_match_the_calibration(cal, model_dir):
    deployment = load("colocated.yaml")
    deployment["workers"]["both"]["engine"]["block_size"] = 64
    with pytest.raises(ValueError, match="block_size 64"):
        sf.sim_config_for("colocated", deployment, cal, model_dir)


def test_rates_workload_is_bench_compares():
    wl = rates_workload(1.0, 20, 32)
    assert wl.num_requests == 20 and all(r.output_tokens == 32 for r in wl.requests)
    assert {r.bucket for r in wl.requests} <= set(RATES_BUCKETS)
    assert all(64 <= r.input_tokens <= 4000 for r in wl.requests)
    records = [{"request_id": r.request_id, "input_tokens": r.input_tokens} for r in wl.requests]
    assert sf.same_requests(wl, records[::-1])
    assert not sf.same_requests(wl, records[1:])


def test_every_rates_system_calibrates_and_the_baselines_keep_their_fixed_policies(monkeypatch):
    from bench.compare import RATES_BASELINES, rates_systems
    monkeypatch.chdir(ROOT)
    systems = rates_systems()
    assert all(cfg["scheduler"]["calibrate"] for cfg in systems.values())
    assert {label: systems[label]["scheduler"]["policy"] for label in RATES_BASELINES} == {
        "colocated": "colocated", "disaggregated": "disaggregated"}


def test_systems_chosen_by_name_or_as_label_and_config(monkeypatch, tmp_path):
    from bench.compare import RATES_SYSTEMS, parse_systems, present_baselines
    monkeypatch.chdir(ROOT)
    mine = tmp_path / "mine.yaml"
    mine.write_text("name: mine\n")
    systems = parse_systems(f"adaptive, colocated, mine={mine}")
    assert systems == {"adaptive": RATES_SYSTEMS["adaptive"], "colocated": RATES_SYSTEMS["colocated"],
                       "mine": str(mine)}
    assert present_baselines(systems) == ("colocated",)
    assert sf.systems_of({"systems": systems}) == systems
    assert sf.systems_of({}) == RATES_SYSTEMS  # a summary from before --systems
    for bad, match in [("colocated,adaptve", "unknown system 'adaptve'"),
                       ("colocated,colocated", "given twice"),
                       (f"colocated,x={tmp_path / 'absent.yaml'}", "existing config"),
                       ("adaptive,hybrid adaptive", "at least one baseline")]:
        with pytest.raises(ValueError, match=match):
            parse_systems(bad)


def test_a_replay_takes_the_deployment_the_run_recorded_over_the_config_file_of_today(monkeypatch, model_dir, cal):
    from pd_serve.config import load_config
    monkeypatch.chdir(ROOT)
    served = load_config("configs/hybrid.yaml").model_dump(mode="json")
    served["scheduler"]["speed_by_role"] = not served["scheduler"]["speed_by_role"]  # since changed
    today = yaml.safe_load((ROOT / "configs/hybrid.yaml").read_text())
    assert sf.deployment_of({"deployments": {"hybrid adaptive": served}}, "hybrid adaptive",
                            "configs/hybrid.yaml") == served
    assert sf.deployment_of({"deployments": {}}, "hybrid adaptive", "configs/hybrid.yaml") == today
    assert sf.deployment_of({}, "hybrid adaptive", "configs/hybrid.yaml") == today  # before stop 52
    # what was recorded is a whole config the simulator reads, the changed default with it
    config = sf.sim_config_for("hybrid adaptive", served, cal, model_dir)
    assert config.policies["hybrid adaptive"].speed_by_role == served["scheduler"]["speed_by_role"]


def test_live_run_shape_reads_requests_and_output_length():
    assert sf.live_run_shape({"num_requests": 60, "throughput_rps": 0.5, "output_tokens_per_s": 16.0}) == (60, 32)
    assert sf.live_run_shape({"num_requests": 5, "throughput_rps": None}) == (5, DEFAULT_OUTPUT_TOKENS)


def test_rel_error_and_compare_summaries():
    assert sf.rel_error(1.2, 1.0) == pytest.approx(0.2)
    assert sf.rel_error(0.5, 1.0) == pytest.approx(0.5)
    assert sf.rel_error(None, 1.0) is None and sf.rel_error(1.0, 0) is None and sf.rel_error(1.0, None) is None
    live = {"ttft_s": {"p50": 0.1, "p99": 1.0}, "tpot_s": {"mean": 0.01}}
    sim = {"ttft_s": {"p50": 0.11, "p99": 1.5}, "tpot_s": {"mean": 0.008}}
    out = sf.compare_summaries(live, sim)
    assert out["p50_ttft_s"]["ok"] and out["p50_ttft_s"]["rel_error"] == pytest.approx(0.1)
    assert not out["p99_ttft_s"]["ok"] and out["p99_ttft_s"]["rel_error"] == pytest.approx(0.5)
    assert out["mean_tpot_s"]["ok"] and out["mean_tpot_s"]["rel_error"] == pytest.approx(0.2)


def test_fidelity_table_marks_errors_over_tolerance():
    metrics = {n: {"live": 0.1, "sim": 0.1, "rel_error": 0.0, "ok": True} for n, _ in sf.METRICS}
    metrics["p99_ttft_s"] = {"live": 1.0, "sim": 1.5, "rel_error": 0.5, "ok": False}
    table = sf.fidelity_table([{"system": "colocated", "rate": 0.5, "metrics": metrics}])
    assert "colocated" in table and "50.0% *" in table and "0.0%" in table and "1500.0" in table
    assert table.splitlines()[2].rstrip().endswith("no |")


def test_run_fidelity_on_a_small_fake_live_summary(cal, model_dir):
    """End to end through the simulator (a few requests) against a made-up live summary."""
    wl = rates_workload(2.0, 6, 4)
    live_summary = summarize([], None)
    live_summary.update(num_requests=6, throughput_rps=1.0, output_tokens_per_s=4.0,
                        ttft_s={"mean": 0.1, "p50": 0.1, "p90": 0.2, "p99": 0.3},
                        tpot_s={"mean": 0.01, "p50": 0.01, "p90": 0.01, "p99": 0.01})
    live = {"experiment": "rates", "rates": [2.0],
            "summaries": {"hybrid adaptive": {"rate=2": live_summary}}}
    rows = sf.run_fidelity(live, cal, model_dir, systems={"hybrid adaptive": str(ROOT / "configs/hybrid.yaml"),
                                                          "colocated": str(ROOT / "configs/colocated.yaml")},
                           progress=False)
    assert len(rows) == 1  # colocated is not in the live summary
    row = rows[0]
    assert row["system"] == "hybrid adaptive" and row["num_requests"] == wl.num_requests
    assert row["output_tokens"] == 4 and row["sim_num_failed"] == 0
    assert sum(row["sim_routes"].values()) == 6
    for name, _ in sf.METRICS:
        m = row["metrics"][name]
        assert m["sim"] > 0 and m["rel_error"] == pytest.approx(abs(m["sim"] - m["live"]) / m["live"])


def test_each_system_runs_on_its_own_deployments_measurements_when_the_live_run_kept_them(cal, model_dir):
    """bench.compare measures every deployment before its run; those win over `cal`, and the
    measured request path reaches the simulated cluster (TTFT grows by it)."""
    live_summary = summarize([], None)
    live_summary.update(num_requests=6, throughput_rps=1.0, output_tokens_per_s=4.0,
                        ttft_s={"mean": 0.1, "p50": 0.1, "p90": 0.2, "p99": 0.3},
                        tpot_s={"mean": 0.01, "p50": 0.01, "p90": 0.01, "p99": 0.01})
    own = {**cal, "request_path": {"colocated_s": 0.5, "disaggregated_s": 1.0}}
    base = {"experiment": "rates", "rates": [2.0], "summaries": {"colocated": {"rate=2": live_summary}}}
    systems = {"colocated": str(ROOT / "configs/colocated.yaml")}
    plain = sf.run_fidelity(base, cal, model_dir, systems=systems, progress=False)[0]
    mine = sf.run_fidelity({**base, "measured": {"colocated": own}}, None, model_dir, systems=systems,
                           progress=False)[0]
    assert mine["calibration_measured_with_live_run"] and not plain["calibration_measured_with_live_run"]
    assert mine["metrics"]["p50_ttft_s"]["sim"] == pytest.approx(plain["metrics"]["p50_ttft_s"]["sim"] + 0.5)
    with pytest.raises(ValueError, match="no measurements of its deployment"):
        sf.run_fidelity(base, None, model_dir, systems=systems, progress=False)


def test_a_measured_host_reaches_the_simulated_cluster_in_the_form_asked(cal, model_dir):
    host = {"num_cores": 2, "background_cores": 0.07, "cpu_s_per_request": 0.01, "cpu_s_per_token": 0.004,
            "samples": [{"window": "idle", "wall_s": 2.0, "cpu_s": 0.14}], "step_excess_1_s": -0.0004, "step_excess_2_s": 0.0003}
    measured = {**cal, "host": host}

    def host_of(form, record=measured):
        return build_cluster(sf.sim_config_for("colocated", load("colocated.yaml"), record, model_dir,
                                               host_form=form), "colocated").host
    assert host_of("steps") == HostSpec(2, 0.0, -0.0004, 0.0003)
    with_lone = {**measured, "host": {**host, "step_excess_alone_s": -0.001}}
    assert host_of("steps", with_lone) == HostSpec(2, 0.0, -0.0004, 0.0003)  # steps ignores the lone excess
    assert host_of("neighbour-steps", with_lone) == HostSpec(2, 0.0, -0.0004, 0.0003, -0.001)
    assert host_of("neighbour-steps") == host_of("steps")  # a record from before it was measured
    assert host_of("cpu") == HostSpec(2, 0.004, None)
    assert not host_of("none").is_modelled
    # A record from before the step excess was measured: the steps form has nothing to add.
    older = {**cal, "host": {k: v for k, v in host.items() if not k.startswith("step_excess")}}
    assert host_of("steps", older).step_delay_s(1, 4, 0.01) == 0.0
    with pytest.raises(ValueError, match="host_form"):
        host_of("both")
    # The neighbour forms take the router's calibration (all engines probed at once) besides.
    together = {**{k: 2 * COEFFS[k] for k in sf.COEFFICIENTS}, "probed": "all engines at once"}
    beside = {**measured, "router_calibration": together}
    coefficients = tuple(2 * COEFFS[k] for k in sf.COEFFICIENTS)
    assert host_of("neighbour", beside) == HostSpec(2, neighbour_coefficients=coefficients)
    assert host_of("neighbour+cpu", beside) == HostSpec(2, 0.004, neighbour_coefficients=coefficients)
    with pytest.raises(ValueError, match="all engines probed at once"):
        host_of("neighbour", {**beside, "router_calibration": {**together, "probed": "one engine at a time"}})
    with pytest.raises(ValueError, match="router_calibration"):
        host_of("neighbour")  # a record from before it was kept
    # The load form: neighbour steps and the prefill's measured stretch beside streams.
    loaded = {**measured, "host": {**host, "step_excess_alone_s": -0.001, "load_stretch": [[2, 1.4], [4, 1.7]],
                                   "load_probe": {"probe_prompt_tokens": 1024}}}
    assert host_of("load", loaded) == HostSpec(2, 0.0, -0.0004, 0.0003, -0.001, load_stretch=((2, 1.4), (4, 1.7)))
    assert host_of("neighbour-steps", loaded) == HostSpec(2, 0.0, -0.0004, 0.0003, -0.001)
    with pytest.raises(ValueError, match="stretch under load"):
        host_of("load", with_lone)  # a record from before it was measured
    # load-path: as load, with the path's CPU per streamed token as each further stream's cost.
    assert host_of("load-path", loaded) == HostSpec(2, 0.0, -0.0004, 0.0003, -0.001, stream_step_s=0.004,
                                                    load_stretch=((2, 1.4), (4, 1.7)))
    no_cpu = {**loaded, "host": {k: v for k, v in loaded["host"].items() if k != "cpu_s_per_token"}}
    with pytest.raises(ValueError, match="CPU per streamed token"):
        host_of("load-path", no_cpu)
    # load-batch: as load, with the excess measured at large batches for the further streams;
    # the prefill-only engine's own stretch rides along with every load form when measured.
    batched = {**loaded, "host": {**loaded["host"], "step_excess_batch": [[4, 0.002], [8, 0.005]],
                                  "load_stretch_beside": [[2, 1.9]]}}
    assert host_of("load-batch", batched) == HostSpec(2, 0.0, -0.0004, 0.0003, -0.001,
                                                      step_excess_batch=((4, 0.002), (8, 0.005)),
                                                      load_stretch=((2, 1.4), (4, 1.7)),
                                                      load_stretch_beside=((2, 1.9),))
    assert host_of("load-path", batched).load_stretch_beside == ((2, 1.9),)
    with pytest.raises(ValueError, match="large batches"):
        host_of("load-batch", loaded)  # a record from before they were measured
    assert not build_cluster(sf.sim_config_for("colocated", load("colocated.yaml"), cal, model_dir),
                             "colocated").host.is_modelled  # an older record without a host
    # The path-beside form (the default until stop 45): load-beside (load-batch where no engine
    # is prefill-only) with the cores a request on its path keeps busy (path-cores, the closest
    # on runs 37-47), a prefill stretched only beside another engine's decode steps or a
    # prefill-only engine's work, or beside another engine's prefill by the stretch measured
    # there (prefill-neighbour), with one decode engine its further streams by the loops of the
    # mix, and the colocated path as measured beside streams. Unasked, own-streams+mix (the form
    # that needs no scatter draws, NO_STEPS_HOST_FORM): the same
    # without the stretch beside another engine's prefill and the path beside streams, and with
    # hybrid's engine that streams stretched beside its own streams (the own-streams rule).
    # A record from before its points, or the stretches, were measured is refused rather than
    # simulated without them.
    batched = {**batched, "host": {**batched["host"], "stretch_beside_prefill": 1.2,
                                   "path_beside_streams": [[0, 0.01], [2, 0.02]]}}
    pathed = {**batched, "request_path": {"colocated_s": 0.0125, "disaggregated_s": 0.025}}
    path_cores = replace(host_of("load-batch", batched), path_cores=0.01 / 0.0125)
    assert host_of("path-cores", pathed) == path_cores
    assert build_cluster(sf.sim_config_for("colocated", load("colocated.yaml"), pathed, model_dir,
                                           host_form="path-beside"),
                         "colocated").host == replace(path_cores, stretch_rule="decode-neighbour",
                                                      stretch_beside_prefill=1.2,
                                                      path_beside_streams=((0, 0.01), (2, 0.02)))
    assert build_cluster(sf.sim_config_for("colocated", load("colocated.yaml"), pathed, model_dir),
                         "colocated").host == replace(path_cores, stretch_rule="own-streams")
    with pytest.raises(ValueError, match="request path's colocated_s"):
        sf.sim_config_for("colocated", load("colocated.yaml"), batched, model_dir)  # no path measured
    assert host_of("load-beside", pathed).path_cores == 0.0  # the other forms leave it out
    with pytest.raises(ValueError, match="--host load-path"):
        sf.sim_config_for("colocated", load("colocated.yaml"), loaded, model_dir)
    with pytest.raises(ValueError, match="--host neighbour-steps"):
        sf.sim_config_for("colocated", load("colocated.yaml"), with_lone, model_dir)


def test_the_load_beside_form_takes_the_decode_excess_beside_a_prefill_where_there_is_a_prefill_only_engine(
        cal, model_dir):
    host = {"num_cores": 2, "step_excess_1_s": 0.001, "step_excess_2_s": 0.002, "step_excess_alone_s": 0.0005,
            "step_excess_batch": [[4, 0.003]], "load_stretch": [[1, 1.3]], "load_stretch_beside": [[1, 1.5]],
            "decode_beside_prefill": [[1, 0.004], [2, 0.005]]}

    def host_of(label, config, form, record_host):
        return build_cluster(sf.sim_config_for(label, load(config), {**cal, "host": record_host}, model_dir,
                                               host_form=form), label).host
    beside = host_of("disaggregated", "disaggregated.yaml", "load-beside", host)
    assert beside.decode_beside_prefill == ((1, 0.004), (2, 0.005))
    batch = host_of("disaggregated", "disaggregated.yaml", "load-batch", host)
    assert batch == replace(beside, decode_beside_prefill=())  # load-batch leaves it out
    # unasked, own-streams+mix (NO_STEPS_HOST_FORM): load-beside with the path's cores, here over
    # the disaggregated path (no engine serves both phases, so the host's bursts all went
    # disaggregated), and the one decode engine's growth in loops of the mix
    record = {**cal, "host": {**host, "cpu_s_per_request": 0.01, "step_excess_mix": [[1, 0.002], [4, 0.005]]},
              "request_path": {"colocated_s": 0.0125, "disaggregated_s": 0.025}}
    assert build_cluster(sf.sim_config_for("disaggregated", load("disaggregated.yaml"), record, model_dir),
                         "disaggregated").host == replace(beside, path_cores=0.01 / 0.025,
                                                      stretch_rule="own-streams",
                                                      step_excess_mix=((1, 0.002), (4, 0.005)))
    older = {k: v for k, v in host.items() if k != "decode_beside_prefill"}
    with pytest.raises(ValueError, match="--host load-batch"):
        host_of("hybrid adaptive", "hybrid.yaml", "load-beside", older)  # a record from before it was measured
    with pytest.raises(ValueError, match="--host load-batch"):
        sf.sim_config_for("hybrid adaptive", load("hybrid.yaml"), {**cal, "host": older}, model_dir)
    with pytest.raises(ValueError, match="--host load-beside"):  # a record without the path's CPU per request
        sf.sim_config_for("disaggregated", load("disaggregated.yaml"),
                          {**cal, "host": {**host, "step_excess_mix": [[1, 0.002], [4, 0.005]]}}, model_dir)
    # A probe that saw too few gaps measured no points: nothing to add, not a record to refuse;
    # no batch points at all is one from before they were measured.
    assert host_of("hybrid adaptive", "hybrid.yaml", "load-beside",
                   {**host, "decode_beside_prefill": []}).decode_beside_prefill == ()
    with pytest.raises(ValueError, match="--host load-path"):
        host_of("hybrid adaptive", "hybrid.yaml", "load-beside", {**host, "step_excess_batch": []})
    # Without a prefill-only engine there is nothing to measure and nothing missing.
    assert host_of("colocated", "colocated.yaml", "load-beside", older) == host_of("colocated", "colocated.yaml",
                                                                                  "load-batch", older)


def test_the_gaps_table_sets_live_beside_simulated_gaps_by_class():
    row = {"system": "colocated", "rate": 0.5,
           "token_gaps": {"live": {"alone": {"mean_s": 0.003, "median_s": 0.0025, "count": 40},
                                   "nb-decode": {"mean_s": 0.006, "median_s": 0.006, "count": 5}},
                          "sim": {"alone": {"mean_s": 0.0031, "median_s": 0.003, "count": 45}}}}
    table = sf.gaps_table([row, {"system": "hybrid", "rate": 1.0, "token_gaps": {"live": None, "sim": {}}}])
    assert "3.0 / 3.1 (40)" in table and "6.0 / - (5)" in table and "- / - (0)" in table
    assert "hybrid" not in table  # no live records: no row


def test_the_quiet_excess_table_sets_live_beside_simulated_by_batch():
    # As a record read back from JSON: batch keys are strings there.
    row = {"system": "disaggregated", "rate": 3.07,
           "quiet_excess": {"live": {"1": {"median_s": 0.0012, "count": 1194},
                                     "5": {"median_s": 0.0041, "count": 89}},
                            "sim": {"1": {"median_s": 0.0012, "count": 1300}}}}
    table = sf.quiet_excess_table([row, {"system": "hybrid", "rate": 1.0, "quiet_excess": {"live": None}}])
    assert "1.2 / 1.2 (1194)" in table and "4.1 / - (89)" in table and "- / - (0)" in table
    assert "5+ streams" in table and "hybrid" not in table  # no live records: no row


def test_the_spin_form_is_path_cores_with_the_lone_excess_by_the_spin_window(cal, model_dir):
    host = {"num_cores": 2, "step_excess_1_s": 0.001, "step_excess_2_s": 0.002, "step_excess_alone_s": 0.0005,
            "step_excess_batch": [[4, 0.003]], "load_stretch": [[1, 1.3]], "cpu_s_per_request": 0.01}
    record = {**cal, "host": {**host, "step_excess_quiet_s": 0.0002, "step_excess_spin_s": 0.0021},
              "request_path": {"colocated_s": 0.0125, "disaggregated_s": 0.025}}

    def host_of(form, rec=record):
        return build_cluster(sf.sim_config_for("colocated", load("colocated.yaml"), rec, model_dir,
                                               host_form=form), "colocated").host
    assert host_of("spin") == replace(host_of("path-cores"), step_excess_quiet_s=0.0002, step_excess_spin_s=0.0021)
    assert host_of("path-cores").step_excess_spin_s is None  # the other forms leave them out
    with pytest.raises(ValueError, match="--host path-cores"):  # a record from before they were measured
        host_of("spin", {**record, "host": host})


def test_the_handover_form_is_path_cores_with_the_decode_excess_while_a_request_is_handed_over(cal, model_dir):
    host = {"num_cores": 2, "step_excess_1_s": 0.001, "step_excess_2_s": 0.002, "step_excess_alone_s": 0.0005,
            "step_excess_batch": [[4, 0.003]], "load_stretch": [[1, 1.3]], "load_stretch_beside": [[1, 1.5]],
            "decode_beside_prefill": [[1, 0.004]], "cpu_s_per_request": 0.01}
    record = {**cal, "host": {**host, "decode_beside_handover": [[1, 0.009], [2, 0.011]]},
              "request_path": {"colocated_s": 0.0125, "disaggregated_s": 0.025}}

    def host_of(label, config, form, rec=record):
        return build_cluster(sf.sim_config_for(label, load(config), rec, model_dir, host_form=form), label).host
    handover = host_of("disaggregated", "disaggregated.yaml", "handover")
    assert handover == replace(host_of("disaggregated", "disaggregated.yaml", "path-cores"),
                               decode_beside_handover=((1, 0.009), (2, 0.011)))
    assert host_of("disaggregated", "disaggregated.yaml", "path-cores").decode_beside_handover == ()
    with pytest.raises(ValueError, match="--host path-cores"):  # a record from before it was measured
        host_of("hybrid adaptive", "hybrid.yaml", "handover", {**record, "host": host})
    # Without a prefill-only engine nothing is handed over to measure, and nothing is missing.
    assert host_of("colocated", "colocated.yaml", "handover", {**record, "host": host}) == host_of(
        "colocated", "colocated.yaml", "path-cores", {**record, "host": host})


def test_the_prefill_neighbour_form_is_decode_neighbour_with_the_stretch_beside_a_prefill(cal, model_dir):
    host = {"num_cores": 2, "step_excess_1_s": 0.001, "step_excess_2_s": 0.002, "step_excess_alone_s": 0.0005,
            "step_excess_batch": [[4, 0.003]], "load_stretch": [[1, 1.3]], "load_stretch_beside": [[1, 1.5]],
            "decode_beside_prefill": [[1, 0.004]], "cpu_s_per_request": 0.01,
            "cpu_s_per_token": 0.002}
    record = {**cal, "host": {**host, "stretch_beside_prefill": 1.25},
              "request_path": {"colocated_s": 0.0125, "disaggregated_s": 0.025}}

    def host_of(label, config, form, rec=record):
        return build_cluster(sf.sim_config_for(label, load(config), rec, model_dir, host_form=form), label).host
    for label, config in (("colocated", "colocated.yaml"), ("hybrid adaptive", "hybrid.yaml")):
        assert host_of(label, config, "prefill-neighbour") == replace(
            host_of(label, config, "decode-neighbour"), stretch_beside_prefill=1.25)
        assert host_of(label, config, "decode-neighbour").stretch_beside_prefill == 1.0  # left out there
        with pytest.raises(ValueError, match="--host decode-neighbour"):  # a record from before it was measured
            host_of(label, config, "prefill-neighbour", {**record, "host": host})
    assert "prefill beside another engine's prefills x1.25" in sf._calibration_line(record)
    # One engine prefills on disaggregated: nothing prefills beside another, and nothing is missing.
    assert host_of("disaggregated", "disaggregated.yaml", "prefill-neighbour", {**record, "host": host}) == host_of(
        "disaggregated", "disaggregated.yaml", "decode-neighbour", {**record, "host": host})


def test_the_path_beside_form_is_mix_growth_with_the_colocated_path_measured_beside_streams(cal, model_dir):
    host = {"num_cores": 2, "step_excess_1_s": 0.001, "step_excess_2_s": 0.002, "step_excess_alone_s": 0.0005,
            "step_excess_batch": [[4, 0.003]], "load_stretch": [[1, 1.3]], "load_stretch_beside": [[1, 1.5]],
            "decode_beside_prefill": [[1, 0.004]], "decode_beside_handover": [[1, 0.005]],
            "cpu_s_per_request": 0.01, "cpu_s_per_token": 0.002, "stretch_beside_prefill": 1.25,
            "step_excess_quiet_s": 0.0004, "step_excess_spin_s": 0.0006, "step_excess_mix": [[1, 0.002], [4, 0.005]]}
    paths = [[0, 0.01], [2, 0.016]]
    record = {**cal, "host": {**host, "path_beside_streams": paths},
              "request_path": {"colocated_s": 0.0125, "disaggregated_s": 0.025}}

    def host_of(label, config, form, rec=record):
        return build_cluster(sf.sim_config_for(label, load(config), rec, model_dir, host_form=form), label).host
    for label, config in (("colocated", "colocated.yaml"), ("hybrid adaptive", "hybrid.yaml")):
        assert host_of(label, config, "path-beside") == replace(host_of(label, config, "mix-growth"),
                                                                path_beside_streams=((0, 0.01), (2, 0.016)))
        assert host_of(label, config, "mix-growth").path_beside_streams == ()
        with pytest.raises(ValueError, match="--host mix-growth"):  # a record from before it was measured
            host_of(label, config, "path-beside", {**record, "host": host})
    # No engine serves both phases on disaggregated: no colocated route, nothing missing.
    assert host_of("disaggregated", "disaggregated.yaml", "path-beside", {**record, "host": host}) == host_of(
        "disaggregated", "disaggregated.yaml", "mix-growth", {**record, "host": host})
    assert "request path beside streams 10.0 ms with 0, 16.0 ms with 2" in sf._calibration_line(record)


def test_decode_neighbour_with_mix_growth_is_mix_growth_without_the_two_probes_beside(cal, model_dir):
    host = {"num_cores": 2, "step_excess_1_s": 0.001, "step_excess_2_s": 0.002, "step_excess_alone_s": 0.0005,
            "step_excess_batch": [[4, 0.003]], "load_stretch": [[1, 1.3]], "load_stretch_beside": [[1, 1.5]],
            "decode_beside_prefill": [[1, 0.004]], "cpu_s_per_request": 0.01, "cpu_s_per_token": 0.002,
            "stretch_beside_prefill": 1.25, "path_beside_streams": [[0, 0.01], [2, 0.016]]}
    record = {**cal, "host": {**host, "step_excess_mix": [[1, 0.002], [4, 0.005]]},
              "request_path": {"colocated_s": 0.0125, "disaggregated_s": 0.025}}

    def host_of(label, config, form, rec=record):
        return build_cluster(sf.sim_config_for(label, load(config), rec, model_dir, host_form=form), label).host
    for label, config in (("colocated", "colocated.yaml"), ("disaggregated", "disaggregated.yaml"),
                          ("hybrid adaptive", "hybrid.yaml")):
        form = host_of(label, config, "decode-neighbour+mix")
        assert form == replace(host_of(label, config, "mix-growth"), stretch_beside_prefill=1.0)
        assert form.path_beside_streams == () and form.stretch_beside_prefill == 1.0
        assert form.step_excess_mix == host_of(label, config, "path-beside").step_excess_mix
    assert host_of("hybrid adaptive", "hybrid.yaml", "decode-neighbour+mix").step_excess_mix == ((1, 0.002),
                                                                                                 (4, 0.005))
    # A record from before the mix was measured: the form it extends is decode-neighbour, not
    # mix-growth's prefill-neighbour.
    with pytest.raises(ValueError, match="--host decode-neighbour for it"):
        host_of("disaggregated", "disaggregated.yaml", "decode-neighbour+mix", {**record, "host": host})
    with pytest.raises(ValueError, match="--host prefill-neighbour for it"):
        host_of("disaggregated", "disaggregated.yaml", "mix-growth", {**record, "host": host})


def test_the_stretch_draws_form_is_decode_neighbour_with_mix_drawing_among_the_load_probes(cal, model_dir):
    host = {"num_cores": 2, "step_excess_1_s": 0.001, "step_excess_2_s": 0.002, "step_excess_alone_s": 0.0005,
            "step_excess_batch": [[4, 0.003]], "load_stretch": [[1, 1.3]], "load_stretch_beside": [[1, 1.5]],
            "decode_beside_prefill": [[1, 0.004]], "cpu_s_per_request": 0.01, "step_excess_mix": [[1, 0.002], [4, 0.005]],
            "load_probe": {"samples": {"0": [0.1, 0.1, 0.1], "1": [0.16, 0.12], "2": [0.14]}},
            "load_probe_beside": {"samples": {"0": [0.2, 0.2], "1": [0.5, 0.3]}}}
    record = {**cal, "host": host, "request_path": {"colocated_s": 0.0125, "disaggregated_s": 0.025}}

    def host_of(rec=record, **kw):
        return build_cluster(sf.sim_config_for("hybrid adaptive", load("hybrid.yaml"), rec, model_dir, **kw),
                             "hybrid adaptive").host
    drawn = host_of(host_form="stretch-draws", draw_seed=5)
    # each probe's TTFT beside streams over its own probe's median alone, sorted
    assert drawn.load_stretch_draws == pytest.approx((1.2, 1.4, 1.6))
    assert drawn.load_stretch_beside_draws == pytest.approx((1.5, 2.5))
    assert drawn == replace(host_of(host_form="decode-neighbour+mix"),
                            load_stretch_draws=drawn.load_stretch_draws,
                            load_stretch_beside_draws=drawn.load_stretch_beside_draws, draw_seed=5)
    # the hardware measurements' draws, pooled over alike deployments, before the record's own probes
    pooled = {**record, "host": {**host, "load_stretch_draws": [1.05, 1.9]}}
    assert host_of(pooled, host_form="stretch-draws").load_stretch_draws == (1.05, 1.9)
    with pytest.raises(ValueError, match="prompts alone and beside streams"):
        host_of({**record, "host": {k: v for k, v in host.items() if not k.startswith("load_probe")}},
                host_form="stretch-draws")


# An own-streams+mix host, as a deployment's measurements give it
OWN_STREAMS_HOST = {"num_cores": 2, "step_excess_1_s": 0.001, "step_excess_2_s": 0.002, "step_excess_alone_s": 0.0005,
                    "step_excess_batch": [[4, 0.003]], "load_stretch": [[1, 1.3]], "load_stretch_beside": [[1, 1.5]],
                    "decode_beside_prefill": [[1, 0.004]], "cpu_s_per_request": 0.01,
                    "step_excess_mix": [[1, 0.002], [4, 0.005]]}


def _own_streams_record(cal: dict) -> dict:
    return {**cal, "host": OWN_STREAMS_HOST, "request_path": {"colocated_s": 0.0125, "disaggregated_s": 0.025}}


def test_the_step_scatter_form_is_own_streams_with_mix_and_the_probe_steps_draws(cal, model_dir):
    record = _own_streams_record(cal)
    scatter = {"step_scatter_prefill": [0.8, 1.0, 1.5], "step_scatter_decode": [0.9, 1.0, 2.0]}

    def host_of(**kw):
        return build_cluster(sf.sim_config_for("hybrid adaptive", load("hybrid.yaml"), record, model_dir, **kw),
                             "hybrid adaptive").host
    drawn = host_of(host_form="step-scatter", scatter=scatter, scatter_seed=7)
    assert drawn == replace(host_of(host_form="own-streams+mix"), step_scatter_prefill=(0.8, 1.0, 1.5),
                            step_scatter_decode=(0.9, 1.0, 2.0), scatter_seed=7)
    assert host_of(host_form="own-streams+mix", scatter=scatter).step_scatter_prefill == ()  # other forms: none
    with pytest.raises(ValueError, match="needs the probe steps' scatter"):
        host_of(host_form="step-scatter")
    # the top-up form is the same host, its draws shrunk by the scatter its base form simulates
    assert host_of(host_form="scatter-top-up", scatter=scatter, scatter_seed=7) == drawn
    # the probes' stalls come with their scatter, drawn from the run's seed; stalls given replace them
    stalls = {"stall_per_prefill_step": 0.003, "stall_excess_s": [0.3, 0.5]}
    stalling = host_of(host_form="scatter-top-up", scatter={**scatter, **stalls}, scatter_seed=7)
    assert stalling == replace(drawn, stall_per_prefill_step=0.003, stall_excess_s=(0.3, 0.5), stall_seed=7)
    # the probe-stretch form takes the probe steps' stretch at every count the load probe measured;
    # the other scattering forms leave the load probe's
    stretched = host_of(host_form="probe-stretch", scatter={**scatter, STRETCH_KEY: 1.2}, scatter_seed=7)
    assert stretched == replace(drawn, load_stretch=((1, 1.2),))
    assert host_of(host_form="scatter-top-up", scatter={**scatter, STRETCH_KEY: 1.2}, scatter_seed=7) == drawn
    assert host_of(host_form="probe-stretch", scatter=scatter, scatter_seed=7) == drawn  # none given: as measured
    # the probe-excess forms take the probe steps' excess beside another engine's prefill, probe-steps
    # the stretch as well; the others leave the bursts' excess
    probed = {**scatter, STRETCH_KEY: 1.2, EXCESS_KEY: 0.0007}
    assert host_of(host_form="probe-excess", scatter=probed, scatter_seed=7) == replace(
        drawn, step_excess_beside_prefill_s=0.0007)
    assert host_of(host_form="probe-steps", scatter=probed, scatter_seed=7) == replace(
        drawn, load_stretch=((1, 1.2),), step_excess_beside_prefill_s=0.0007)
    assert host_of(host_form="scatter-top-up", scatter=probed, scatter_seed=7) == drawn
    assert host_of(host_form="probe-stretch", scatter=probed, scatter_seed=7) == stretched
    # without the draws (a top-up form's base): the probe medians, and neither the draws nor the probes' stalls
    assert host_of(host_form="probe-steps", scatter={**probed, **stalls}, scatter_seed=7, draws=False) == replace(
        host_of(host_form="own-streams+mix"), load_stretch=((1, 1.2),), step_excess_beside_prefill_s=0.0007)
    assert host_of(host_form="scatter-top-up", scatter=probed, draws=False) == host_of(host_form="own-streams+mix")
    events = {"stall_per_prefill_step": 0.01, "stall_excess_s": [2.0], "stall_seed": 11}
    given = host_of(host_form="scatter-top-up", scatter={**scatter, **stalls}, scatter_seed=7, stalls=events)
    assert given == replace(drawn, stall_per_prefill_step=0.01, stall_excess_s=(2.0,), stall_seed=11)


def test_the_probe_length_forms_are_probe_steps_with_the_length_probes_points_as_a_ratio(cal, model_dir):
    # hybrid's engine that streams on run 112: no stretch at the load probe's 1,024 tokens, which
    # the length form refuses and the probe-length forms take
    model = sf.step_model_from_calibration(cal)
    engine_s = {256: 1.1 * model.predict(256), 3584: 0.9 * sum(model.chunked_prefill_steps_s(3584, 0, 2048))}
    probe = {"streams": 1, "route": "colocated", "points": [[256, 1.03], [1536, 0.88], [3584, 0.95]],
             "engine_s": {str(n): {"0": [t], "1": [t]} for n, t in engine_s.items()}}
    record = {**cal, "host": {**OWN_STREAMS_HOST, "length_probe": probe, "load_probe": {"probe_prompt_tokens": 1024}},
              "request_path": {"colocated_s": 0.0125, "disaggregated_s": 0.025}}
    probed = {"step_scatter_prefill": [0.8, 1.0, 1.5], "step_scatter_decode": [0.9, 1.0, 2.0], EXCESS_KEY: 0.0007}

    def host_of(form, rec=record):
        return build_cluster(sf.sim_config_for("hybrid adaptive", load("hybrid.yaml"), rec, model_dir,
                                               host_form=form, scatter=probed, scatter_seed=7), "hybrid adaptive").host
    by_length = host_of("probe-length")
    assert by_length == replace(host_of("probe-steps"), length_stretch=((256, 1.03), (1536, 0.88), (3584, 0.95)),
                                length_reference_tokens=1024, length_shape="ratio")
    alone = host_of("probe-length-alone")
    assert alone == replace(by_length, length_alone=alone.length_alone)
    assert [n for n, _ in alone.length_alone] == [256, 3584]
    assert [f for _, f in alone.length_alone] == pytest.approx([1.1, 0.9])
    with pytest.raises(ValueError, match="no stretch at the reference length"):  # the excess shape refuses it
        replace(by_length, length_shape="excess")
    with pytest.raises(ValueError, match="--host probe-steps"):  # a record from before the length probe
        host_of("probe-length", {**record, "host": OWN_STREAMS_HOST})


def test_the_top_up_form_draws_less_than_the_probes_and_other_forms_draw_as_given(cal, model_dir):
    record = _own_streams_record(cal)
    scatter = {"step_scatter_prefill": [0.7, 0.9, 1.0, 1.2, 2.0], "step_scatter_decode": [0.7, 0.9, 1.0, 1.2, 2.0]}
    deployment, model = load("hybrid.yaml"), sf.step_model_from_calibration(cal)
    work = rates_workload(6.0, 60, 16)
    args = ("hybrid adaptive", deployment, record, model_dir, model, work)
    assert sf.run_scatter("step-scatter", scatter, *args) is scatter
    assert sf.run_scatter("scatter-top-up", None, *args) is None
    topped = sf.run_scatter("scatter-top-up", scatter, *args)
    for key, values in scatter.items():
        assert statistics.median(topped[key]) == pytest.approx(1.0)
        assert topped[key][0] >= values[0] and topped[key][-1] <= values[-1]
    assert topped != scatter


def test_a_top_up_forms_base_is_the_same_form_without_its_draws(cal, model_dir, monkeypatch):
    record = _own_streams_record(cal)
    scatter = {"step_scatter_prefill": [0.7, 0.9, 1.0, 1.2, 2.0], "step_scatter_decode": [0.7, 0.9, 1.0, 1.2, 2.0],
               EXCESS_KEY: 0.0007}
    deployment, model = load("hybrid.yaml"), sf.step_model_from_calibration(cal)
    asked = []
    real = sf.sim_config_for

    def spy(*args, **kw):
        asked.append((args[4], args[7] if len(args) > 7 else kw.get("scatter"), kw.get("draws", True)))
        return real(*args, **kw)
    monkeypatch.setattr(sf, "sim_config_for", spy)
    sf.run_scatter("probe-steps", scatter, "hybrid adaptive", deployment, record, model_dir, model,
                   rates_workload(6.0, 60, 16))
    # the base keeps the probe medians (here the excess beside a prefill), not own-streams+mix's host
    assert asked == [("probe-steps", scatter, False)]


def test_a_runs_scattered_config_is_its_base_config_with_the_runs_draws(cal, model_dir):
    record = _own_streams_record(cal)
    scatter = {"step_scatter_prefill": [0.7, 0.9, 1.0, 1.2, 2.0], "step_scatter_decode": [0.7, 0.9, 1.0, 1.2, 2.0]}
    deployment, model = load("hybrid.yaml"), sf.step_model_from_calibration(cal)
    work = rates_workload(6.0, 60, 16)
    head = ("hybrid adaptive", deployment, record, model_dir)
    # a form that scatters nothing is sim_config_for's config; a top-up form's carries run_scatter's draws
    assert sf.scattered_config(*head, "own-streams+mix", model, work, scatter) == sf.sim_config_for(*head)
    config = sf.scattered_config(*head, "scatter-top-up", model, work, scatter, scatter_seed=3)
    topped = sf.run_scatter("scatter-top-up", scatter, *head, model, work)
    host = build_cluster(config, "hybrid adaptive").host
    assert host.step_scatter_prefill == tuple(topped["step_scatter_prefill"]) and host.scatter_seed == 3


def test_the_default_form_scatters_where_the_sweep_saved_engine_steps_and_says_so_where_not(tmp_path, capsys):
    saved, unsaved = tmp_path / "round_0" / "colocated", tmp_path / "round_1" / "colocated"
    saved.mkdir(parents=True)
    unsaved.mkdir(parents=True)
    (saved / "engine_steps.json").write_text("{}")
    assert sf.host_form_for("step-scatter", [unsaved], "tool") == "step-scatter"  # asked: as asked
    assert sf.host_form_for(None, [saved], "tool") == sf.DEFAULT_HOST_FORM
    assert capsys.readouterr().err == ""
    assert sf.host_form_for(None, [saved, unsaved], "tool") == sf.NO_STEPS_HOST_FORM
    err = capsys.readouterr().err
    assert err.startswith(f"tool: host form {sf.NO_STEPS_HOST_FORM}, not the default") and str(unsaved) in err
    assert sf.host_form_for(None, [], "tool") == sf.NO_STEPS_HOST_FORM
    assert "no deployment folder" in capsys.readouterr().err
    summary = {"round_dirs": ["round_0", "round_1"], "summaries": {"colocated": {}}, "systems": {"colocated": "c.yaml",
                                                                                                "hybrid": "h.yaml"}}
    assert sf.sweep_system_dirs(tmp_path / "summary.json", summary) == [saved, unsaved]  # hybrid never ran


def test_a_flat_stretch_or_a_shared_growth_is_refused_outside_the_hardware_form(tmp_path, capsys):
    live = tmp_path / "summary.json"
    live.write_text(json.dumps({"experiment": "rates", "rates": [1.0], "summaries": {}}))
    assert sf.main(["--live", str(live), "--measurements", "own", "--stretch", "flat"]) == 2
    assert "--stretch applies to --measurements hardware" in capsys.readouterr().err
    assert sf.main(["--live", str(live), "--measurements", "own", "--growth", "shared"]) == 2
    assert "--growth applies to --measurements hardware" in capsys.readouterr().err


def test_the_load_probe_goes_to_an_engine_that_streams_where_there_is_one():
    assert sf.load_probe_route({"both"}) == "colocated"
    assert sf.load_probe_route({"both", "prefill"}) == "colocated"  # hybrid: not to its idle prefill engine
    assert sf.load_probe_route({"prefill", "decode"}) == "auto"  # disaggregated: every probe goes there


def test_the_mix_growth_form_is_prefill_neighbour_with_the_single_decode_engines_growth(cal, model_dir):
    host = {"num_cores": 2, "step_excess_1_s": 0.001, "step_excess_2_s": 0.002, "step_excess_alone_s": 0.0005,
            "step_excess_batch": [[4, 0.003]], "load_stretch": [[1, 1.3]], "load_stretch_beside": [[1, 1.5]],
            "decode_beside_prefill": [[1, 0.004]], "cpu_s_per_request": 0.01, "cpu_s_per_token": 0.002,
            "stretch_beside_prefill": 1.25}
    mix = [[1, 0.002], [2, 0.003], [4, 0.006]]
    record = {**cal, "host": {**host, "step_excess_mix": mix, "step_excess_mix_context_tokens": 700.0},
              "request_path": {"colocated_s": 0.0125, "disaggregated_s": 0.025}}

    def host_of(label, config, form, rec=record):
        return build_cluster(sf.sim_config_for(label, load(config), rec, model_dir, host_form=form), label).host
    for label, config in (("disaggregated", "disaggregated.yaml"), ("hybrid adaptive", "hybrid.yaml")):
        grown = host_of(label, config, "mix-growth")
        assert grown == replace(host_of(label, config, "prefill-neighbour"),
                                step_excess_mix=((1, 0.002), (2, 0.003), (4, 0.006)))
        with pytest.raises(ValueError, match="--host prefill-neighbour"):  # a record from before it was measured
            host_of(label, config, "mix-growth", {**record, "host": host})
    assert host_of("disaggregated", "disaggregated.yaml", "prefill-neighbour").step_excess_mix == ()
    # Two engines decode on colocated: the probe does not run there, and nothing is missing.
    assert host_of("colocated", "colocated.yaml", "mix-growth", {**record, "host": host}) == host_of(
        "colocated", "colocated.yaml", "prefill-neighbour", {**record, "host": host})
    assert "decode step in loops of the mix +2.00 ms with 1, +3.00 ms with 2, +6.00 ms with 4" in sf._calibration_line(
        record)
    assert decode_engines({"prefill": 1, "both": 1}) == 1 and decode_engines({"both": 2}) == 2


# what path-beside reads, as measured since stop 39, and the load probe's prompt length
PATH_BESIDE_HOST = {
    "num_cores": 2, "step_excess_1_s": 0.001, "step_excess_2_s": 0.002, "step_excess_alone_s": 0.0005,
    "step_excess_batch": [[4, 0.003]], "load_stretch": [[1, 1.3]], "load_stretch_beside": [[1, 1.5]],
    "decode_beside_prefill": [[1, 0.004]], "decode_beside_handover": [[1, 0.005]], "cpu_s_per_request": 0.01,
    "cpu_s_per_token": 0.002, "stretch_beside_prefill": 1.25, "step_excess_quiet_s": 0.0004,
    "step_excess_spin_s": 0.0006, "step_excess_mix": [[1, 0.002], [4, 0.005]],
    "path_beside_streams": [[0, 0.01], [2, 0.016]], "load_probe": {"probe_prompt_tokens": 1024}}


def test_the_length_form_is_path_beside_with_the_stretch_by_prompt_length(cal, model_dir):
    host = PATH_BESIDE_HOST
    probes = {"length_probe": {"streams": 2, "points": [[256, 1.8], [1536, 1.5], [3584, 1.4]]},
              "length_probe_beside": {"streams": 1, "points": [[256, 1.2], [1536, 1.3], [3584, 1.6]]}}
    record = {**cal, "host": {**host, **probes}, "request_path": {"colocated_s": 0.0125, "disaggregated_s": 0.025}}

    def host_of(label, config, form, rec=record):
        return build_cluster(sf.sim_config_for(label, load(config), rec, model_dir, host_form=form), label).host
    by_length = ((256, 1.8), (1536, 1.5), (3584, 1.4))
    assert host_of("hybrid adaptive", "hybrid.yaml", "length") == replace(
        host_of("hybrid adaptive", "hybrid.yaml", "path-beside"), length_stretch=by_length,
        length_stretch_beside=((256, 1.2), (1536, 1.3), (3584, 1.6)), length_reference_tokens=1024)
    streaming_only = {**record, "host": {**host, "length_probe": probes["length_probe"]}}  # no prefill-only engine
    assert host_of("colocated", "colocated.yaml", "length", streaming_only) == replace(
        host_of("colocated", "colocated.yaml", "path-beside"), length_stretch=by_length, length_reference_tokens=1024)
    assert host_of("colocated", "colocated.yaml", "path-beside").length_stretch == ()
    with pytest.raises(ValueError, match="--host path-beside"):  # a record from before it was measured
        host_of("colocated", "colocated.yaml", "length", {**record, "host": host})
    no_load_probe = {k: v for k, v in record["host"].items() if k != "load_probe"}
    with pytest.raises(ValueError, match="load probe's prompt length"):
        host_of("colocated", "colocated.yaml", "length", {**record, "host": no_load_probe})
    assert ("prefill beside 2 stream(s) by prompt length x1.80 at 256, x1.50 at 1536, x1.40 at 3584; prefill on "
            "the prefill-only engine beside 1 stream(s) by prompt length x1.20 at 256") in sf._calibration_line(record)


def test_the_length_alone_form_takes_the_probes_alone_parts_over_the_calibrated_steps(cal, model_dir):
    host = PATH_BESIDE_HOST
    model = sf.step_model_from_calibration(cal)
    # alone: 1.1x the calibrated steps at 256 tokens, 0.9x at 3,584 in 2,048-token chunks (colocated.yaml)
    colocated_s = {256: 1.1 * model.predict(256), 3584: 0.9 * sum(model.chunked_prefill_steps_s(3584, 0, 2048))}
    probe = {"streams": 2, "route": "colocated", "points": [[256, 1.8], [3584, 1.4]],
             "engine_s": {str(n): {"0": [t, 2 * t, t / 2], "2": [3 * t]} for n, t in colocated_s.items()}}
    record = {**cal, "host": {**host, "length_probe": probe},
              "request_path": {"colocated_s": 0.0125, "disaggregated_s": 0.025}}

    def host_of(label, config, form, rec=record):
        return build_cluster(sf.sim_config_for(label, load(config), rec, model_dir, host_form=form), label).host
    alone = host_of("colocated", "colocated.yaml", "length-alone")
    assert alone == replace(host_of("colocated", "colocated.yaml", "length"), length_alone=alone.length_alone)
    assert [n for n, _ in alone.length_alone] == [256, 3584]
    assert [f for _, f in alone.length_alone] == pytest.approx([1.1, 0.9])
    # On the disaggregated route the probe prefilled on the prefill-only engine: one step of 3,584.
    disagg = {**probe, "route": "disaggregated",
              "engine_s": {"256": {"0": [model.predict(256)]}, "3584": {"0": [model.predict(3584)]}}}
    one_step = host_of("disaggregated", "disaggregated.yaml", "length-alone",
                       {**record, "host": {**host, "length_probe": disagg}})
    assert [f for _, f in one_step.length_alone] == pytest.approx([1.0, 1.0])
    unchunked = EngineSpec(enable_chunked_prefill=False, max_num_batched_tokens=8192, max_model_len=8192)
    assert unchunked.prefill_cap(3584) == 3584
    assert EngineSpec(max_num_batched_tokens=2048, long_prefill_token_threshold=512).prefill_cap(3584) == 512
    assert EngineSpec(max_num_batched_tokens=2048).prefill_cap(3584) == 3584  # the budget caps it then

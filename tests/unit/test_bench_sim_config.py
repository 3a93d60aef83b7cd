"""Simulation configs and the `python -m bench.simulate` command."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench import simulate as cli
from bench.simulator import SimConfigError, build_cluster, build_policy, load_sim_config, sim_config_from_dict
from bench.simulator.sweep import run_sweep
from schedulers.policies import AdaptivePolicy

CONFIG_DIR = Path(__file__).resolve().parents[2] / "configs"
SIM_CONFIGS = sorted(CONFIG_DIR.glob("sim_*.yaml"))
MINIMAL = {"policies": {"colocated": {"workers": {"both": 1}}}}


def with_(**changes):
    return {**MINIMAL, **changes}


def test_there_are_several_configs():
    assert len(SIM_CONFIGS) >= 4


@pytest.mark.parametrize("path", SIM_CONFIGS, ids=lambda p: p.name)
def test_every_shipped_config_loads_and_builds(path):
    config = load_sim_config(path)
    for label in config.policies:
        cluster = build_cluster(config, label)
        assert build_policy(config, label, cluster).decide


@pytest.mark.parametrize("data, message", [
    (with_(engine={"max_num_batchd_tokens": 2048}), "engine.max_num_batchd_tokens: unknown key"),
    (with_(hardwares="h100"), "hardwares: unknown key"),
    (with_(hardware="tpu"), "hardware: unknown hardware 'tpu'"),
    (with_(model="llama-9"), "model: unknown model 'llama-9'"),
    (with_(link={"preset": "carrier_pigeon"}), "unknown link preset 'carrier_pigeon'"),
    (with_(link={"alpha_s": 0.001}), "give a preset, or both alpha_s and bandwidth_bytes_per_s"),
    ({"policies": {"fastest": {"workers": {"both": 1}}}}, "unknown policy 'fastest'"),
    ({"policies": {"colocated": {"workers": {"gpu": 1}}}}, "unknown role"),
    ({"policies": {"colocated": {"workers": {"prefill": 1}}}}, "'decode' or 'both' is needed"),
    ({"policies": {"length_threshold": {"workers": {"both": 2}, "params": {"threshold": 5}}}},
     "policies.length_threshold: policy 'length_threshold' does not take"),
    (with_(workload={"name": "sharegpt", "params": {"rate": 2}}), "workload 'sharegpt' does not take"),
    (with_(rates_per_s=[1, 0]), "rates_per_s"),
    (with_(role_engine={"prefill": {"budget": 1}}), "unknown engine key"),
    (with_(slo={"ttft_buckets": [[4096, 0.2]]}), "end with exactly one"),
    (with_(model="llama-3-70b", hardware="h100"), "raise tensor_parallel_size"),
    (with_(engine={"enable_chunked_prefill": False, "max_num_batched_tokens": 2048}),
     "when enable_chunked_prefill is false"),
    (with_(request_path={"colocated_s": -0.01}), "request_path.colocated_s"),
    (with_(request_path={"router_s": 0.01}), "request_path.router_s: unknown key"),
    ([1, 2], "top level must be a mapping"),
])
def test_bad_configs_name_the_key(data, message):
    with pytest.raises(SimConfigError, match=message):
        sim_config_from_dict(data)


def test_the_request_path_reaches_the_cluster():
    config = sim_config_from_dict(with_(request_path={"colocated_s": 0.012, "disaggregated_s": 0.03}))
    path = build_cluster(config, "colocated").request_path
    assert (path.colocated_s, path.disaggregated_s) == (0.012, 0.03)
    assert path.handover_s == pytest.approx(0.018)
    assert build_cluster(sim_config_from_dict(MINIMAL), "colocated").request_path.colocated_s == 0.0


def test_the_adaptive_policy_gets_the_simulated_cost_model_and_slos():
    config = sim_config_from_dict({"hardware": "h200", "engine": {"max_num_batched_tokens": 1024},
                                   "slo": {"ttft_buckets": [[None, 0.5]], "tpot_slo_s": 0.05},
                                   "policies": {"adaptive": {"workers": {"both": 2}}}})
    cluster = build_cluster(config, "adaptive")
    policy = build_policy(config, "adaptive", cluster)
    assert isinstance(policy, AdaptivePolicy)
    assert policy.step_model is cluster.step_model and policy.chunk_tokens == 1024
    assert policy.slo_table.tpot_slo_s == 0.05


def test_tensor_parallel_engines_are_faster_and_hold_more_kv():
    # 70B weights are 131 GiB: 2 x 140 GiB x 0.9 leaves 121 GiB for KV, 4 x 140 GiB x 0.9 leaves 373.
    two = sim_config_from_dict(with_(model="llama-3-70b", hardware="h200", tensor_parallel_size=2))
    four = sim_config_from_dict(with_(model="llama-3-70b", hardware="h200", tensor_parallel_size=4))
    assert four.step_model(16).predict(4096) < 0.6 * two.step_model(16).predict(4096)
    assert four.engine_spec("both").num_kv_blocks > 3 * two.engine_spec("both").num_kv_blocks


def test_a_batch_workload_runs_once_per_policy():
    config = load_sim_config(CONFIG_DIR / "sim_llama3_8b_a100_seed_batch.yaml")
    runs = run_sweep(config)
    assert [r.rate_per_s for r in runs] == [None] * len(config.policies)
    by_label = {r.label: r.summary["per_bucket"] for r in runs}
    # The seeds' effect: without chunking the short prompts wait behind the long one.
    assert by_label["no_chunking"]["short"]["ttft_s"]["mean"] > by_label["no_chunking"]["long"]["ttft_s"]["mean"]
    assert by_label["chunk_2048_long512"]["short"]["ttft_s"]["mean"] < by_label["no_chunking"]["short"]["ttft_s"]["mean"]


def test_cli_runs_a_small_sweep_and_writes_a_summary(tmp_path, capsys):
    out = tmp_path / "out"
    code = cli.main(["--config", str(CONFIG_DIR / "sim_llama3_8b_h100_ib.yaml"), "--policy", "colocated,disaggregated",
                     "--rates", "2,4", "--num-requests", "60", "--hardware", "h200", "--link", "eth_25g",
                     "--records", "--out", str(out)])
    assert code == 0
    printed = capsys.readouterr().out
    assert "on h200" in printed and "link eth_25g" in printed and "### 4 req/s" in printed
    summary = json.loads((out / "summary.json").read_text())
    assert [(r["label"], r["rate_per_s"]) for r in summary["runs"]] == [
        ("colocated", 2.0), ("disaggregated", 2.0), ("colocated", 4.0), ("disaggregated", 4.0)]
    assert all(r["summary"]["num_requests"] == 60 and r["sim"]["num_leaked_blocks"] == 0 for r in summary["runs"])
    assert (out / "summary.md").exists()
    records = json.loads((out / "records" / "disaggregated_4.json").read_text())
    assert len(records) == 60 and records[0]["route"] == "disaggregated"


@pytest.mark.parametrize("argv, message", [
    (["--rates", "1,x"], "bad rate 'x'"),
    (["--policy", "nope"], "not in the config"),
])
def test_cli_reports_bad_input(argv, message, capsys):
    code = cli.main(["--config", str(CONFIG_DIR / "sim_llama3_8b_h100_ib.yaml"), *argv])
    assert code == 2 and message in capsys.readouterr().err


def test_cli_names_a_missing_config(capsys):
    assert cli.main(["--config", "/nonexistent.yaml"]) == 2
    assert "not found" in capsys.readouterr().err

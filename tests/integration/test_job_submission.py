"""Ray job submission, as the README documents it: a local `ray start --head` cluster,
`ray job submit --working-dir . -- pd-serve up --detach`, the SDK against the deployment,
`pd-serve status` and `pd-serve down`, and nothing left running afterwards."""
from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
NAME = "pd-job-test"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _run(*cmd: str, env: dict, timeout: float = 600) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, env=env, cwd=ROOT, capture_output=True, text=True, timeout=timeout)


@pytest.fixture(scope="module")
def cluster():
    import ray

    assert not ray.is_initialized(), "another test left Ray running in this process"
    env = dict(os.environ, RAY_AUTH_MODE="disabled", RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER="0",
               RAY_worker_niceness="0",  # as the README starts it: engines at normal priority
               PATH=f"{BIN}:{os.environ.get('PATH', '')}", PD_SERVE_DEVICE="cpu")
    env.pop("RAY_ADDRESS", None)
    gcs_port, dash_port = _free_port(), _free_port()
    started = _run(str(BIN / "ray"), "start", "--head", f"--port={gcs_port}", "--num-cpus=2",
                   "--include-dashboard=true", f"--dashboard-port={dash_port}",
                   "--dashboard-host=127.0.0.1", "--disable-usage-stats", env=env, timeout=180)
    assert started.returncode == 0, started.stderr[-2000:]
    gcs, dashboard = f"127.0.0.1:{gcs_port}", f"http://127.0.0.1:{dash_port}"
    try:
        yield {"gcs": gcs, "dashboard": dashboard, "env": env}
    finally:
        _run(str(BIN / "pd-serve"), "down", "--name", NAME, "--address", gcs, env=env, timeout=180)
        _run(str(BIN / "ray"), "stop", "--force", env=env, timeout=120)


def test_job_submission_deploys_serves_and_comes_down_cleanly(cluster):
    env, gcs = cluster["env"], cluster["gcs"]
    job = _run(str(BIN / "ray"), "job", "submit", "--address", cluster["dashboard"],
               "--working-dir", ".", "--", "pd-serve", "up", "--config", "configs/hybrid.yaml",
               "--detach", "--name", NAME, "--grpc-port", "0", "--http-port", "0", env=env, timeout=900)
    assert job.returncode == 0, (job.stdout[-3000:], job.stderr[-3000:])
    assert f"deployment '{NAME}' is up (detached)" in job.stdout

    st = _run(str(BIN / "pd-serve"), "status", "--name", NAME, "--address", gcs, "--json", env=env)
    assert st.returncode == 0, st.stderr[-2000:]
    status = json.loads(st.stdout.strip().splitlines()[-1])
    assert {w["role"] for w in status["workers"].values()} == {"prefill", "both"}
    assert all(w["healthy"] for w in status["workers"].values()) and status["grpc"]
    assert all(w["niceness"] == 0 for w in status["workers"].values()), status["workers"]

    from pd_serve import Client

    client = Client(status["grpc"])
    r = client.generate(prompt_token_ids=list(range(40, 140)), max_tokens=5, ignore_eos=True,
                        route="disaggregated")
    assert len(r.token_ids) == 5 and r.route == "disaggregated" and r.kv_transfer_bytes > 0
    text = _run(str(BIN / "pd-serve"), "status", "--name", NAME, "--address", gcs, env=env)
    assert text.returncode == 0 and "up" in text.stdout, text.stderr[-2000:]
    # The router learned from that prefill how fast its engines run against their calibration.
    assert "prefills against the calibration, by requests in flight on the host: x" in text.stdout
    assert "(from 0 prefills)" not in text.stdout, text.stdout

    engine_pids = _engine_pids(gcs)
    assert engine_pids
    dn = _run(str(BIN / "pd-serve"), "down", "--name", NAME, "--address", gcs, env=env, timeout=300)
    assert dn.returncode == 0, dn.stderr[-2000:]
    assert f"deployment '{NAME}' is down" in dn.stdout
    deadline = time.time() + 30
    while time.time() < deadline and any(_alive(p) for p in engine_pids):
        time.sleep(0.5)
    assert not [p for p in engine_pids if _alive(p)], "engine processes left behind"
    left = _run(str(BIN / "pd-serve"), "status", "--name", NAME, "--address", gcs, env=env)
    assert left.returncode == 2 and "no deployment named" in left.stderr


def _alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def _engine_pids(gcs: str) -> list[int]:
    """The deployment's engine processes, asked of its worker actors through the cluster."""
    code = ("import json, ray; ray.init(address=%r, namespace='pd_serve', log_to_driver=False);"
            "r = ray.get_actor(%r); hs = ray.get(r.handles.remote());"
            "print(json.dumps([p for h in hs.values() for p in ray.get(h.child_pids.remote())]))"
            % (gcs, NAME + ":router"))
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                         cwd=ROOT, env=dict(os.environ, RAY_AUTH_MODE="disabled"))
    assert out.returncode == 0, out.stderr[-2000:]
    return json.loads(out.stdout.strip().splitlines()[-1])

"""A worker whose engine never finishes starting is replaced once (pd_serve/deployment.py
`_start_engines`), with actors that stand in for workers: no engine, so it runs in seconds.

vLLM waits without a timeout for its NIXL handshake listener, which dies when its port is taken
before it binds it; a clean clone's tests hung for 15 minutes on it. A fresh worker draws a fresh
port, so one restart is the remedy; a second miss must fail with the late workers' names."""
from __future__ import annotations

import time
from pathlib import Path

import psutil
import pytest
import ray

from pd_serve.deployment import EngineStartTimeout, _start_engines

pytestmark = pytest.mark.integration

TIMEOUT_S = 3.0


@ray.remote
class StandInWorker:
    """start() hangs (as vLLM does) while `hang_file` holds a count above zero, counting it down;
    it leaves a child process behind as vLLM's engine core would."""

    def __init__(self, name: str, hang_file: str) -> None:
        self.name, self.hang_file = name, Path(hang_file)

    def start(self) -> str:
        import subprocess
        hangs = int(self.hang_file.read_text()) if self.hang_file.exists() else 0
        if hangs > 0:
            self.hang_file.write_text(str(hangs - 1))
            child = subprocess.Popen(["sleep", "600"])
            self.hang_file.with_suffix(".child").write_text(str(child.pid))
            time.sleep(3600)  # blocks the actor as AsyncLLM.from_engine_args does
        return f"{self.name} started"


@pytest.fixture(scope="module")
def ray_cluster():
    ray.init(address="local", num_cpus=4, include_dashboard=False, log_to_driver=False)
    yield
    ray.shutdown()


def _deploy(tmp_path: Path, hangs: dict[str, int]):
    files = {wid: tmp_path / f"{wid}.hangs" for wid in ("prefill-0", "decode-0")}
    for wid, n in hangs.items():
        files[wid].write_text(str(n))

    def new_worker(wid: str):
        return StandInWorker.options(num_cpus=0).remote(wid, str(files[wid]))

    workers = {wid: new_worker(wid) for wid in files}
    return workers, new_worker, files


def test_a_worker_that_hangs_once_is_replaced_and_its_engine_process_ends(ray_cluster, tmp_path):
    workers, new_worker, files = _deploy(tmp_path, {"decode-0": 1})
    first = workers["decode-0"]
    infos = _start_engines(workers, new_worker, TIMEOUT_S)
    assert infos == {"prefill-0": "prefill-0 started", "decode-0": "decode-0 started"}
    assert list(infos) == list(workers)  # the deployment's worker order
    assert workers["decode-0"] is not first  # the caller's dict holds the replacement
    orphan = int(files["decode-0"].with_suffix(".child").read_text())
    assert not psutil.pid_exists(orphan) or psutil.Process(orphan).status() == psutil.STATUS_ZOMBIE


def test_a_worker_that_hangs_twice_fails_the_start_naming_it(ray_cluster, tmp_path):
    workers, new_worker, _ = _deploy(tmp_path, {"prefill-0": 2})
    t0 = time.monotonic()
    with pytest.raises(EngineStartTimeout, match=r"prefill-0 did not start .* within 3 s"):
        _start_engines(workers, new_worker, TIMEOUT_S)
    assert time.monotonic() - t0 < 4 * TIMEOUT_S
    for w in workers.values():
        ray.kill(w, no_restart=True)

"""A deploy that fails after its engines started leaves nothing behind on a cluster that lives on:
no worker actor, no engine process, no shared-memory segment (pd_serve/deployment.py
`_stop_workers`). A killed engine does not unlink its /dev/shm segments; a failed detached deploy
once left four, 830 MB, in a clean clone's tests. One real engine, made to fail in calibration.
"""
from __future__ import annotations

from pathlib import Path

import psutil
import pytest
import ray

import pd_serve.deployment as deployment
from pd_serve import deploy
from pd_serve.shm_leftovers import PREFIXES

pytestmark = pytest.mark.integration

CONFIG = {
    "name": "fails-in-calibration",
    "workers": {"both": {"count": 1, "engine": {"max_model_len": 2048, "kv_cache_gib": 0.5},
                         "resources": {"num_cpus": 1}}},
    "transfer": {"backend": "auto"},
    "scheduler": {"policy": "colocated", "calibrate": True},
}


def _engine_segments() -> set[Path]:
    return {p for p in Path("/dev/shm").iterdir() if p.name.startswith(PREFIXES)}


class CalibrationFailed(RuntimeError):
    pass


def test_a_deploy_that_fails_after_its_engines_started_leaves_nothing(monkeypatch):
    before = _engine_segments()
    seen: dict = {}

    def fail_calibration(workers, infos, *args, **kwargs):
        # What the engines hold at the moment of failure, to check that it is all gone after.
        seen["workers"] = dict(workers)
        seen["pids"] = deployment._engine_child_pids(workers)
        seen["segments"] = deployment._engine_shm_segments(workers)
        raise CalibrationFailed("calibration failed on purpose")

    monkeypatch.setattr(deployment, "calibrate_engines", fail_calibration)
    assert deployment.init_ray()  # a cluster of the test's own, which outlives the deploy
    try:
        with pytest.raises(CalibrationFailed):
            deploy(CONFIG)
        assert seen["pids"] and seen["segments"], seen  # the engine had started: there was something to leave
        assert ray.is_initialized()  # the deploy did not own the cluster: it is still there
        for pid in seen["pids"]:
            assert not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE, pid
        for worker in seen["workers"].values():
            with pytest.raises(ray.exceptions.RayActorError):
                ray.get(worker.child_pids.remote(), timeout=30)
        assert not [p for p in seen["segments"] if Path(p).exists()]
        assert not _engine_segments() - before
    finally:
        ray.shutdown()

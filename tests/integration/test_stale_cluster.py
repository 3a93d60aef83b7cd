"""A Ray cluster killed without `ray stop` leaves its address in /tmp/ray/ray_current_cluster.
Ray's own ray.init() then waits for that dead GCS forever; pd-serve must start its own cluster
(deploy) or say at once that nothing answers (status/down)."""
from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]  # closed again when the block ends: nothing listens there


@pytest.fixture
def stale_address_file():
    from ray._common.utils import get_ray_address_file

    path = Path(get_ray_address_file(None))
    saved = path.read_text() if path.exists() else None
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f"127.0.0.1:{_closed_port()}")
    yield path
    if saved is None:
        path.unlink(missing_ok=True)
    else:
        path.write_text(saved)


def _python(code: str, timeout_s: float) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=timeout_s, env=env, stdin=subprocess.DEVNULL)


@pytest.mark.timeout(180)
def test_local_start_ignores_a_dead_clusters_address_file(stale_address_file):
    out = _python("import ray\nfrom pd_serve.deployment import init_ray\n"
                  "print('started', init_ray())\n"
                  "print('cpus', ray.cluster_resources().get('CPU'))\nray.shutdown()\n", 150)
    assert out.returncode == 0, out.stderr[-2000:]
    assert "started True" in out.stdout
    assert "cpus " in out.stdout and "cpus None" not in out.stdout


@pytest.mark.timeout(60)
def test_status_against_a_dead_cluster_fails_fast_and_says_so(stale_address_file):
    from ray._private.services import find_gcs_addresses

    dead = stale_address_file.read_text()
    out = _python(f"from pd_serve.detached import connect\nconnect({dead!r})\n", 45)
    assert out.returncode != 0 and "does not answer" in out.stderr and dead in out.stderr
    if find_gcs_addresses():  # Ray's "auto" prefers a live cluster to the file, rightly
        pytest.skip("another Ray cluster runs on this machine: the address file is not consulted")
    out = _python("from pd_serve.detached import connect\nconnect(None)\n", 45)
    assert out.returncode != 0 and "does not answer" in out.stderr and dead in out.stderr

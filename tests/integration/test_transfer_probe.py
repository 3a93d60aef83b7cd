"""A real NIXL probe between two Ray actors over host memory on this machine."""
from __future__ import annotations

import json
import os
import threading
import time

import pytest

os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")  # every Ray listener on loopback

ray = pytest.importorskip("ray")
pytest.importorskip("nixl")

from transfer.kv_geometry import KVGeometry  # noqa: E402
from transfer.link_model import LinkModelRegistry  # noqa: E402
from transfer.probe import ProbeSettings, run_probe_between  # noqa: E402
from transfer.probe_actor import ProbeActor  # noqa: E402
from transfer.probe_host import AsyncProbeHost, ProbeHost  # noqa: E402
from transfer.probe_layout import BlockLayout  # noqa: E402
from transfer.probe_report import format_probe_table, load_probe_json, write_probe_json  # noqa: E402

# A small Llama-like model: 8 layers x 4 KV heads x 64 dims x bf16, 16-token blocks:
# 8 KiB per token, 128 KiB per block, 16 KiB descriptors; 4,096 tokens = 256 blocks = 32 MiB,
# the largest request.
GEOMETRY = KVGeometry(num_layers=8, num_kv_heads=4, head_dim=64, dtype_bytes=2, block_size=16)
MAX_NUM_TOKENS = 4096


@pytest.fixture(scope="module")
def ray_cluster():
    ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False,
             runtime_env={"env_vars": {"RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0"}})
    yield
    ray.shutdown()


@pytest.mark.integration
@pytest.mark.timeout(120)
def test_probe_between_two_actors_fits_a_positive_bandwidth(ray_cluster, tmp_path):
    prefill, decode = ProbeActor.remote(), ProbeActor.remote()
    layout = BlockLayout.from_geometry(GEOMETRY, MAX_NUM_TOKENS)
    assert layout.num_blocks == 256 and layout.desc_bytes == 16 << 10

    result = run_probe_between(prefill, decode, layout, prefill_id="p0", decode_id="d0",
                               settings=ProbeSettings(num_reps=5, max_seconds=10.0))
    print(format_probe_table(result))

    assert result.is_verified
    assert result.mem_type == "DRAM"
    assert [s.num_blocks for s in result.sizes] == [1, 2, 4, 8, 16, 32, 64, 128, 256]
    assert result.sizes[-1].num_descs == 256 * 8  # one descriptor per block per layer
    # Host-to-host over UCX measured 1-6 GB/s here; anything from 50 MB/s to 100 GB/s is sane.
    assert 5e7 < result.fit.beta_bytes_per_s < 1e11
    assert 0.0 <= result.fit.alpha_s < 0.05
    assert result.memcpy_bytes_per_s > 1e8

    path = str(tmp_path / "links.json")
    write_probe_json(path, [result])
    data = load_probe_json(path)
    pair = data["pairs"][0]
    assert {"alpha_s", "beta_bytes_per_s", "samples", "memcpy_bytes_per_s"} <= set(pair)
    json.dumps(data)
    registry = LinkModelRegistry()
    registry.load_probe_results(data)
    assert registry.predict("p0", "d0", 16 << 20) == pytest.approx(result.fit.predict(16 << 20))

    ray.get([prefill.probe_close.remote(), decode.probe_close.remote()])


@ray.remote(num_cpus=0)
class ServingLikeProbeActor(ProbeHost):
    """Hosts its endpoint in a child process, as a pd-serve worker does."""

    probe_in_child = True

    def loaded(self) -> list[str]:
        """The NIXL and UCX libraries mapped into this actor's own process."""
        with open("/proc/self/maps") as maps:
            return sorted({line.split()[-1] for line in maps if "nixl" in line or "libuc" in line
                           or "plugin_UCX" in line})

    def child_pid(self) -> int | None:
        return self._probe_endpoint.pid if self._probe_endpoint is not None else None


@pytest.mark.integration
@pytest.mark.timeout(180)
def test_a_probe_hosted_in_child_processes_measures_the_link_and_leaves_nothing_behind(ray_cluster):
    prefill, decode = ServingLikeProbeActor.remote(), ServingLikeProbeActor.remote()
    layout = BlockLayout.from_geometry(GEOMETRY, MAX_NUM_TOKENS)
    settings = ProbeSettings(num_reps=3, max_seconds=5.0)
    result = run_probe_between(prefill, decode, layout, prefill_id="p0", decode_id="d0", settings=settings)
    assert result.is_verified
    assert 5e7 < result.fit.beta_bytes_per_s < 1e11
    children = ray.get([prefill.child_pid.remote(), decode.child_pid.remote()])
    assert all(pid and os.path.exists(f"/proc/{pid}") for pid in children)
    # The other way over the same endpoints, as a deployment's link probe does: the reader of
    # the first pair, whose reads overwrote its blocks, is the source now and must hand out its
    # pattern again, or the byte check fails.
    back = run_probe_between(decode, prefill, layout, prefill_id="d0", decode_id="p0", settings=settings)
    assert back.is_verified
    assert ray.get([prefill.child_pid.remote(), decode.child_pid.remote()]) == children  # no new children
    ray.get([prefill.probe_close.remote(), decode.probe_close.remote()])
    # the children are gone, and NIXL and UCX never loaded into the actors' own processes
    assert not any(os.path.exists(f"/proc/{pid}") and _is_running(pid) for pid in children)
    assert ray.get([prefill.loaded.remote(), decode.loaded.remote()]) == [[], []]


def _is_running(pid: int) -> bool:
    """True unless the process is a zombie (ended, not yet reaped) or gone."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


@pytest.mark.integration
@pytest.mark.timeout(120)
def test_a_child_endpoint_that_cannot_start_says_why_and_a_closed_one_refuses_calls():
    from transfer.probe_child import ChildEndpoint, ChildEndpointError

    layout = BlockLayout.from_geometry(GEOMETRY, 256)
    with pytest.raises(ChildEndpointError, match="start failed"):
        ChildEndpoint(layout, device="cuda:99")  # no such GPU here, or anywhere
    endpoint = ChildEndpoint(layout)
    pid = endpoint.pid
    assert endpoint.info().layout == layout
    with pytest.raises(AttributeError, match="no method"):
        endpoint._call("close_everything")
    endpoint.close()
    assert not _is_running(pid)
    with pytest.raises(ChildEndpointError, match="closed"):
        endpoint.connect(endpoint.info())


@pytest.mark.integration
@pytest.mark.timeout(180)
def test_two_fresh_processes_probe_with_their_own_environment_and_end_with_it():
    from transfer.nixl_endpoint import AgentOptions
    from transfer.probe_child import ChildEndpointError
    from transfer.probe_processes import probe_between_processes

    layout = BlockLayout.from_geometry(GEOMETRY, 1024)
    # Without NIXL's progress thread: the source's child keeps its agent going between calls.
    result = probe_between_processes(layout, settings=ProbeSettings(num_reps=2, max_seconds=5.0),
                                     options=AgentOptions(enable_prog_thread=False),
                                     env={"UCX_LOG_LEVEL": "error"})
    assert result.is_verified and 5e7 < result.fit.beta_bytes_per_s < 1e11
    # The environment reaches the children before UCX starts: one it cannot serve is refused there.
    with pytest.raises(ChildEndpointError, match="probe child start failed"):
        probe_between_processes(layout, env={"UCX_TLS": "no_such_transport"}, startup_timeout_s=60.0)


@ray.remote(num_cpus=0)
class AsyncServingProbeActor(AsyncProbeHost):
    """An async actor that serves while it is probed, as a pd-serve worker does."""

    probe_in_child = True

    async def ping(self) -> bool:
        return True


@pytest.mark.integration
@pytest.mark.timeout(180)
def test_an_async_actor_keeps_answering_while_it_is_probed(ray_cluster):
    prefill, decode = AsyncServingProbeActor.remote(), AsyncServingProbeActor.remote()
    ray.get([prefill.ping.remote(), decode.ping.remote()])
    gaps, done = [], threading.Event()

    def keep_pinging() -> None:
        last = time.monotonic()
        while not done.is_set():
            ray.get([prefill.ping.remote(), decode.ping.remote()])
            now = time.monotonic()
            gaps.append(now - last)
            last = now
            time.sleep(0.02)

    pinger = threading.Thread(target=keep_pinging, daemon=True)
    pinger.start()
    try:
        layout = BlockLayout.from_geometry(GEOMETRY, MAX_NUM_TOKENS)
        result = run_probe_between(prefill, decode, layout, prefill_id="p0", decode_id="d0",
                                   settings=ProbeSettings(num_reps=3, max_seconds=3.0))
    finally:
        done.set()
        pinger.join()
        ray.get([prefill.probe_close.remote(), decode.probe_close.remote()])
    assert result.is_verified and result.fit.beta_bytes_per_s > 5e7
    # the probe spawned two child processes and swept for seconds; the actors answered all along
    # (a held loop would leave a gap as long as the child's start, 1-3 s here)
    assert len(gaps) > 20 and max(gaps) < 0.5, (len(gaps), max(gaps))

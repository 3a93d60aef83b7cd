"""NIXL READ bandwidth between two processes on host memory, next to memcpy, and what limits it.

    python -m bench.nixl_bandwidth                       # default variant: table NIXL vs memcpy
    python -m bench.nixl_bandwidth --variant tcp --variant shm_tcp
    python -m bench.nixl_bandwidth --all --json out.json # every variant, one summary table
    python -m bench.nixl_bandwidth --list

Each variant runs in a fresh pair of processes (UCX reads its environment once per process): a
source that registers a buffer and waits, and a reader that READs from it over a 1..64 MiB sweep,
each READ followed by a memcpy of the same size (both see the same load on a shared host), and
times registration and request set-up. Columns: "descs" requested, "posted" after NIXL merged
neighbours, "NIXL ms" wall time from request to DONE, "xfer ms" NIXL's own telemetry.
Every process is killed after `--variant-timeout-s`.
"""
from __future__ import annotations

import argparse
import json
import logging
import multiprocessing as mp
import os
import sys
import time
from dataclasses import asdict, dataclass, field
from typing import Any

logger = logging.getLogger(__name__)

MIB = 1 << 20
# One KV block of a Llama-3.2-1B-like model: 16 layers x 8 KV heads x 64 dims x bf16 x (K, V)
# x 16 tokens = 512 KiB, as 16 descriptors of 32 KiB; 1 MiB is 2 blocks, 64 MiB is 128.
NUM_LAYERS = 16
BLOCK_BYTES = NUM_LAYERS * 8 * 64 * 2 * 2 * 16


@dataclass(frozen=True)
class Variant:
    """One configuration to measure; `env` is applied before NIXL/UCX start in both processes."""

    name: str
    what: str
    env: dict[str, str] = field(default_factory=dict)
    unset_env: tuple[str, ...] = ()
    desc_bytes: int = BLOCK_BYTES // NUM_LAYERS  # one descriptor per block per layer, as vLLM
    block_order: str = "scattered"
    poll_interval_s: float = 0.0
    num_threads: int = 4
    enable_prog_thread: bool = True
    in_process: bool = False


VARIANTS = {v.name: v for v in [
    Variant("default", "UCX_TLS unset, per-block descriptors, busy poll (what vLLM gets)"),
    Variant("tcp", "UCX_TLS=tcp: loopback TCP only", env={"UCX_TLS": "tcp"}),
    Variant("shm_tcp", "UCX_TLS=shm,tcp", env={"UCX_TLS": "shm,tcp"}),
    Variant("sm_tcp", "UCX_TLS=sm,tcp", env={"UCX_TLS": "sm,tcp"}),
    Variant("cma_tcp", "UCX_TLS=cma,tcp: process_vm_readv, one copy", env={"UCX_TLS": "cma,tcp"}),
    Variant("posix_tcp", "UCX_TLS=posix,tcp: shared-memory segments",
            env={"UCX_TLS": "posix,tcp"}),
    Variant("self_tcp", "UCX_TLS=self,tcp (self only serves a process talking to itself)",
            env={"UCX_TLS": "self,tcp"}),
    Variant("no_lo", "UCX_NET_DEVICES unset (UCX picks devices)", unset_env=("UCX_NET_DEVICES",)),
    Variant("desc_8k", "8 KiB descriptors (a model with 4x the layers)", desc_bytes=8 << 10),
    Variant("desc_128k", "128 KiB descriptors (4 layers)", desc_bytes=128 << 10),
    Variant("desc_1m", "1 MiB descriptors, scattered", desc_bytes=MIB),
    Variant("contiguous", "32 KiB descriptors on contiguous blocks (NIXL merges them)",
            block_order="contiguous"),
    Variant("one_desc", "one descriptor per transfer (1 MiB ones, contiguous, merged)",
            desc_bytes=MIB, block_order="contiguous"),
    Variant("poll_sleep_50us", "sleep 50 us between polls", poll_interval_s=50e-6),
    Variant("poll_sleep_1ms", "sleep 1 ms between polls (like a per-step check)",
            poll_interval_s=1e-3),
    Variant("threads_0", "NIXL num_threads=0 (UCX backend default)", num_threads=0),
    Variant("no_prog_thread", "NIXL progress thread off; the source polls notifications itself",
            enable_prog_thread=False),
    Variant("in_process", "both agents in one process (no inter-process transport)",
            in_process=True),
]}


def _layout(variant: Variant, max_bytes: int) -> Any:
    from transfer.probe_layout import BlockLayout

    block_bytes = max(BLOCK_BYTES, variant.desc_bytes)
    return BlockLayout.for_bytes(max_bytes, num_layers=block_bytes // variant.desc_bytes,
                                 block_bytes=block_bytes)


def _apply_env(variant: Variant) -> None:
    for key in variant.unset_env:
        os.environ.pop(key, None)
    os.environ.update(variant.env)
    if "UCX_NET_DEVICES" not in variant.unset_env:
        os.environ.setdefault("UCX_NET_DEVICES", "lo")


def _options(variant: Variant) -> Any:
    from transfer.nixl_endpoint import AgentOptions

    return AgentOptions(num_threads=variant.num_threads,
                        enable_prog_thread=variant.enable_prog_thread)


def _source_main(conn: Any, variant: Variant, max_bytes: int) -> None:
    _apply_env(variant)
    from transfer.nixl_endpoint import ProbeEndpoint

    endpoint = ProbeEndpoint(_layout(variant, max_bytes), "cpu", "bench-src", _options(variant))
    conn.send(endpoint.info())
    # Wait for the reader to finish; closing before would pull the memory from under it.
    # Without a progress thread nobody answers the reader's wire-up unless we poll.
    while not conn.poll(1e-4 if not variant.enable_prog_thread else 1.0):
        if not variant.enable_prog_thread:
            endpoint.agent.get_new_notifs()
    conn.recv()
    endpoint.close()


def _reader_main(conn: Any, variant: Variant, max_bytes: int, reps: int, max_seconds: float) -> None:
    _apply_env(variant)
    from transfer.nixl_endpoint import ProbeEndpoint

    layout = _layout(variant, max_bytes)
    reader = ProbeEndpoint(layout, "cpu", "bench-dst", _options(variant))
    source = None
    if variant.in_process:
        source = ProbeEndpoint(layout, "cpu", "bench-src", _options(variant))
        source_info = source.info()
    else:
        source_info = conn.recv()
    conn.send(_measure(reader, source_info, layout, variant, max_bytes, reps, max_seconds))


def _measure(reader: Any, source_info: Any, layout: Any, variant: Variant, max_bytes: int,
             reps: int, max_seconds: float) -> dict[str, Any]:
    from transfer.link_model import fit_link
    from transfer.probe_records import summarize_copies, summarize_reads

    sizes_bytes = [MIB << i for i in range(8) if MIB << i <= max_bytes]
    start = time.perf_counter()
    remote = reader.connect(source_info)
    connect_s = time.perf_counter() - start
    first = reader.read(remote, [0], [0])  # first READ pays the UCX connection
    is_verified = reader.verify(remote)
    samples, copies = _sweep(reader, remote, layout, variant, sizes_bytes, reps, max_seconds)
    fit = fit_link([(s.num_bytes, s.seconds) for s in samples])
    by_size_posted = {s.num_bytes: s.num_descs_posted for s in samples}
    nixl_xfer = _median_by_size([(s.num_bytes, s.nixl_xfer_s) for s in samples if s.nixl_xfer_s])
    return {
        "variant": asdict(variant),
        "ucx_tls": os.environ.get("UCX_TLS", "(unset)"),
        "is_verified": is_verified,
        "setup_s": reader.setup_s,
        "connect_s": connect_s,
        "first_read_s": first.seconds,
        "reads": [s.to_dict() for s in summarize_reads(samples)],
        "descs_posted": by_size_posted,
        "nixl_xfer_median_s": nixl_xfer,
        "copies": [s.to_dict() for s in summarize_copies(copies)],
        "fit": {"alpha_s": fit.alpha_s, "beta_bytes_per_s": fit.beta_bytes_per_s, "r2": fit.r2},
        "costs": _costs(reader, remote, layout) if variant.name == "default" else None,
    }


def _sweep(reader: Any, remote: str, layout: Any, variant: Variant, sizes_bytes: list[int],
           reps: int, max_seconds: float) -> tuple[list[Any], list[tuple[int, float]]]:
    """READ and memcpy of each size back to back, so both see the same load on a shared host."""
    from transfer.probe_layout import pick_block_ids

    scratch = reader.buffer.make_scratch(max(sizes_bytes))
    deadline = time.perf_counter() + max_seconds
    samples, copies = [], []
    for pass_index in range(1 + reps):  # pass 0 warms up and is dropped
        for size_index, num_bytes in enumerate(sizes_bytes):
            if time.perf_counter() > deadline:
                return samples, copies
            num_blocks = num_bytes // layout.bytes_per_block
            seed = 7919 * pass_index + size_index
            sample = reader.read(
                remote, pick_block_ids(num_blocks, layout.num_blocks, variant.block_order, seed),
                pick_block_ids(num_blocks, layout.num_blocks, variant.block_order, seed + 1),
                poll_interval_s=variant.poll_interval_s)
            copy_s = reader.buffer.time_copy(num_bytes, scratch)
            if pass_index > 0:
                samples.append(sample)
                copies.append((num_bytes, copy_s))
    return samples, copies


def _median_by_size(pairs: list[tuple[int, float]]) -> dict[int, float]:
    import statistics

    by_size: dict[int, list[float]] = {}
    for num_bytes, seconds in pairs:
        by_size.setdefault(num_bytes, []).append(seconds)
    return {b: statistics.median(ts) for b, ts in by_size.items()}


def _costs(reader: Any, remote: str, layout: Any) -> dict[str, Any]:
    """One-off and per-request costs: registering memory and building a READ request."""
    import numpy as np

    register = {}
    for size in (MIB, 16 * MIB, 64 * MIB):
        array = np.ones(size, dtype=np.uint8)  # touched: registration, not page faults
        start = time.perf_counter()
        descs = reader.agent.register_memory([(array.ctypes.data, size, 0, "")], "DRAM")
        register[size] = time.perf_counter() - start
        reader.agent.deregister_memory(descs)
    make_request = {}
    for num_blocks in (1, 8, 32):
        if num_blocks > layout.num_blocks:
            continue
        ids = np.asarray(layout.desc_ids(list(range(num_blocks))), dtype=np.int32)
        start = time.perf_counter()
        for _ in range(20):
            handle = reader.agent.make_prepped_xfer("READ", reader._local_dlist, ids,
                                                    reader._remotes[remote].dlist, ids)
            handle.release()
        make_request[len(ids)] = (time.perf_counter() - start) / 20
    return {"register_s_by_bytes": register, "make_request_s_by_descs": make_request}


def run_variant(variant: Variant, max_bytes: int, reps: int, max_seconds: float,
                timeout_s: float) -> dict[str, Any]:
    ctx = mp.get_context("spawn")
    reader_conn, reader_child = ctx.Pipe()
    procs = [ctx.Process(target=_reader_main, daemon=True,
                         args=(reader_child, variant, max_bytes, reps, max_seconds))]
    if not variant.in_process:
        source_conn, source_child = ctx.Pipe()
        procs.append(ctx.Process(target=_source_main, args=(source_child, variant, max_bytes),
                                 daemon=True))
    for p in procs:
        p.start()
    try:
        if not variant.in_process:
            _wait(source_conn, procs[1], timeout_s, f"{variant.name}: source start")
            reader_conn.send(source_conn.recv())
        _wait(reader_conn, procs[0], timeout_s, f"{variant.name}: reader")
        result = reader_conn.recv()
        if not variant.in_process:
            source_conn.send("done")
        return result
    finally:
        for p in procs:
            p.join(5)
            if p.is_alive():
                p.kill()


def _wait(conn: Any, process: Any, timeout_s: float, what: str) -> None:
    """Until `conn` has a message; fails fast if the process died instead of answering."""
    deadline = time.perf_counter() + timeout_s
    while not conn.poll(0.2):
        if not process.is_alive():
            raise RuntimeError(f"{what}: process exited with code {process.exitcode}")
        if time.perf_counter() > deadline:
            raise TimeoutError(f"{what}: no answer in {timeout_s} s")


def format_side_by_side(result: dict[str, Any]) -> str:
    copies = {c["num_bytes"]: c for c in result["copies"]}
    lines = [f"variant {result['variant']['name']}: {result['variant']['what']} "
             f"(UCX_TLS={result['ucx_tls']}, verified={result['is_verified']})",
             f"{'size':>8} {'descs':>6} {'posted':>6} {'NIXL ms':>8} {'p90 ms':>7} {'xfer ms':>7} "
             f"{'NIXL GB/s':>9} {'memcpy GB/s':>11} {'ratio':>6}"]
    for r in result["reads"]:
        copy = copies.get(r["num_bytes"])
        copy_gbs = copy["gb_per_s"] if copy else float("nan")
        posted = result["descs_posted"].get(r["num_bytes"])
        xfer_s = result["nixl_xfer_median_s"].get(r["num_bytes"], float("nan"))
        lines.append(f"{r['num_bytes'] // MIB:>5} MiB {r['num_descs']:>6} {posted or '-':>6} "
                     f"{r['median_s'] * 1e3:>8.3f} {r['p90_s'] * 1e3:>7.3f} {xfer_s * 1e3:>7.3f} "
                     f"{r['gb_per_s']:>9.2f} {copy_gbs:>11.2f} {r['gb_per_s'] / copy_gbs:>6.2f}")
    fit = result["fit"]
    lines.append(f"fit alpha={fit['alpha_s'] * 1e6:.1f} us beta={fit['beta_bytes_per_s'] / 1e9:.2f}"
                 f" GB/s r2={fit['r2']:.3f}; agent+register {result['setup_s'] * 1e3:.0f} ms, "
                 f"connect {result['connect_s'] * 1e3:.1f} ms, first READ "
                 f"{result['first_read_s'] * 1e3:.1f} ms")
    if result.get("costs"):
        costs = result["costs"]
        lines.append("register_memory: " + ", ".join(
            f"{int(b) // MIB} MiB {s * 1e3:.2f} ms" for b, s in costs["register_s_by_bytes"].items()))
        lines.append("make_prepped_xfer: " + ", ".join(
            f"{n} descs {s * 1e6:.0f} us" for n, s in costs["make_request_s_by_descs"].items()))
    return "\n".join(lines)


def format_summary(results: list[dict[str, Any]]) -> str:
    sizes = [MIB, 4 * MIB, 16 * MIB, 64 * MIB]
    head = " ".join(f"{s // MIB:>3}MiB" for s in sizes)
    lines = [f"{'variant':<16} {head}  (NIXL GB/s)   memcpy@64  alpha us  beta GB/s"]
    for r in results:
        if "error" in r:
            lines.append(f"{r['variant']['name']:<16} failed: {r['error']}")
            continue
        reads = {x["num_bytes"]: x["gb_per_s"] for x in r["reads"]}
        copies = {x["num_bytes"]: x["gb_per_s"] for x in r["copies"]}
        cells = " ".join(f"{reads.get(s, float('nan')):>6.2f}" for s in sizes)
        lines.append(f"{r['variant']['name']:<16} {cells}               "
                     f"{copies.get(64 * MIB, float('nan')):>6.2f}  {r['fit']['alpha_s'] * 1e6:>8.1f}"
                     f"  {r['fit']['beta_bytes_per_s'] / 1e9:>9.2f}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--variant", action="append", choices=sorted(VARIANTS),
                        help="variant to run (repeatable); default: default")
    parser.add_argument("--all", action="store_true", help="run every variant")
    parser.add_argument("--list", action="store_true", help="list variants and exit")
    parser.add_argument("--max-mib", type=int, default=64)
    parser.add_argument("--reps", type=int, default=7)
    parser.add_argument("--max-seconds", type=float, default=8.0, help="sweep budget per variant")
    parser.add_argument("--variant-timeout-s", type=float, default=60.0)
    parser.add_argument("--json", help="write all results here")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(name)s %(message)s")
    if args.list:
        for v in VARIANTS.values():
            print(f"{v.name:<16} {v.what}")
        return 0
    names = list(VARIANTS) if args.all else (args.variant or ["default"])
    results = []
    for name in names:
        start = time.perf_counter()
        try:
            result = run_variant(VARIANTS[name], args.max_mib * MIB, args.reps, args.max_seconds,
                                 args.variant_timeout_s)
            print(format_side_by_side(result), f"\n({time.perf_counter() - start:.1f} s)\n",
                  flush=True)
        except Exception as e:  # one broken transport must not hide the others' numbers
            logger.exception("variant %s failed", name)
            result = {"variant": asdict(VARIANTS[name]), "error": repr(e)}
        results.append(result)
    if len(results) > 1:
        print(format_summary(results))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1, default=str)
    return 0 if all("error" not in r for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())

"""NIXL link probe between two processes on GPU memory (VRAM): one short run on a GPU machine.

    python -m bench.gpu_link_probe                          # Llama-3.1-8B KV, cuda:0 -> cuda:0
    python -m bench.gpu_link_probe --reader-device cuda:1   # across two GPUs
    python -m bench.gpu_link_probe --tls unset --tls cuda_copy,tcp   # compare UCX transports

Two fresh processes each hold a KV-shaped VRAM buffer; the reader READs from the source as
vLLM's NixlConnector does (one descriptor per block per layer), over a sweep from one block to
the largest request, and copies the same sizes device-to-device for a baseline. Prints a table
per run and writes JSON to $OUT/gpu_link_probe.json when OUT is set (or to --json).
Fails at once, with the reason, where there is no CUDA device or no NIXL.
`--device cpu` runs the same plumbing on host memory (a dry run for machines without a GPU).
"""
from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import time
from dataclasses import asdict

from transfer.kv_geometry import KVGeometry

logger = logging.getLogger(__name__)

# Llama-3.1-8B in bf16: 32 layers x 8 KV heads x 128 dims: 128 KiB per token, 2 MiB per block.
DEFAULT_GEOMETRY = dict(num_layers=32, num_kv_heads=8, head_dim=128, dtype_bytes=2, block_size=16)


def check_environment(devices: list[str]) -> str | None:
    """Why this machine cannot run the probe, or None when it can."""
    cuda_devices = [d for d in devices if d.startswith("cuda")]
    if cuda_devices:
        reason = _check_cuda(cuda_devices)
        if reason:
            return reason
    try:
        import nixl  # noqa: F401
    except ImportError as e:
        return f"nixl is not importable ({e}): pip install nixl (its CUDA wheel)"
    return None


def _check_cuda(devices: list[str]) -> str | None:
    try:
        import torch
    except ImportError:
        return "torch is not installed: the GPU probe allocates VRAM with torch"
    if not torch.cuda.is_available():
        return (f"no CUDA device visible to torch (torch {torch.__version__}, "
                f"CUDA build {torch.version.cuda}): run this on a GPU machine")
    for device in devices:
        index = int(device.split(":")[1]) if ":" in device else 0
        if index >= torch.cuda.device_count():
            return f"{device} asked for but only {torch.cuda.device_count()} CUDA device(s) exist"
    return None


def _geometry(args: argparse.Namespace) -> KVGeometry:
    if args.model_config:
        with open(args.model_config) as f:
            return KVGeometry.from_hf_config(json.load(f), block_size=args.block_size)
    return KVGeometry(**{**DEFAULT_GEOMETRY, "block_size": args.block_size})


def _tls_env(tls: str) -> dict[str, str | None]:
    # "unset" leaves UCX to choose (cuda_ipc within a node); never set UCX_TLS empty.
    return {"UCX_TLS": None} if tls == "unset" else {"UCX_TLS": tls}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda:0", help="source (prefill) device")
    parser.add_argument("--reader-device", default=None, help="reader (decode) device")
    parser.add_argument("--model-config", help="HF config.json for the KV geometry")
    parser.add_argument("--block-size", type=int, default=16)
    parser.add_argument("--max-num-tokens", type=int, default=32768,
                        help="largest request; sets the top of the sweep")
    parser.add_argument("--max-buffer-gib", type=float, default=2.0, help="cap per endpoint")
    parser.add_argument("--regions-per-layer", type=int, default=1,
                        help="2 for KV layouts that keep K and V in separate tensors")
    parser.add_argument("--block-order", default="scattered", choices=["scattered", "contiguous"])
    parser.add_argument("--fit-weighting", default="relative",
                        choices=["relative", "sqrt", "absolute"])
    parser.add_argument("--reps", type=int, default=7)
    parser.add_argument("--max-seconds", type=float, default=30.0, help="budget per run")
    parser.add_argument("--tls", action="append", help="UCX_TLS per run ('unset' = UCX picks)")
    parser.add_argument("--proto-info", action="store_true",
                        help="UCX_PROTO_INFO=y: UCX prints the protocol it picks (to stderr)")
    parser.add_argument("--json", help="JSON path (default $OUT/gpu_link_probe.json)")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")

    reason = check_environment([args.device, args.reader_device or args.device])
    if reason:
        print(f"gpu_link_probe: cannot run: {reason}", file=sys.stderr)
        return 2

    from transfer.probe import ProbeSettings
    from transfer.probe_layout import BlockLayout
    from transfer.probe_processes import probe_between_processes
    from transfer.probe_report import format_probe_table, probe_json

    geometry = _geometry(args)
    layout = BlockLayout.from_geometry(geometry, args.max_num_tokens, args.regions_per_layer,
                                       int(args.max_buffer_gib * (1 << 30)))
    settings = ProbeSettings(num_reps=args.reps, max_seconds=args.max_seconds,
                             block_order=args.block_order, fit_weighting=args.fit_weighting)
    results, runs = [], []
    for tls in args.tls or ["unset"]:
        env = _tls_env(tls)
        if args.proto_info:
            env["UCX_PROTO_INFO"] = "y"
        start = time.perf_counter()
        try:
            result = probe_between_processes(
                layout, args.device, args.reader_device, settings, env=env,
                prefill_id=f"{args.device}", decode_id=f"{args.reader_device or args.device}")
        except Exception as e:  # report the other transports even if one cannot run
            print(f"UCX_TLS={tls}: probe failed: {e}", file=sys.stderr)
            runs.append({"ucx_tls": tls, "error": str(e)})
            continue
        print(f"\n== UCX_TLS={tls} ({time.perf_counter() - start:.1f} s)")
        print(format_probe_table(result), flush=True)
        results.append(result)
        runs.append({"ucx_tls": tls, "pair_index": len(results) - 1})

    path = args.json or (os.path.join(os.environ["OUT"], "gpu_link_probe.json")
                         if os.environ.get("OUT") else None)
    if path:
        meta = {"geometry": asdict(geometry), "layout": layout.to_dict(), "runs": runs,
                "argv": sys.argv[1:]}
        with open(path, "w") as f:
            json.dump(probe_json(results, meta), f, indent=1)
        print(f"wrote {path}")
    return 0 if results and len(results) == len(runs) else 1


if __name__ == "__main__":
    sys.exit(main())

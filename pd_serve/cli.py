"""The `pd-serve` command: up, generate, demo, cost."""
from __future__ import annotations

import argparse
import json
import logging
import os
import signal
import sys
import threading

DEFAULT_CONFIG = "configs/hybrid.yaml"


def _cmd_up(args: argparse.Namespace) -> int:
    from pd_serve import deploy

    if args.detach:
        return _up_detached(args)
    dep = deploy(args.config, address=args.address, **_frontend_kwargs(args))  # [frontdoors]
    print(f"pd-serve: deployment '{dep.config.name}' ready in {dep.start_s:.1f}s with workers "
          + ", ".join(f"{w} ({i.role})" for w, i in dep.infos.items()) + f" ({dep.phases_text()})", flush=True)
    if dep.addresses is not None:  # [frontdoors]
        print(f"pd-serve: gRPC at {dep.addresses.grpc or 'off'}, OpenAI-compatible HTTP at "
              f"{dep.addresses.http_url or 'off'} (token {'required' if args.token else 'off'})",
              flush=True)
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    try:
        stop.wait()
    finally:
        print("pd-serve: shutting down", flush=True)
        dep.shutdown()
    return 0


def _up_detached(args: argparse.Namespace) -> int:
    """Deploy named, detached actors on the running cluster and return (for `ray job submit`)."""
    from pd_serve import deploy
    from pd_serve.config import load_config
    from pd_serve.detached import connect, list_deployments

    name = args.name or load_config(args.config).name
    connect(args.address)
    if name in list_deployments():
        print(f"pd-serve: a deployment named {name!r} is already running; `pd-serve down --name "
              f"{name}` first, or pass another --name", file=sys.stderr)
        return 2
    dep = deploy(args.config, detached_name=name, **_frontend_kwargs(args))
    print(f"pd-serve: deployment '{name}' is up (detached) in {dep.start_s:.1f}s: "
          + ", ".join(f"{w} ({i.role})" for w, i in dep.infos.items()), flush=True)
    if dep.addresses is not None:
        print(f"pd-serve: gRPC at {dep.addresses.grpc or 'off'}, HTTP at {dep.addresses.http_url or 'off'}",
              flush=True)
    print(f"pd-serve: `pd-serve status --name {name}` / `pd-serve down --name {name}`", flush=True)
    return 0


def _cmd_status(args: argparse.Namespace) -> int:
    from pd_serve.detached import connect, resolve_name, status

    connect(args.address)
    st = status(resolve_name(args.name))
    if args.json:
        print(json.dumps(st, default=str))
        return 0
    print(f"deployment {st['name']}: policy {st['policy']}, gRPC {st['grpc'] or 'off'}, "
          f"HTTP {st['http'] or 'off'}")
    for wid, w in st["workers"].items():
        load = w.get("load", {})
        print(f"  {wid:<12} {w['role']:<8} {'up' if w['healthy'] else 'DOWN':<5} running "
              f"{load.get('num_running', '-')} waiting {load.get('num_waiting', '-')} "
              f"KV {load.get('kv_cache_usage', 0.0):.2f}")
    print(f"  counters: {st['counters']}")
    speed = st.get("speed_feedback")
    if speed:  # the router's speed line (schedulers/feedback.py): prefill time over calibrated, by load
        factors = ", ".join(f"x{f:.2f} at {n}" for n, f in speed["factor_by_inflight"].items())
        print(f"  prefills against the calibration, by requests in flight on the host: {factors} "
              f"(from {speed['observed']} prefills)")
        by_role = ", ".join(f"{role} x{f:.2f}" for role, f in speed.get("role_factors", {}).items())
        if by_role:
            print(f"  each kind of engine against its host's factor: {by_role}")
    return 0


def _cmd_down(args: argparse.Namespace) -> int:
    from pd_serve.detached import connect, down, resolve_name

    connect(args.address)
    name = resolve_name(args.name)
    removed = down(name)
    print(f"pd-serve: deployment '{name}' is down ({len(removed)} actors removed)")
    return 0


def _frontend_kwargs(args: argparse.Namespace) -> dict:  # [frontdoors]
    return {"grpc_port": None if args.no_grpc else args.grpc_port,
            "http_port": None if args.no_http else args.http_port,
            "host": args.host, "token": args.token}


def _add_frontend_args(p: argparse.ArgumentParser) -> None:  # [frontdoors]
    from pd_serve.frontend.settings import (DEFAULT_GRPC_PORT, DEFAULT_HOST, DEFAULT_HTTP_PORT,
                                            TOKEN_ENV)

    p.add_argument("--host", default=DEFAULT_HOST,
                   help=f"address the servers bind (default {DEFAULT_HOST}; 0.0.0.0 for all)")
    p.add_argument("--grpc-port", type=int, default=DEFAULT_GRPC_PORT,
                   help=f"gRPC API port (default {DEFAULT_GRPC_PORT}; 0: any free port)")
    p.add_argument("--http-port", type=int, default=DEFAULT_HTTP_PORT,
                   help=f"OpenAI-compatible HTTP port (default {DEFAULT_HTTP_PORT}; 0: any free port)")
    p.add_argument("--no-grpc", action="store_true", help="run no gRPC server")
    p.add_argument("--no-http", action="store_true", help="run no HTTP server")
    p.add_argument("--token", default=os.environ.get(TOKEN_ENV) or None,
                   help=f"require 'authorization: Bearer <token>' on every call (default: ${TOKEN_ENV})")


def _cmd_generate(args: argparse.Namespace) -> int:
    from pd_serve import deploy
    from pd_serve.report import RESULT_HEADERS, format_table, result_row

    with deploy(args.config, address=args.address) as dep:
        r = None
        for item in dep.stream(prompt=args.prompt, max_tokens=args.max_tokens,
                               temperature=args.temperature, route=args.route):
            if item["type"] == "result":
                r = item["result"]
        assert r is not None
        print(r.text)
        print(format_table(RESULT_HEADERS, [result_row("prompt", args.route, r)]))
        if args.json:
            print(json.dumps(r.to_dict()))
    return 0


def _cmd_transfer_probe(args: argparse.Namespace) -> int:
    """Deploy, probe every prefill->decode link with NIXL beside a memcpy baseline, tear down."""
    from pd_serve import deploy
    from pd_serve.config import load_config
    from pd_serve.link_probe import probe_links
    from transfer.probe_report import format_probe_table, write_probe_json

    cfg = load_config(args.config)
    cfg = cfg.model_copy(update={
        "scheduler": cfg.scheduler.model_copy(update={"calibrate": False, "policy": "length_threshold",
                                                      "params": {}}),
        "transfer": cfg.transfer.model_copy(update={"probe_at_start": False, "handshake_warmup": False})})
    with deploy(cfg, address=args.address) as dep:
        results = probe_links(dep.workers, dep.infos, cfg.resolved_device, args.max_seconds)
    if not results:
        print("pd-serve: this deployment has no prefill->decode pair to probe", file=sys.stderr)
        return 2
    for r in results:
        print(format_probe_table(r))
        print()
    if args.json:
        write_probe_json(args.json, results, {"config": args.config})
        print(f"wrote {args.json}")
    return 0


def _cmd_demo(args: argparse.Namespace) -> int:
    from pd_serve.demo import run_demo
    return run_demo(args.config, args.max_tokens)


def _cmd_diagnose(args: argparse.Namespace) -> int:  # [frontdoors]
    from pd_serve.diagnose import as_dict, collect, diagnose, format_report, http_fetcher, window_stats

    print(f"pd-serve: reading {args.url}/metrics for {args.window_s:.0f} s ...", file=sys.stderr,
          flush=True)
    snapshots = collect(http_fetcher(args.url, args.token), args.window_s, args.interval_s)
    stats = window_stats(snapshots)
    result = diagnose(stats)
    print(json.dumps(as_dict(stats, result), indent=2) if args.json else format_report(stats, result))
    return 0


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="pd-serve", description="LLM serving on Ray, prefill and "
                                 "decode colocated or disaggregated per request")
    ap.add_argument("-v", "--verbose", action="store_true")
    sub = ap.add_subparsers(dest="cmd", required=True)
    up = sub.add_parser("up", help="deploy and serve until interrupted")
    up.add_argument("--config", default=DEFAULT_CONFIG)
    up.add_argument("--address", default=None, help="Ray cluster to join (default: start one)")
    _add_frontend_args(up)  # [frontdoors]
    up.add_argument("--detach", action="store_true",
                    help="start named, detached actors on the running cluster and return")
    up.add_argument("--name", default=None, help="deployment name (default: the config's name)")
    up.set_defaults(func=_cmd_up)
    st = sub.add_parser("status", help="a detached deployment's workers, load and counters")
    st.add_argument("--name", default=None)
    st.add_argument("--address", default=None)
    st.add_argument("--json", action="store_true")
    st.set_defaults(func=_cmd_status)
    dn = sub.add_parser("down", help="stop a detached deployment and everything it started")
    dn.add_argument("--name", default=None)
    dn.add_argument("--address", default=None)
    dn.set_defaults(func=_cmd_down)
    gen = sub.add_parser("generate", help="deploy, run one prompt, print the result, tear down")
    gen.add_argument("prompt")
    gen.add_argument("--config", default=DEFAULT_CONFIG)
    gen.add_argument("--address", default=None)
    gen.add_argument("--max-tokens", type=int, default=16)
    gen.add_argument("--temperature", type=float, default=0.0)
    gen.add_argument("--route", default="auto", choices=["auto", "colocated", "disaggregated"])
    gen.add_argument("--json", action="store_true", help="also print the result as JSON")
    gen.set_defaults(func=_cmd_generate)
    demo = sub.add_parser("demo", help="a local deployment serving a few requests on each route")
    demo.add_argument("--config", default=DEFAULT_CONFIG)
    demo.add_argument("--max-tokens", type=int, default=16)
    demo.set_defaults(func=_cmd_demo)
    probe = sub.add_parser("transfer-probe", help="NIXL-probe every prefill->decode link")
    probe.add_argument("--config", default=DEFAULT_CONFIG)
    probe.add_argument("--address", default=None)
    probe.add_argument("--json", default=None, help="write the fits and samples here")
    probe.add_argument("--max-seconds", type=float, default=20.0, help="budget per pair")
    probe.set_defaults(func=_cmd_transfer_probe)
    diag = sub.add_parser("diagnose", help="read a deployment's metrics over a window and name "
                          "the active bottleneck path")  # [frontdoors]
    diag.add_argument("--url", default="http://127.0.0.1:8000", help="the HTTP front door")
    diag.add_argument("--token", default=os.environ.get("PD_SERVE_TOKEN") or None)
    diag.add_argument("--window-s", type=float, default=60.0)
    diag.add_argument("--interval-s", type=float, default=5.0)
    diag.add_argument("--json", action="store_true")
    diag.set_defaults(func=_cmd_diagnose)
    cost = sub.add_parser("cost", help="FLOPs and predicted TTFT per prompt length", add_help=False)
    cost.set_defaults(func=None)
    return ap


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] == "cost":  # the cost model's own parser owns its flags
        from schedulers.cost_report import main as cost_main
        return cost_main(argv[1:])
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING,
                        format="%(asctime)s %(name)s %(levelname)s %(message)s")
    from pd_serve.config import ConfigError
    from pd_serve.request import InvalidRequestError
    from pd_serve.detached import DeploymentNotFoundError
    try:
        return args.func(args)
    except (ConfigError, InvalidRequestError, DeploymentNotFoundError, ConnectionError) as err:
        print(f"pd-serve: {err}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())

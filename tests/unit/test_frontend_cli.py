"""`pd-serve up` flags for the front doors: defaults, ports, off switches, token from the
environment."""
from __future__ import annotations

from pd_serve.cli import _frontend_kwargs, build_parser


def _up(argv: list[str]) -> dict:
    return _frontend_kwargs(build_parser().parse_args(["up", *argv]))


def test_defaults_serve_both_doors_on_loopback_without_a_token(monkeypatch):
    monkeypatch.delenv("PD_SERVE_TOKEN", raising=False)
    assert _up([]) == {"grpc_port": 50051, "http_port": 8000, "host": "127.0.0.1", "token": None}


def test_ports_host_and_off_switches(monkeypatch):
    monkeypatch.delenv("PD_SERVE_TOKEN", raising=False)
    kw = _up(["--grpc-port", "0", "--no-http", "--host", "0.0.0.0", "--token", "t"])
    assert kw == {"grpc_port": 0, "http_port": None, "host": "0.0.0.0", "token": "t"}
    assert _up(["--no-grpc"])["grpc_port"] is None


def test_the_token_defaults_to_the_environment(monkeypatch):
    monkeypatch.setenv("PD_SERVE_TOKEN", "from-env")
    assert _up([])["token"] == "from-env"
    assert _up(["--token", "flag"])["token"] == "flag"

"""The shared-token rule: no token configured lets everything in; otherwise only the exact
bearer token does, and the refusal never echoes what was sent."""
from __future__ import annotations

import pytest

from pd_serve.frontend.auth import bearer_header, denial_message, is_authorized, parse_bearer
from pd_serve.frontend.settings import FrontendSettings, token_from_env


def test_without_a_configured_token_every_call_is_authorized():
    assert is_authorized(None, None)
    assert is_authorized("Bearer anything", None)


@pytest.mark.parametrize("header, expected", [
    ("Bearer s3cret", True),
    ("bearer s3cret", True),          # the scheme is case-insensitive (RFC 6750)
    ("Bearer  s3cret ", True),        # surrounding blanks are not part of the token
    ("Bearer s3cret2", False),
    ("Bearer S3CRET", False),         # the token itself is case-sensitive
    ("Basic s3cret", False),
    ("s3cret", False),
    ("Bearer", False),
    ("", False),
    (None, False),
])
def test_only_the_exact_bearer_token_is_authorized(header, expected):
    assert is_authorized(header, "s3cret") is expected


def test_parse_and_build_are_inverse():
    assert parse_bearer(bearer_header("abc")) == "abc"
    assert parse_bearer("Token abc") is None


def test_denial_says_what_was_wrong_without_echoing_the_guess():
    assert "missing" in denial_message(None)
    assert "malformed" in denial_message("Basic xyz")
    msg = denial_message("Bearer my-guess")
    assert msg == "invalid token" and "my-guess" not in msg


def test_token_comes_from_the_argument_then_the_environment(monkeypatch):
    monkeypatch.delenv("PD_SERVE_TOKEN", raising=False)
    assert token_from_env(None) is None
    monkeypatch.setenv("PD_SERVE_TOKEN", "from-env")
    assert token_from_env(None) == "from-env"
    assert token_from_env("given") == "given"
    assert token_from_env("") is None  # explicitly none, whatever the environment says
    monkeypatch.setenv("PD_SERVE_TOKEN", "")
    assert token_from_env(None) is None  # an empty variable means unset


@pytest.mark.parametrize("kwargs, message", [
    ({"grpc_port": 70000}, "grpc_port must be in 0..65535"),
    ({"http_port": -1}, "http_port must be in 0..65535"),
    ({"token": ""}, "token must be a non-empty string"),
    ({"max_inflight_requests": 0}, "max_inflight_requests must be >= 1"),
])
def test_frontend_settings_reject_bad_values(kwargs, message):
    with pytest.raises(ValueError, match=message):
        FrontendSettings(**kwargs)


def test_servers_run_only_when_a_port_is_given():
    assert not FrontendSettings().is_enabled
    assert FrontendSettings(grpc_port=0).is_enabled  # 0: any free port, not "off"
    assert FrontendSettings().host == "127.0.0.1"

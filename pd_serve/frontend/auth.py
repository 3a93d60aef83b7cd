"""The shared-token rule both front doors apply: when a token is configured, every call must
carry `authorization: Bearer <token>`; anything else is UNAUTHENTICATED / HTTP 401."""
from __future__ import annotations

import hmac

SCHEME = "bearer"


def bearer_header(token: str) -> str:
    return f"Bearer {token}"


def parse_bearer(header: str | None) -> str | None:
    """The token in an `Authorization: Bearer <token>` value (scheme case-insensitive), else None."""
    if not header:
        return None
    scheme, _, value = header.strip().partition(" ")
    if scheme.lower() != SCHEME or not value.strip():
        return None
    return value.strip()


def is_authorized(header: str | None, token: str | None) -> bool:
    """True when no token is configured, or the header carries exactly that token.

    Compared in constant time, so response timing does not reveal how much of a guess matched.
    """
    if token is None:
        return True
    given = parse_bearer(header)
    return given is not None and hmac.compare_digest(given.encode(), token.encode())


def denial_message(header: str | None) -> str:
    """Why a call was refused, without echoing what was sent."""
    if not header:
        return "missing credentials: send 'authorization: Bearer <token>'"
    if parse_bearer(header) is None:
        return "malformed authorization header: expected 'Bearer <token>'"
    return "invalid token"

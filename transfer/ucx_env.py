"""UCX environment defaults for NIXL agents, applied before the first agent starts.

UCX reads its environment once per context, so these must be set before a NIXL agent is made in
the process (vLLM's NixlConnector included, which shares the process environment).
"""
from __future__ import annotations

import logging
import os

logger = logging.getLogger(__name__)


def apply_ucx_defaults(device_kind: str) -> dict[str, str]:
    """Set what a probe on `device_kind` ("cpu" or "cuda") needs unless the user already has.

    - `UCX_NET_DEVICES=lo` on CPU hosts: keeps UCX's tcp transport on loopback, where both
      ends of a same-host probe live. Not set on GPUs, where the NICs are the point.
    - `UCX_RCACHE_MAX_UNRELEASED=1024`: what vLLM sets, against a rare UCX registration-cache leak.
    - `UCX_TLS` is never set; an empty one disables every transport, so that is refused.
    Returns the variables this call set.
    """
    if os.environ.get("UCX_TLS", None) == "":
        raise ValueError("UCX_TLS is set but empty, which disables every UCX transport; "
                         "unset it or list transports (keep 'tcp' on CPU hosts)")
    wanted = {"UCX_RCACHE_MAX_UNRELEASED": "1024"}
    if device_kind == "cpu":
        wanted["UCX_NET_DEVICES"] = "lo"
    applied = {k: v for k, v in wanted.items() if k not in os.environ}
    os.environ.update(applied)
    tls = os.environ.get("UCX_TLS")
    if device_kind == "cpu" and tls and "tcp" not in tls and not tls.startswith("^"):
        logger.warning("UCX_TLS=%s lacks tcp; NIXL on CPU hosts has needed it here", tls)
    if applied:
        logger.info("UCX defaults applied: %s", applied)
    return applied

"""A vLLM general plugin (loaded by vLLM in every engine and worker process): NIXL progress
thread with a sleep instead of a busy spin.

NIXL's Python API hard-codes `pthrDelay = 0`, so with vLLM's NixlConnector every engine keeps one
thread spinning at 100% of a core even when idle (measured here: 299 of 300 ticks in 3 s). On a
GPU node that is one host core per engine; on a CPU node it is the very core the engine computes
on, and two engines on two cores starve everything else. With a delay of
`PD_SERVE_NIXL_PROGRESS_DELAY_US` (default 100 us) between progress passes the thread sleeps;
transfers still progress, at most that much later. Set it to 0 for NIXL's own behaviour.
"""
from __future__ import annotations

import logging
import os
import sys

logger = logging.getLogger(__name__)
DELAY_ENV = "PD_SERVE_NIXL_PROGRESS_DELAY_US"
DEFAULT_DELAY_US = 100


def register() -> None:
    """vLLM calls this in each of its processes; patching twice is harmless."""
    delay_us = int(os.environ.get(DELAY_ENV, DEFAULT_DELAY_US))
    if delay_us <= 0:
        return
    try:
        from nixl._api import nixl_agent
    except ImportError:  # no NIXL here: nothing to patch
        return
    bind = getattr(sys.modules[nixl_agent.__module__], "nixlBind", None)
    if bind is None or getattr(bind.nixlAgent, "_pd_serve_patched", False):
        return
    original = bind.nixlAgent

    def agent_with_progress_delay(name, config, *args, **kwargs):
        if getattr(config, "useProgThread", False) and not getattr(config, "pthrDelay", 1):
            config.pthrDelay = delay_us
        return original(name, config, *args, **kwargs)

    agent_with_progress_delay._pd_serve_patched = True
    bind.nixlAgent = agent_with_progress_delay
    logger.debug("NIXL progress thread delay set to %d us", delay_us)

"""The vLLM plugin gives NIXL's progress thread a sleep instead of a busy spin."""
from __future__ import annotations

import sys

import pytest

pytest.importorskip("nixl")


def test_agents_get_the_progress_delay(monkeypatch):
    from nixl._api import nixl_agent

    from pd_serve import vllm_plugin

    monkeypatch.setenv(vllm_plugin.DELAY_ENV, "250")
    bind = sys.modules[nixl_agent.__module__].nixlBind
    monkeypatch.setattr(bind, "nixlAgent", bind.nixlAgent)  # restored after the test
    vllm_plugin.register()
    vllm_plugin.register()  # vLLM may load plugins more than once in a process
    config = bind.nixlAgentConfig()
    config.useProgThread = True
    config.pthrDelay = 0
    agent = bind.nixlAgent("pd-serve-plugin-test", config)
    assert config.pthrDelay == 250 and agent is not None

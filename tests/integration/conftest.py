"""Shared set-up for integration tests: real vLLM engines in Ray actors on this machine's CPUs."""
from __future__ import annotations

import os

os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")  # every Ray listener on loopback
os.environ.setdefault("PD_SERVE_DEVICE", "cpu")


# The serving core's bad inputs: every front door must reject each with a message naming it.
BAD_INPUTS = [
    ({"prompt": ""}, "prompt is empty"),
    ({"prompt_token_ids": list(range(200)) * 41}, "max_model_len"),
    ({"prompt": "hi", "max_tokens": 0}, "max_tokens"),
    ({"prompt": "hi", "route": "sideways"}, "unknown route"),
    ({"prompt": "hi", "temperature": -1.0}, "temperature"),
    ({"prompt_token_ids": [1, 2, 100000]}, "outside the vocabulary"),
]


def distinct_prompt(num_tokens: int, salt: int) -> list[int]:
    """A prompt no other test uses (different salt, different tokens): no prefix-cache hits."""
    from pd_serve.prompts import random_prompt
    return random_prompt(num_tokens, f"test/{salt}")


# A request left mid-stream with this many tokens to go would stream for 28 s or more (at 4 ms or
# more a step); stopped, it is gone in a second or two: `LEFT_WITHIN_S` tells the two apart.
LEFT_MAX_TOKENS = 7000
LEFT_WITHIN_S = 15.0


def wait_until_nothing_left(dep, within_s: float = LEFT_WITHIN_S) -> dict:
    """Poll until no request is left on the router or any worker (submitted and not finished, or
    waiting for a worker's outputs) and every worker's KV cache is empty, or `within_s` passed.
    Returns what was left, the KV usage and the seconds waited."""
    import time

    import ray

    t0 = time.time()
    while True:
        left = {w: ray.get(h.num_submitted.remote()) for w, h in dep.workers.items()}
        left["router"] = ray.get(dep.router.num_submitted.remote())
        left["router streams"] = ray.get(dep.router.__ray_call__.remote(
            lambda self: self.worker_streams.num_streaming()))
        usage = {w: load["kv_cache_usage"] for w, load in dep.worker_loads().items()}
        if (not any(left.values()) and not any(usage.values())) or time.time() - t0 > within_s:
            return {"left": left, "kv_usage": usage, "waited_s": round(time.time() - t0, 1)}
        time.sleep(0.5)

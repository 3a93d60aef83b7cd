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

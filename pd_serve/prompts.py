"""Synthetic prompts: random token ids, reproducible from a seed.

Benchmarks, the demo and the tests need prompts that share no prefix (a prefix-cache hit makes a
request look cheaper than it is). Independent random ids share a 32-token block with probability
~256^-32; arithmetic patterns collide far more often than they seem to.
"""
from __future__ import annotations

import zlib


def random_prompt(num_tokens: int, seed: int | str, vocab_size: int = 256) -> list[int]:
    """`num_tokens` ids drawn uniformly from the first min(vocab_size, 256) ids (the byte tokens
    of the default model), the same for the same seed on every machine."""
    import numpy as np

    key = seed if isinstance(seed, int) else zlib.crc32(seed.encode())
    rng = np.random.Generator(np.random.PCG64(key))
    return rng.integers(0, min(vocab_size, 256), size=num_tokens).tolist()

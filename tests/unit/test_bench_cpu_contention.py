"""bench.cpu_contention's pure parts: decode-only steps by batch, CPU seconds of live processes."""
from __future__ import annotations

import os

from bench.cpu_contention import cpu_seconds, decode_steps


def test_only_decode_only_steps_count_grouped_by_batch():
    steps = [{"num_prefill_tokens": 0, "num_decode_reqs": 1, "elapsed_s": 0.008},
             {"num_prefill_tokens": 512, "num_decode_reqs": 1, "elapsed_s": 0.090},  # mixed: out
             {"num_prefill_tokens": 0, "num_decode_reqs": 2, "elapsed_s": 0.011},
             {"num_prefill_tokens": 0, "num_decode_reqs": 1, "elapsed_s": 0.009},
             {"num_prefill_tokens": 0, "num_decode_reqs": 0, "elapsed_s": 0.001}]  # idle: out
    assert decode_steps(steps) == {1: [0.008, 0.009], 2: [0.011]}


def test_cpu_seconds_reads_live_processes_and_counts_a_gone_one_as_nothing():
    sum(i * i for i in range(200_000))  # spend a little CPU here
    used = cpu_seconds({"me": os.getpid(), "gone": 2 ** 22 + 12345})
    assert used["me"] > 0 and used["gone"] == 0.0

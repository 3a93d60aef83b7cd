"""bench.step_interference reads the calibration probes' step records by probe."""
from __future__ import annotations

import pytest

from bench.step_interference import probe_medians


def test_probe_medians_groups_lone_prefills_and_decode_batches_and_skips_mixed_steps():
    samples = [
        {"prefill_tokens": 512, "prefill_context": 0, "decode_contexts": [], "duration_s": 0.05},
        {"prefill_tokens": 512, "prefill_context": 0, "decode_contexts": [], "duration_s": 0.07},
        {"prefill_tokens": 512, "prefill_context": 0, "decode_contexts": [], "duration_s": 0.06},
        {"prefill_tokens": 0, "prefill_context": 0, "decode_contexts": [72] * 4, "duration_s": 0.005},
        {"prefill_tokens": 0, "prefill_context": 0, "decode_contexts": [72] * 4, "duration_s": 0.007},
        {"prefill_tokens": 1024, "prefill_context": 0, "decode_contexts": [96] * 4, "duration_s": 0.2},  # mixed
        {"prefill_tokens": 2048, "prefill_context": 2048, "decode_contexts": [], "duration_s": 0.4},  # 2nd chunk
    ]
    assert probe_medians({"samples": samples}) == pytest.approx({"prefill 512": 0.06, "decode 4 x 72": 0.006})

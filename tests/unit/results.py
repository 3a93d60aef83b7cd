"""A router's result for the fake deployments of the unit tests: the real `GenerateResult`, so
that a field the benchmarks read and the router no longer returns fails here, not on a live run."""
from __future__ import annotations

from typing import Any

from pd_serve.request import GenerateResult


def generate_result(**fields: Any) -> GenerateResult:
    """A colocated request on both-0 with one token, `fields` over it."""
    defaults: dict[str, Any] = {"request_id": "r", "token_ids": [1], "text": "", "route": "colocated",
                                "ttft_s": 0.0, "e2e_s": 0.0, "itl_s": [], "prefill_worker": None,
                                "decode_worker": "both-0", "kv_transfer_bytes": 0, "kv_transfer_s": None,
                                "finish_reason": "length"}
    return GenerateResult(**{**defaults, **fields})

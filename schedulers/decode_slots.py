"""How long a request sent to a worker now waits for a running slot (vLLM's `max_num_seqs`).

vLLM admits a waiting request only while fewer than `max_num_seqs` requests run (the v1
scheduler's waiting loop stops at `max_num_active_reqs`). A shipped-in request is no exception:
its KV read is posted at admission, and it needs a slot again to run once the read is done. So
on a worker whose running requests fill its slots, a new request starts only when enough of them
have finished: with `n` requests in flight there (running, waiting, or on their way) and `m`
slots, the (n - m + 1)-th to finish frees its slot.

The requests decoding there finish in the order of their remaining tokens, each token one decode
step. Requests in flight that have no token yet (prefilling, waiting) finish after those, so
when more slots must free than requests decode, the wait is at least the longest remaining
decode: that lower bound is what is given.

Measured (run 97, 2026-12-06, hybrid at 10.3 req/s on a slow host): the one engine that decoded
sat at its 16 slots from 3 s to 21 s of a 27-s run; prompts routed there, or shipped there, waited
1.3-2.3 s for their first token where the router predicted 0.31-0.46 s with no slot term.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Iterable

from schedulers.decode_slack import DecodeProgress
from schedulers.types import ROLE_PREFILL

if TYPE_CHECKING:
    from schedulers.route_prediction import RoutePredictor


def slot_wait_s(decoding: Iterable[DecodeProgress], num_inflight: int, max_num_seqs: int, step_s: float) -> float:
    """Seconds until a request sent now gets a running slot on a worker with `max_num_seqs`
    slots (0: not known, no wait priced), `num_inflight` requests in flight there before it,
    `decoding` those streaming tokens, and decode steps of `step_s`."""
    must_free = num_inflight - max_num_seqs + 1
    if max_num_seqs <= 0 or must_free <= 0:
        return 0.0
    remaining = sorted(max(0, p.max_tokens - p.num_tokens) for p in decoding)
    if not remaining:
        return 0.0  # none decoding: nothing to time a finish by
    return remaining[min(must_free, len(remaining)) - 1] * step_s


def worker_slot_wait_s(role: str, decoding: Iterable[DecodeProgress], num_inflight: int, max_num_seqs: int,
                       predictor: RoutePredictor | None, speed_factor: float) -> float:
    """A worker's slot wait as the live and the simulated router give it in their views:
    `slot_wait_s` at the model's full-batch decode step at the worker's speed factor; 0 on a
    prefill-only worker (its prompts leave once prefilled, and its queue times them), without a
    step model, or while a slot is free."""
    if predictor is None or role == ROLE_PREFILL or num_inflight < max_num_seqs:
        return 0.0
    return slot_wait_s(decoding, num_inflight, max_num_seqs, predictor.decode_step_s(max_num_seqs, speed_factor))

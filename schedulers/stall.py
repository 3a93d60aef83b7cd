"""How long a worker has been stuck: silent past the longest it could take to give anything back.

A worker with requests decoding emits a token for each of them at the end of every step (vLLM
schedules running decodes first, in every step, beside any prefill chunk), and no step is longer
than a full token budget of prefill with those decodes. So while requests stream from it, a
silence longer than that step means the worker is not stepping: its process is descheduled,
paging, or stuck. Measured (run 38, 2026-12-02, adaptive at 7.59 req/s): one of two workers
emitted nothing for 4.31 s while its decodes were running; its event loop showed no stall (the
engine's own process stopped), and the router sent it nine more prompts, each predicted at
35-110 ms, which waited 1.7-4.4 s for a first token while the other worker served at once.

A prefill worker streams nothing: it gives a prompt's KV back when its prefill ends. While prompts
wait on a worker and nothing streams from it, the longest it can take to give anything back is
the prefill of the oldest prompt and of every prompt that reached the engine before the step
that serves it began (vLLM runs a worker's prompts first come, first served, and batches all
that wait when a step begins, up to its token budget), plus the path outside the engines;
silence past that (from the oldest prompt's sending or the worker's last output, whichever is
later) is a stall as well. Prompts sent after that step began do not lengthen the wait: one
sent to a stopped worker would otherwise hide the stop.

How long a stall will last is not known when it is seen. What has lasted `s` seconds is taken to
last `s` seconds more (the estimate that assumes nothing about the stall's length distribution
beyond where it is now), so the stall adds that to the worker's queue in every prediction: a
prompt goes there only if it still meets its SLO with it. A `tolerance` times the longest step
is forgiven first (scheduling, the worker's front-end, a garbage collection): stalls shorter
than that are the step-time noise the speed factor already follows.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable

if TYPE_CHECKING:
    from schedulers.prefill_queues import PrefillQueues
    from schedulers.route_prediction import RoutePredictor

STALL_TOLERANCE = 2.0  # silences up to this many longest steps are not stalls


def stall_s(silent_s: float, longest_step_s: float, tolerance: float = STALL_TOLERANCE) -> float:
    """Seconds of a worker's silence (nothing back while requests stream from it or prompts
    wait on it) beyond `tolerance` times the longest it could take (`longest_step_s`: the
    longest step, or the oldest prompt's prefill and the path when only prompts wait); 0 when
    within it."""
    if silent_s < 0 or longest_step_s < 0 or tolerance < 1:
        raise ValueError(f"need silent_s >= 0, longest_step_s >= 0, tolerance >= 1; got "
                         f"{silent_s}, {longest_step_s}, {tolerance}")
    return max(0.0, silent_s - tolerance * longest_step_s)


@dataclass(frozen=True)
class Silence:
    """How long a worker has given nothing back, against the longest it could take to."""

    silent_s: float
    longest_wait_s: float
    awaited: str  # what the router waits for: "token" (requests stream) or "prefilled prompt"

    def stall_s(self, tolerance: float = STALL_TOLERANCE) -> float:
        return stall_s(self.silent_s, self.longest_wait_s, tolerance)


def worker_silence(worker_id: str, now_s: float, *, num_decodes: int, streaming: bool,
                   last_output_s: float | None, queues: PrefillQueues, predictor: RoutePredictor,
                   speed_factor: float, path_s: float) -> Silence | None:
    """`worker_id`'s silence at `now_s` (None: nothing is expected from it), the rule above as
    the live router (`pd_serve.router.Router._stall_s`) and the simulated one apply it.

    `num_decodes`: the requests decoding there (0 on a prefill-only worker: vLLM counts its
    prompts as running, and none of them decodes); `streaming`: whether any streams from it now
    (then `last_output_s`, its last token, is set); `queues`: the prompts sent to it for prefill,
    with when each was sent; `path_s`: the longest path outside the engines.

    While requests stream, the longest wait is its longest step. While only prompts wait, it is
    the steps that prefill the oldest of them and the prompts that can share those steps (vLLM
    runs a worker's prompts first come, first served, batching all that wait when a step begins),
    and the path. Prompts sent after that step began do not lengthen the wait: one sent to a
    stopped worker would otherwise hide the stop. Priced over the oldest prompt alone, in run 85
    (2026-12-06) a 1,731-token prompt was taken back from hybrid's prefill worker 0.86 s into
    the 1.00 s step that held it and a 1,287-token one sent 15 ms later; prefilled again behind
    the decode worker's queue, both waited 2.5 s."""
    if streaming:
        if last_output_s is None:
            raise ValueError(f"worker {worker_id!r} streams but has no last output time")
        longest_wait_s = predictor.longest_step_s(num_decodes, speed_factor, queues.longest(worker_id))
        return Silence(max(0.0, now_s - last_output_s), longest_wait_s, "token")
    sent_s = queues.oldest_sent_s(worker_id)
    if sent_s is None:
        return None
    since_s = sent_s if last_output_s is None else max(sent_s, last_output_s)
    num_tokens = queues.num_tokens_sent_by(worker_id, since_s + path_s)
    longest_wait_s = predictor.prefill_queue_s(num_tokens, num_decodes, speed_factor) + path_s
    return Silence(max(0.0, now_s - since_s), longest_wait_s, "prefilled prompt")


def take_back_reason(prefill_id: str, prefill_stall_s: float, decode_stall_s: Callable[[], float]) -> str | None:
    """Why to take a prompt that has waited its whole TTFT SLO on its prefill worker `prefill_id`
    back and prefill it on its decode worker, as the live router (`pd_serve.router.Router.
    _prefill_stalled`) and the simulated one decide it: the prefill worker is stalled
    (`prefill_stall_s` > 0) and the decode worker is not (`decode_stall_s`, asked only then:
    reading a stall counts it); else None. The callers wait out the SLO: the live router polls
    from the start, the simulated one asks from the SLO on."""
    if prefill_stall_s <= 0 or decode_stall_s() > 0:
        return None
    return f"prefill worker {prefill_id} stalled ({prefill_stall_s:.2f} s past its longest wait)"

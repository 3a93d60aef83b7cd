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

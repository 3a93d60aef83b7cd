"""Predicted TTFT, interference and engine time of serving one request on one candidate route.

For a worker W that prefills the request (chunks of `chunk_tokens`, alongside the decodes
running on W, each assumed at `decode_context_tokens` of context):

    queue_s    = entry_s + the sum of the step times that prefill W's queued prompt tokens, less
                 what the engine has done of the one at their head: the time it has had it, at
                 most entry_s + that prompt's own steps (WorkerView.queue_head_*;
                 `credit_queue_head`, since stop 59)
    entry_s    = with `wait_running_step` (off by default, stop 60), half of W's decode-only step
                 (0 when nothing decodes on W): vLLM takes a new prompt only at a step boundary,
                 so a prompt reaching a decoding engine waits out the rest of the step it is in
    prefill_s  = sum of the step times of the request's own chunks
    itl_s      = the longest of those steps: the inter-token gap W's running decodes see
                 (0 when nothing decodes on W)
    extra_itl_s = itl_s minus W's decode-only step: what the prefill adds to that gap
    engine_s   = prefill_s minus what those steps would have cost for the decodes alone

Colocated on W:            TTFT = max(queue_s, slot_wait_s(W)) + prefill_s (the last chunk samples
                                  the first token) + path_s
Disaggregated P -> D:      TTFT = queue_s(P) + prefill_s(P) + transfer_s + kv_load_s
                                  + decode_wait_s + first_step_s(D) + path_s
    transfer_s   = link(P, D).predict_s(kv bytes of the whole prompt)
    kv_load_s    = KV_LOAD_STEPS steps of D with its decodes alone (0 when none run): vLLM's
                   decode side posts the KV read in the first step after the request is admitted,
                   learns the read is done only from a step's output, and computes the last
                   prompt token in the step after that (below).
    first_step_s = the step on D that computes the last prompt token over the shipped KV (vLLM's
                   decode side recomputes it) and samples the first token, beside D's decodes
    decode_wait_s = max(0, queue_s(D) - (queue_s(P) + prefill_s(P) + transfer_s + kv_load_s),
                        slot_wait_s(D) - (queue_s(P) + prefill_s(P))): vLLM runs
                   the prompts D is already prefilling first, with its whole token budget, so the
                   loaded request starts only once they are done; and it admits the request (posts
                   its KV read) only once one of its running slots is free.
                   Prompts reaching D after this decision, which vLLM also runs first, are not
                   seen: a shipped-in request can wait for them (measured here: 130-330 ms on a
                   decode worker busy with local prefills, against 8-10 ms predicted).
    slot_wait_s  = seconds until a running slot frees on the worker, when its `max_num_seqs` are
                   taken (WorkerView.slot_wait_s: schedulers/decode_slots.py; 0 on a prefill-only
                   worker, whose prompts leave as soon as they are prefilled, which queue_s times).
    path_s       = the route's seconds outside the engines (ClusterView.path_s; measured, 0
                   until then: schedulers/path_estimate.py).

Every step on a worker is the calibrated model's times the worker's `speed_factor`: the router's
feedback for how much slower than calibrated the engine runs at the load now on its host.
"""
from __future__ import annotations

from dataclasses import dataclass

from schedulers.step_time import StepTimeModel
from schedulers.types import (ROLE_PREFILL, ROUTE_COLOCATED, ROUTE_DISAGGREGATED, LinkEstimate,
                              RequestInfo, WorkerView)

# Steps of the decode worker between a shipped-in request reaching it and the step that computes
# its last prompt token: half the step it is in when the request comes (on average), the step
# that posts the KV read, and the next. vLLM's model runner posts a step's asynchronous KV loads
# after launching its forward (kv_connector_model_runner_mixin: off the critical path on a GPU;
# on a CPU the forward has finished by then) and asks for finished transfers right after, when
# the read has barely started; the scheduler learns it finished from the next step's output and
# schedules the request in the step after. Measured on the hybrid deployment (2026-12-02,
# 300-token prompts, 8 per load): D's own TTFT was 36-49 ms idle (first step 17-26 ms), 101-270
# ms beside 2 streams and 79-167 ms beside 4 (steps 20-60 ms), against 20-59 ms predicted with
# the first step alone.
KV_LOAD_STEPS = 2.5


def _over(delay_s: float, slack_s: float) -> float:
    """A delay against the slack it comes out of (0 for none; inf when there is no slack)."""
    if delay_s <= 0:
        return 0.0
    return delay_s / slack_s if slack_s > 0 else float("inf")


@dataclass(frozen=True)
class PrefillPart:
    """The prefill of one request on one worker (seconds)."""

    queue_s: float
    prefill_s: float
    itl_s: float
    extra_itl_s: float
    engine_s: float


@dataclass(frozen=True)
class RoutePrediction:
    """One candidate's predictions (seconds) against the request's SLOs (seconds)."""

    route: str
    decode_worker: WorkerView
    prefill_worker: WorkerView | None
    prefill: PrefillPart
    transfer_s: float
    first_step_s: float
    engine_s: float
    ttft_slo_s: float
    tpot_slo_s: float
    decode_wait_s: float = 0.0  # disaggregated: KV arrived, D still busy with its queued prefills
    path_s: float = 0.0         # outside the engines (measured)
    kv_load_s: float = 0.0      # disaggregated: D's steps until it schedules the loaded request

    @property
    def ttft_s(self) -> float:
        return (self.prefill.queue_s + self.prefill.prefill_s + self.transfer_s + self.kv_load_s
                + self.decode_wait_s + self.first_step_s + self.path_s)

    @property
    def through_stall(self) -> bool:
        """A worker on this route has been seen stalled (stall.py): it may not serve at all."""
        return any(w is not None and w.stall_s > 0 for w in (self.prefill_worker, self.decode_worker))

    @property
    def decoder_engine_s(self) -> float:
        """Engine time this route takes from decode-capable workers, the ones running requests
        depend on: all of it when colocated; on a prefill-only P, only D's first step."""
        if self.prefill_worker is not None and self.prefill_worker.role == ROLE_PREFILL:
            return self.engine_s - self.prefill.engine_s
        return self.engine_s

    @property
    def decode_harm(self) -> float:
        """What this route's prefill costs the requests decoding beside it, against what they
        can bear: at most 1 means they all still meet their TPOT SLO. Each running request on
        the prefilling worker is delayed by the prefill's engine seconds, on D by the first
        step's; over the worker's `decode_slack_s`. Where the view has no slack: the longest
        prefill step over the TPOT SLO (as if one gap were the whole mean)."""
        prefiller = self.prefill_worker or self.decode_worker
        if prefiller.decode_slack_s is None or self.decode_worker.decode_slack_s is None:
            return self.prefill.itl_s / self.tpot_slo_s
        harms = [_over(self.prefill.engine_s if prefiller.role != ROLE_PREFILL else 0.0,
                       prefiller.decode_slack_s)]
        if self.prefill_worker is not None:
            harms.append(_over(self.engine_s - self.prefill.engine_s, self.decode_worker.decode_slack_s))
        return max(harms)

    @property
    def violation(self) -> float:
        """max(TTFT / TTFT SLO, decode harm): at most 1 means both SLOs hold."""
        return max(self.ttft_s / self.ttft_slo_s, self.decode_harm)

    @property
    def meets_slo(self) -> bool:
        return self.violation <= 1.0

    @property
    def where(self) -> str:
        if self.prefill_worker is None:
            return self.decode_worker.worker_id
        return f"{self.prefill_worker.worker_id}->{self.decode_worker.worker_id}"

    def as_dict(self) -> dict[str, float]:
        """Named predictions, keys prefixed with the route."""
        values = {"ttft_s": self.ttft_s, "queue_s": self.prefill.queue_s,
                  "prefill_s": self.prefill.prefill_s, "transfer_s": self.transfer_s,
                  "first_step_s": self.first_step_s, "decode_wait_s": self.decode_wait_s,
                  "kv_load_s": self.kv_load_s, "slot_wait_s": self.decode_worker.slot_wait_s,
                  "path_s": self.path_s,
                  "itl_s": self.prefill.itl_s,
                  "extra_itl_s": self.prefill.extra_itl_s,
                  "engine_s": self.engine_s, "decode_harm": self.decode_harm,
                  "violation": self.violation}
        return {f"{self.route}.{k}": v for k, v in values.items()}


@dataclass(frozen=True)
class RoutePredictor:
    """Predicts candidates with a step-time model.

    `chunk_tokens`: prefill tokens per iteration (vLLM's max_num_batched_tokens).
    `decode_context_tokens`: assumed context of every running request (the view has no lengths).
    """

    step_model: StepTimeModel
    chunk_tokens: int = 2048
    decode_context_tokens: int = 1024
    credit_queue_head: bool = True
    wait_running_step: bool = False

    def decode_contexts(self, worker: WorkerView) -> list[int]:
        """Contexts of the requests decoding on `worker` (none on a prefill-only worker)."""
        if worker.role == ROLE_PREFILL:
            return []
        return [self.decode_context_tokens] * worker.num_running

    def decode_step_s(self, num_decodes: int, speed_factor: float = 1.0) -> float:
        """A step of `num_decodes` decodes alone (0 for none), at the worker's speed factor."""
        return self.step_model.predict(0, 0, [self.decode_context_tokens] * num_decodes) * speed_factor

    def queue_s(self, worker: WorkerView) -> float:
        """Seconds until `worker` has prefilled the prompts queued on it, and sat out its stall
        (taken to last as long again as it has: schedulers/stall.py)."""
        num_decodes = len(self.decode_contexts(worker))
        entry_s = self.running_step_s(num_decodes, worker.speed_factor)
        queue_s = entry_s + self.prefill_queue_s(worker.num_queued_prefill_tokens, num_decodes, worker.speed_factor)
        if self.credit_queue_head and worker.queue_head_tokens:
            # The head waited out the same rest of a step before its own steps began.
            head_s = entry_s + self.prefill_queue_s(worker.queue_head_tokens, num_decodes, worker.speed_factor)
            queue_s -= min(worker.queue_head_elapsed_s, head_s)
        return max(0.0, queue_s) + worker.stall_s

    def running_step_s(self, num_decodes: int, speed_factor: float = 1.0) -> float:
        """What a prompt reaching a worker with `num_decodes` decodes waits of the step running
        then: half of it on average (0 for none, or with `wait_running_step` off). Measured on
        hybrid's decoder (runs 108-109, colocated prompts with nothing queued): 3.6 / 5.4 / 9.7 ms
        beside 1-4 / 5-10 / 11+ decodes, against 4.3 / 6.4 / 9.4 from half the model's step.
        Left out, the speed factor took it up as a share of every step (1.14-1.28 beside
        decodes, where the steps themselves ran 0.84-1.09 of the model) and priced queues high.
        Off by default: live on hybrid it met both SLOs 2,742 times against 2,684 (runs 110-111,
        10 rounds of 16 won), but in the simulated 4 x H100 on 2 prefill + 2 both the truer price
        of colocating kept prompts off the idle prefill workers (seed 1 at 32 req/s: 949 of 1,000
        colocated against 762) and goodput fell (24.6 / 25.5 / 25.5 req/s against 25.8 / 28.5 /
        27.6, seeds 0-2). docs/MEASUREMENTS.md, stop 60."""
        if not self.wait_running_step:
            return 0.0
        return 0.5 * self.decode_step_s(num_decodes, speed_factor)

    def prefill_queue_s(self, num_tokens: int, num_decodes: int, speed_factor: float = 1.0) -> float:
        """Seconds of the steps that prefill `num_tokens` queued prompt tokens beside `num_decodes`
        decodes, at the worker's speed factor."""
        steps = self.step_model.chunked_prefill_steps_s(num_tokens, 0, self.chunk_tokens,
                                                        [self.decode_context_tokens] * num_decodes)
        return sum(steps) * speed_factor

    def longest_step_s(self, num_decodes: int, speed_factor: float = 1.0, longest_prompt_tokens: int = 0) -> float:
        """The longest step a worker with `num_decodes` decodes could be taking: a full token
        budget of prefill beside them, over the context the longest prompt queued on it reaches
        by its last chunk, at its speed factor."""
        context = max(0, longest_prompt_tokens - self.chunk_tokens)
        return (self.step_model.predict(self.chunk_tokens, context, [self.decode_context_tokens] * num_decodes)
                * speed_factor)

    def prefill_on(self, request: RequestInfo, worker: WorkerView) -> PrefillPart:
        """The request's queue wait and chunked prefill on `worker`."""
        model, decodes, speed = self.step_model, self.decode_contexts(worker), worker.speed_factor
        # The prompts queued ahead take the first slots that free: the request waits for both.
        queue_s = max(self.queue_s(worker), worker.slot_wait_s)
        # vLLM computes at least the last prompt token, even on a full prefix-cache hit.
        num_new = max(1, request.num_uncached_tokens)
        num_context = max(0, request.num_prompt_tokens - num_new)
        steps_s = [s * speed for s in
                   model.chunked_prefill_steps_s(num_new, num_context, self.chunk_tokens, decodes)]
        decode_only_s = self.decode_step_s(len(decodes), speed)
        itl_s = max(steps_s) if (steps_s and decodes) else 0.0
        extra_itl_s = itl_s - decode_only_s if itl_s else 0.0
        engine_s = sum(steps_s) - decode_only_s * len(steps_s)
        return PrefillPart(queue_s, sum(steps_s), itl_s, extra_itl_s, engine_s)

    def colocated(self, request: RequestInfo, worker: WorkerView,
                  slos: tuple[float, float], path_s: float = 0.0) -> RoutePrediction:
        part = self.prefill_on(request, worker)
        return RoutePrediction(ROUTE_COLOCATED, worker, None, part, 0.0, 0.0, part.engine_s, *slos,
                               path_s=path_s)

    def disaggregated(self, request: RequestInfo, prefill: WorkerView, decode: WorkerView,
                      part: PrefillPart, link: LinkEstimate, kv_bytes: int,
                      slos: tuple[float, float], path_s: float = 0.0) -> RoutePrediction:
        """`part`: `prefill_on(request, prefill)`; `kv_bytes`: the prompt's KV bytes to ship."""
        decodes, speed = self.decode_contexts(decode), decode.speed_factor
        last_token_context = max(0, request.num_prompt_tokens - 1)
        first_step_s = self.step_model.predict(1, last_token_context, decodes) * speed
        decode_only_s = self.decode_step_s(len(decodes), speed)
        first_step_engine_s = first_step_s - decode_only_s
        transfer_s = link.predict_s(kv_bytes)
        # D steps on with its decodes while the read is posted and polled. An idle D runs empty
        # steps instead (no forward): a few ms, left out (measured idle: 15-20 ms on this CPU).
        kv_load_s = KV_LOAD_STEPS * decode_only_s
        # vLLM schedules running requests first: prompts D is already prefilling take its whole
        # token budget until they are done, and the loaded request (waiting) gets no step before.
        d_queue_s = self.queue_s(decode)
        kv_ready_s = part.queue_s + part.prefill_s + transfer_s + kv_load_s
        # D posts the KV read only once it admits the request, into a free running slot.
        decode_wait_s = max(0.0, d_queue_s - kv_ready_s, decode.slot_wait_s - (part.queue_s + part.prefill_s))
        return RoutePrediction(ROUTE_DISAGGREGATED, decode, prefill, part, transfer_s,
                               first_step_s, part.engine_s + first_step_engine_s, *slos,
                               decode_wait_s=decode_wait_s, path_s=path_s, kv_load_s=kv_load_s)

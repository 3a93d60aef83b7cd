"""One simulated engine: a vLLM-like iteration scheduler over a KV block pool.

Each step (`schedule`), with a budget of `max_num_batched_tokens` tokens:
1. running requests, decodes first, then partial prefills, each in admission order (vLLM v1
   walks running requests in admission order, which is mostly the same; the explicit order
   keeps an old request's long partial prefill from taking the budget of newer decodes): a decode
   takes one token; a partial prefill its remainder, capped by `long_prefill_token_threshold`
   and the budget left. When a request cannot grow its blocks, the newest running request is
   preempted (blocks freed, back to the front of the waiting queue, recomputed later) until it
   fits or it is the newest itself;
2. if nothing was preempted, waiting requests first come, first served while the budget, a
   running slot (`max_num_seqs`) and blocks above the watermark last. Without chunked prefill a
   prompt waits until it fits the budget whole. A request whose KV comes from a prefill worker
   is given its blocks here and its transfer starts (`LOADING_REMOTE_KV`); it is skipped until
   the engine knows its KV has arrived, then computes its last prompt token. vLLM posts a
   step's KV reads after launching its forward and asks for finished ones right after, so the
   scheduler learns a read finished from the output of the next step that starts: an arrived
   KV counts at the end of the next step to start. An engine with nothing else to run polls in
   empty steps, taken here as instant (see `schedulers.route_prediction.KV_LOAD_STEPS`).

`complete` applies a finished step: computed tokens advance, and a request whose computed
tokens reach its tokens samples one. The step's time comes from `StepCost`.
"""
from __future__ import annotations

import collections
from dataclasses import dataclass, field

from bench.simulator.block_pool import BlockPool
from bench.simulator.engine_request import EngineRequest, Phase
from bench.simulator.specs import WorkerSpec
from bench.simulator.step_cost import StepCost

TOKEN = "token"  # a token was sampled for the client
FINISHED = "finished"  # that token was the last one; blocks are free
PREFILL_DONE = "prefill_done"  # a prefill-only request finished; it holds its blocks


@dataclass
class StepPlan:
    """One scheduled step: new tokens per request (insertion order = schedule order)."""

    num_new_tokens: dict[EngineRequest, int] = field(default_factory=dict)
    loads_started: list[EngineRequest] = field(default_factory=list)
    num_preempted: int = 0
    duration_s: float = 0.0
    chunks: list[tuple[int, int]] = field(default_factory=list)  # (new tokens, cached context)
    decodes: list[int] = field(default_factory=list)  # each decode's context

    @property
    def is_empty(self) -> bool:
        return not self.num_new_tokens

    @property
    def num_streamed_tokens(self) -> int:
        """Tokens this step samples for clients (a prefill-only request's goes nowhere)."""
        return sum(1 for r, n in self.num_new_tokens.items()
                   if n >= r.num_remaining_tokens and not r.is_prefill_only)


class SimWorker:
    def __init__(self, spec: WorkerSpec, cost: StepCost) -> None:
        self.spec = spec
        self.engine = spec.engine
        self.cost = cost
        self.pool = BlockPool(spec.engine.num_kv_blocks, spec.engine.watermark_blocks)
        # Fills on arrival and on preemption (front); empties on admission to `running`.
        self.waiting: collections.deque[EngineRequest] = collections.deque()
        # Admission order; fills from `waiting`, empties on finish and preemption.
        self.running: list[EngineRequest] = []
        # Prefill-only requests holding their blocks until the transfer completes.
        self.num_holding = 0
        self.current: StepPlan | None = None  # the step in flight, None when idle
        self.num_steps = 0
        self.num_preemptions = 0
        self.busy_s = 0.0
        self._next_admission = 0
        # Loading requests whose KV is in, until a step starts; then until that step ends.
        self._kv_arrived: list[EngineRequest] = []
        self._kv_seen: list[EngineRequest] = []
        # Aborted while the step in flight computes them: dropped when it ends.
        self._aborting: set[EngineRequest] = set()

    @property
    def worker_id(self) -> str:
        return self.spec.worker_id

    @property
    def is_idle(self) -> bool:
        return self.current is None

    def add(self, request: EngineRequest) -> None:
        request.phase = Phase.WAITING
        self.waiting.append(request)

    # ---- scheduling ------------------------------------------------------------------------

    def schedule(self) -> StepPlan:
        """Plan the next step (see the module docstring); an empty plan means nothing to run."""
        if self._kv_arrived and not self._has_work():
            self._promote(self._kv_arrived)  # an idle engine's empty steps see it at once
        plan = StepPlan()
        budget = self._schedule_running(plan, self.engine.max_num_batched_tokens)
        if not plan.num_preempted:
            self._schedule_waiting(plan, budget)
        if not plan.is_empty:
            plan.chunks = [(n, r.num_computed_tokens) for r, n in plan.num_new_tokens.items() if n > 1]
            plan.decodes = [r.num_computed_tokens for r, n in plan.num_new_tokens.items() if n == 1]
            plan.duration_s = self.cost.step_s(plan.chunks, plan.decodes)
        return plan

    def _has_work(self) -> bool:
        """Whether a step now would compute anything (a running request, or a waiting one not
        loading its KV)."""
        return bool(self.running) or any(r.phase != Phase.LOADING_REMOTE_KV for r in self.waiting)

    def _schedule_running(self, plan: StepPlan, budget: int) -> int:
        order = [r for r in self.running if r.is_decoding] + [r for r in self.running if not r.is_decoding]
        for request in order:
            if budget <= 0:
                break
            if request.phase != Phase.RUNNING:  # preempted earlier in this pass
                continue
            num_new = self._num_new_tokens(request, budget)
            if num_new == 0:
                continue
            num_blocks = self._blocks_to_grow(request, num_new)
            while not self.pool.can_grow(num_blocks):
                victim = max(self.running, key=lambda r: r.admission_index)
                budget += self._preempt(victim, plan)
                if victim is request:
                    break
            else:
                self._take_blocks(request, num_blocks)
                plan.num_new_tokens[request] = num_new
                budget -= num_new
        return budget

    def _schedule_waiting(self, plan: StepPlan, budget: int) -> None:
        skipped: list[EngineRequest] = []
        while self.waiting and budget > 0 and len(self.running) < self.engine.max_num_seqs:
            request = self.waiting[0]
            if request.phase == Phase.LOADING_REMOTE_KV:
                skipped.append(self.waiting.popleft())
                continue
            if request.needs_remote_kv:
                if not self._start_load(request):
                    break
                plan.loads_started.append(request)
                skipped.append(self.waiting.popleft())
                continue
            num_new = self._num_new_tokens(request, budget)
            num_blocks = self._blocks_to_grow(request, num_new)
            if num_new == 0 or (num_blocks and not self.pool.can_admit(num_blocks)):
                break
            self.waiting.popleft()
            self._take_blocks(request, num_blocks)
            request.phase = Phase.RUNNING
            request.admission_index = self._next_admission
            self._next_admission += 1
            self.running.append(request)
            plan.num_new_tokens[request] = num_new
            budget -= num_new
        self.waiting.extendleft(reversed(skipped))

    def _num_new_tokens(self, request: EngineRequest, budget: int) -> int:
        """Tokens this step gives the request; 0 when an unchunked prompt does not fit whole."""
        remaining = self.engine.prefill_cap(request.num_remaining_tokens)
        if not self.engine.enable_chunked_prefill:
            return remaining if remaining <= budget else 0
        return min(remaining, budget)

    def _blocks_to_grow(self, request: EngineRequest, num_new: int) -> int:
        block_size = self.engine.block_size
        needed = -(-(request.num_computed_tokens + num_new) // block_size)
        return max(0, needed - request.num_blocks)

    def _take_blocks(self, request: EngineRequest, num_blocks: int) -> None:
        if num_blocks:
            self.pool.allocate(num_blocks)
            request.num_blocks += num_blocks

    def _start_load(self, request: EngineRequest) -> bool:
        """Blocks for the whole prompt of a request whose KV will be read remotely."""
        num_blocks = -(-request.num_prompt_tokens // self.engine.block_size)
        if not self.pool.can_admit(num_blocks):
            return False
        self.pool.allocate(num_blocks)
        request.num_blocks = num_blocks
        request.phase = Phase.LOADING_REMOTE_KV
        return True

    def _preempt(self, victim: EngineRequest, plan: StepPlan) -> int:
        """Free the victim's blocks and requeue it at the front; returns budget given back."""
        self.running.remove(victim)
        self.pool.free(victim.num_blocks)
        victim.reset_for_recompute()
        self.waiting.appendleft(victim)
        self.num_preemptions += 1
        plan.num_preempted += 1
        return plan.num_new_tokens.pop(victim, 0)

    # ---- completion -------------------------------------------------------------------------

    def start(self, plan: StepPlan) -> None:
        self.current = plan
        self._kv_seen, self._kv_arrived = self._kv_seen + self._kv_arrived, []
        self.num_steps += 1
        self.busy_s += plan.duration_s

    def abort(self, request: EngineRequest) -> bool:
        """Abort a request that has not finished its prompt: out of the queue, its blocks freed.
        vLLM aborts between steps, so one in the step in flight is dropped when that step ends.
        False when the request is not here (still on its way to this worker)."""
        if request.phase == Phase.WAITING and request in self.waiting:
            self.waiting.remove(request)
        elif request.phase == Phase.RUNNING and request in self.running:
            if self.current is not None and request in self.current.num_new_tokens:
                self._aborting.add(request)
                return True
            self.running.remove(request)
        else:
            return False
        self._drop(request)
        return True

    def _drop(self, request: EngineRequest) -> None:
        self.pool.free(request.num_blocks)
        request.num_blocks = 0
        request.phase = Phase.FINISHED

    def complete(self) -> list[tuple[str, EngineRequest]]:
        """Apply the step in flight; returns (TOKEN | FINISHED | PREFILL_DONE, request) outcomes."""
        plan, self.current = self.current, None
        assert plan is not None, f"worker {self.worker_id}: complete() without a step in flight"
        outcomes = []
        for request, num_new in plan.num_new_tokens.items():
            if request in self._aborting:
                self.running.remove(request)
                self._drop(request)
                continue
            request.num_computed_tokens += num_new
            if request.num_computed_tokens < request.num_tokens:
                continue
            if request.is_prefill_only:
                self.running.remove(request)
                request.phase = Phase.HOLDING_KV
                self.num_holding += 1
                outcomes.append((PREFILL_DONE, request))
            elif request.sample():
                self.running.remove(request)
                self._drop(request)
                outcomes.append((FINISHED, request))
            else:
                outcomes.append((TOKEN, request))
        self._aborting.clear()
        self._promote(self._kv_seen)  # this step's output reports those reads done
        return outcomes

    def kv_loaded(self, request: EngineRequest) -> None:
        """The remote KV arrived; the engine learns it at the end of the next step to start."""
        assert request.phase == Phase.LOADING_REMOTE_KV
        self._kv_arrived.append(request)

    def _promote(self, requests: list[EngineRequest]) -> None:
        """The engine knows these KV reads are done: all prompt tokens but the last count as
        computed, and the request is schedulable. Empties `requests`."""
        for request in requests:
            request.phase = Phase.WAITING
            request.needs_remote_kv = False
            request.num_computed_tokens = request.num_prompt_tokens - 1
        requests.clear()

    def release_held(self, request: EngineRequest) -> None:
        """The decode worker has read a prefill-only request's KV: free its blocks."""
        assert request.phase == Phase.HOLDING_KV
        self.pool.free(request.num_blocks)
        request.num_blocks = 0
        request.phase = Phase.FINISHED
        self.num_holding -= 1

"""Calibrate the step-time model on the real engine at start-up.

Each worker runs a short, fixed set of probe requests on its own engine (prefill-only prompts of
several sizes; decode-only batches; prefills while a batch decodes) and returns the engine's own
per-step records (vLLM's iteration details: tokens scheduled and elapsed time). Because the probes
are controlled, each step's prefill context and decode contexts are known, which turns the steps
into `StepSample`s for `StepTimeModel.fit`. The fitted model then predicts this machine's engine,
whatever the machine is.

vLLM times only the model's execution of a step; scheduling, output processing and the hand-off
to the front-end come on top of it, before the next step starts. The decode probes measure that
directly: in a steady decode, the front-end sees one output per step, so the time between two
steps' records minus the second step's execution is the loop's own time per step (the step gap).
The model the router and the simulator use predicts the whole step: fitted execution + gap.
"""
from __future__ import annotations

import asyncio
import logging
import statistics
import time
from dataclasses import dataclass, replace
from typing import Any, Awaitable, Callable, Sequence

from pd_serve.prompts import random_prompt
from schedulers.model_spec import ModelSpec
from schedulers.step_time import StepSample, StepTimeModel
from transfer.kv_geometry import KVGeometry

logger = logging.getLogger(__name__)

# 3072 gives a chunk over a cached context that is not the budget again (1,024 after 2,048 with a
# 2,048-token budget), so the attention coefficient is not fitted to a single chunk shape.
PREFILL_SIZES = (128, 512, 1024, 2048, 3072, 4096)
# (batch, prompt tokens) of the decode-only probes: batch sizes at a short context, and long
# contexts, without which the KV-read coefficient is extrapolated from prefills alone.
DECODE_PROBES = ((1, 64), (4, 64), (8, 64), (1, 2048), (2, 4096))
MIXED = ((4, 1024), (4, 2048))  # (decoding requests, prefill tokens) run together
DECODE_PROMPT_TOKENS = 64  # the mixed probes' decodes
DECODE_OUTPUT_TOKENS = 16

# run(request_id, prompt_token_ids, max_tokens) -> awaitable that completes when the request does;
# on_first: awaitable set when the request's first token arrived.
RunFn = Callable[[str, list[int], int, "asyncio.Event | None"], Awaitable[None]]
StepsFn = Callable[[float], list[dict]]


def _ids(n: int, salt: int | str, vocab: int) -> list[int]:
    return random_prompt(n, f"calibration/{salt}", vocab)


async def run_calibration_probes(run: RunFn, steps_since: StepsFn, vocab: int, max_model_len: int,
                                 salt: int = 0) -> dict[str, list]:
    """Worker side: run the probes on this engine. Returns `samples` (StepSample dicts) and
    `step_gaps_s` (loop time between steady decode steps, see the module docstring)."""
    samples: list[dict] = []
    gaps: list[float] = []
    sizes = [n for n in PREFILL_SIZES if n < max_model_len - 2]
    for i, n in enumerate(sizes):
        t0 = time.time()
        await run(f"calib-p{salt}-{i}", _ids(n, salt * 100 + i, vocab), 1, None)
        samples += _prefill_samples(steps_since(t0), decode_contexts=())
    for b, prompt in DECODE_PROBES:
        if prompt + DECODE_OUTPUT_TOKENS >= max_model_len:
            continue
        t0 = time.time()
        await asyncio.gather(*(run(f"calib-d{salt}-{b}-{prompt}-{j}", _ids(prompt, f"d{b}-{prompt}-{j}", vocab),
                                   DECODE_OUTPUT_TOKENS, None) for j in range(b)))
        steps = steps_since(t0)
        samples += _decode_samples(steps, b, prompt)
        gaps += step_gaps(steps, b)
    for k, (b, n) in enumerate(MIXED):
        if n >= max_model_len - 2:
            continue
        samples += await _mixed_probe(run, steps_since, vocab, b, n, f"{salt}-{k}")
    return {"samples": samples, "step_gaps_s": gaps}


async def _mixed_probe(run: RunFn, steps_since: StepsFn, vocab: int, num_decodes: int,
                       num_prefill: int, tag: str) -> list[dict]:
    started = [asyncio.Event() for _ in range(num_decodes)]
    decodes = [asyncio.ensure_future(run(f"calib-m{tag}-d{j}", _ids(DECODE_PROMPT_TOKENS, f"m{tag}-d{j}", vocab),
                                         4 * DECODE_OUTPUT_TOKENS, started[j])) for j in range(num_decodes)]
    await asyncio.gather(*(e.wait() for e in started))
    t0 = time.time()
    await run(f"calib-m{tag}-p", _ids(num_prefill, f"m{tag}-p", vocab), 1, None)
    steps = steps_since(t0)
    await asyncio.gather(*decodes)
    return _prefill_samples(steps, decode_contexts=(DECODE_PROMPT_TOKENS + 2 * DECODE_OUTPUT_TOKENS,) * num_decodes)


def _prefill_samples(steps: list[dict], decode_contexts: tuple[int, ...]) -> list[dict]:
    """Steps of one prompt's chunks (one prefilling request at a time): context accumulates."""
    out, context = [], 0
    for s in steps:
        if s["num_prefill_reqs"] != 1 or s["num_decode_reqs"] != len(decode_contexts):
            continue
        out.append({"prefill_tokens": s["num_prefill_tokens"], "prefill_context": context,
                    "decode_contexts": list(decode_contexts), "duration_s": s["elapsed_s"]})
        context += s["num_prefill_tokens"]
    return out


def _decode_samples(steps: list[dict], batch: int, prompt_tokens: int) -> list[dict]:
    mid_context = prompt_tokens + DECODE_OUTPUT_TOKENS // 2
    return [{"prefill_tokens": 0, "prefill_context": 0, "decode_contexts": [mid_context] * batch,
             "duration_s": s["elapsed_s"]}
            for s in steps if s["num_prefill_reqs"] == 0 and s["num_decode_reqs"] == batch]


def step_gaps(steps: list[dict], batch: int) -> list[float]:
    """Loop time of each steady decode step: its record's time after the previous step's record,
    less its own execution. Only pairs of consecutive decode-only steps of the full batch count
    (a step that admits or finishes a request does more than the steady loop)."""
    steady = [s["num_prefill_reqs"] == 0 and s["num_decode_reqs"] == batch for s in steps]
    return [max(0.0, b["t"] - a["t"] - b["elapsed_s"])
            for a, b, ok_a, ok_b in zip(steps, steps[1:], steady, steady[1:]) if ok_a and ok_b]


@dataclass(frozen=True)
class Calibration:
    """The step model (fitted execution + measured step gap) and how well the fitted execution
    part explains the samples it was fitted on."""

    model: StepTimeModel
    num_samples: int
    median_abs_rel_error: float
    seconds: float
    step_gap_s: float = 0.0
    one_at_a_time: bool = False  # the engines were probed one after another (a CPU host)

    def summary(self) -> dict[str, Any]:
        m = self.model
        return {"num_samples": self.num_samples, "median_abs_rel_error": self.median_abs_rel_error,
                "overhead_s": m.overhead_s, "execute_overhead_s": m.overhead_s - self.step_gap_s,
                "step_gap_s": self.step_gap_s, "s_per_linear_flop": m.s_per_linear_flop,
                "s_per_attention_flop": m.s_per_attention_flop, "s_per_kv_byte": m.s_per_kv_byte,
                "achieved_linear_gflops": 1e-9 / m.s_per_linear_flop if m.s_per_linear_flop else None,
                "seconds": self.seconds,
                "probed": "one engine at a time" if self.one_at_a_time else "all engines at once"}


def fit_step_model(hf_config: dict, kv: KVGeometry, sample_dicts: Sequence[dict],
                   seconds: float = 0.0, step_gaps_s: Sequence[float] = (),
                   one_at_a_time: bool = False) -> Calibration:
    """Fit the step-time model to the probes' samples (pooled over workers of one hardware), then
    add the median measured step gap to its per-step overhead."""
    spec = ModelSpec.from_hf_config(hf_config, dtype=None)
    samples = [StepSample(d["prefill_tokens"], d["prefill_context"], tuple(d["decode_contexts"]),
                          d["duration_s"]) for d in sample_dicts]
    model = StepTimeModel.fit(spec, kv, samples)
    errors = sorted(abs(model.predict(s.prefill_tokens, s.prefill_context, s.decode_contexts)
                        - s.duration_s) / s.duration_s for s in samples)  # fit() refused any <= 0
    med = errors[len(errors) // 2] if errors else float("nan")
    gap = statistics.median(step_gaps_s) if step_gaps_s else 0.0
    return Calibration(replace(model, overhead_s=model.overhead_s + gap), len(samples), med, seconds, gap,
                       one_at_a_time)

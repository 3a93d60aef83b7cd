"""A request as one simulated engine holds it (vLLM's `Request`, reduced to token counts).

A colocated request lives on one engine from prompt to last token. A disaggregated one is two
engine requests: a prefill-only one on the prefill worker (finishes after its prompt and holds
its blocks until the KV has been read), then one on the decode worker that waits for the KV to
arrive (`LOADING_REMOTE_KV`), recomputes the last prompt token and decodes.
"""
from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Any


class Phase(enum.IntEnum):
    """Where an engine request is; finished states last, as in vLLM."""

    WAITING = 0  # in the waiting queue, schedulable once its KV (if remote) has arrived
    LOADING_REMOTE_KV = 1  # blocks allocated on the decode worker, KV in flight
    RUNNING = 2
    HOLDING_KV = 3  # prefill-only request done; blocks kept until its transfer completes
    FINISHED = 4


@dataclass(eq=False)
class EngineRequest:
    """Token counts follow vLLM: `num_tokens` = prompt + generated so far; a step computes
    `num_tokens - num_computed_tokens` of them (or a chunk); when it reaches `num_tokens` the
    engine samples the next token. `job` is the simulator's client-side record of the request."""

    job: Any
    num_prompt_tokens: int
    max_output_tokens: int
    is_prefill_only: bool = False
    needs_remote_kv: bool = False
    num_tokens: int = 0
    num_computed_tokens: int = 0
    num_generated: int = 0
    num_blocks: int = 0
    num_preemptions: int = 0
    admission_index: int = -1
    phase: Phase = Phase.WAITING
    held: EngineRequest | None = None  # decode side: the prefill side whose blocks hold our KV

    def __post_init__(self) -> None:
        if not self.num_tokens:
            self.num_tokens = self.num_prompt_tokens

    @property
    def num_remaining_tokens(self) -> int:
        return self.num_tokens - self.num_computed_tokens

    @property
    def is_decoding(self) -> bool:
        """One token left to compute: a decode (or the last prompt token after a KV load)."""
        return self.num_remaining_tokens == 1

    def sample(self) -> bool:
        """Record one sampled token; True when the request has all its output."""
        self.num_generated += 1
        self.num_tokens += 1
        return self.num_generated >= self.max_output_tokens

    def reset_for_recompute(self) -> None:
        """Preempted: blocks gone, everything so far (prompt + output) is prefilled again."""
        self.num_computed_tokens = 0
        self.num_blocks = 0
        self.needs_remote_kv = False
        self.num_preemptions += 1
        self.phase = Phase.WAITING

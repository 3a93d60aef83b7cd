"""The CPU host a CPU deployment's engines share with the request path.

On a CPU host each engine's model runs on a core of its own (vLLM's worker process, pinned).
Everything else shares the other cores: each engine's loop (vLLM's EngineCore process, which
schedules a step, then waits for the worker by spinning on `sched_yield`), and the request
path, which carries every output token from the engine through the worker's vLLM front-end,
the router and the client. The loop and the path want the same cores at the same moment, the
end of a step, and the engine's next step waits. Measured here (run 3, README): the
decode-only worker of the disaggregated deployment stepped every 10-12.6 ms (median
inter-token latency) where its calibration, on the idle engine, said 7.5 ms. The path spends
about 3.5 ms of CPU per streamed token (`bench.host_cpu`). A simulator with private cores
shows none of it.

The model: a step takes longer by the path's CPU for the tokens it streams, spread over the
cores no engine computes on while it runs (at least one: with none free, the path runs on the
engines' own cores). Both inputs, the host's cores and the path's CPU per token, are measured on
the idle live deployment before its run; nothing is fitted to the run. GPU configs have no
host: there the engines compute elsewhere.
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class HostSpec:
    """`num_cores`: the host's cores (0: no host model). `cpu_s_per_token`: the request path's
    CPU per streamed token."""

    num_cores: int = 0
    cpu_s_per_token: float = 0.0

    def __post_init__(self) -> None:
        if self.num_cores < 0:
            raise ValueError(f"host.num_cores must be >= 0, got {self.num_cores}")
        if self.cpu_s_per_token < 0:
            raise ValueError(f"host.cpu_s_per_token must be >= 0, got {self.cpu_s_per_token}")

    @property
    def is_modelled(self) -> bool:
        return self.num_cores > 0

    def step_delay_s(self, num_busy_engines: int, num_streamed_tokens: int) -> float:
        """What a step streaming `num_streamed_tokens` takes beyond its engine time, with
        `num_busy_engines` computing (its own included)."""
        if not self.is_modelled or num_streamed_tokens <= 0:
            return 0.0
        free_cores = max(1, self.num_cores - num_busy_engines)
        return num_streamed_tokens * self.cpu_s_per_token / free_cores

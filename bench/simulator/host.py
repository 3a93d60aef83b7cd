"""The CPU host a CPU deployment's engines share with the request path.

On a CPU host each engine's model runs on a core of its own (vLLM's worker process, pinned).
Everything else runs wherever the kernel puts it: the client, the router, the workers' vLLM
front-ends, Ray, and each engine's own loop (vLLM's EngineCore process, which schedules and
then waits for the worker's result by spinning on `sched_yield`). On a free core that costs
the engines nothing; beside a computing engine it does. Measured here: one busy-looping process
on an idle engine's spare core made its 5 ms decode steps 1.3-1.7x longer (its EngineCore lost
the spare core), both engines decoding at once 1.0-1.7x; the live engines ran 1.3-2.0x their
idle step times at 2 req/s (`bench.cpu_contention`). A simulator with private cores shows none
of it.

The model: the CPU demand off the engines' own cores, in cores, is the path's idle background,
plus the CPU its recent requests and streamed tokens brought over a sliding window, plus each
busy engine's loop. When a step starts, demand beyond the cores no engine computes on lands on
the busy engines' cores, evenly, and a step on a core that gives a share x of its time away
takes 1 / (1 - x) as long. x is capped at `max_share`: the kernel's fair share keeps an
engine's thread at half of its core against one competing thread.

All inputs are measured on the idle live deployment before its run (`bench.host_cpu`); none is
fitted to the run. GPU configs have no host: the engines compute elsewhere.
"""
from __future__ import annotations

import collections
from dataclasses import dataclass


@dataclass(frozen=True)
class HostSpec:
    """`num_cores`: the host's cores (0: no host model). `background_cores`: what the path's
    processes use idle. `cpu_s_per_request` / `cpu_s_per_token`: the path's CPU per request
    sent and per token streamed. `engine_loop_cores`: what a busy engine's loop uses beside its
    model's core. `window_s`: how far back the path's demand looks."""

    num_cores: int = 0
    background_cores: float = 0.0
    cpu_s_per_request: float = 0.0
    cpu_s_per_token: float = 0.0
    engine_loop_cores: float = 0.0
    window_s: float = 0.5
    max_share: float = 0.5

    def __post_init__(self) -> None:
        if self.num_cores < 0:
            raise ValueError(f"host.num_cores must be >= 0, got {self.num_cores}")
        for name in ("background_cores", "cpu_s_per_request", "cpu_s_per_token", "engine_loop_cores"):
            if getattr(self, name) < 0:
                raise ValueError(f"host.{name} must be >= 0, got {getattr(self, name)}")
        if not self.window_s > 0:
            raise ValueError(f"host.window_s must be > 0, got {self.window_s}")
        if not 0 <= self.max_share < 1:
            raise ValueError(f"host.max_share must be in [0, 1), got {self.max_share}")

    @property
    def is_modelled(self) -> bool:
        return self.num_cores > 0


class HostLoad:
    """The path's recent CPU on one simulated host, and what it does to a starting step."""

    def __init__(self, spec: HostSpec) -> None:
        self.spec = spec
        self._recent: collections.deque[tuple[float, float]] = collections.deque()  # (time, cpu s)
        self._recent_cpu_s = 0.0

    def request(self, now_s: float) -> None:
        self._add(now_s, self.spec.cpu_s_per_request)

    def tokens(self, now_s: float, num_tokens: int = 1) -> None:
        self._add(now_s, num_tokens * self.spec.cpu_s_per_token)

    def demand_cores(self, now_s: float) -> float:
        """The path's CPU demand now: background + its window's CPU / the window."""
        horizon = now_s - self.spec.window_s
        while self._recent and self._recent[0][0] <= horizon:
            self._recent_cpu_s -= self._recent.popleft()[1]
        return self.spec.background_cores + max(0.0, self._recent_cpu_s) / self.spec.window_s

    def stretch(self, now_s: float, num_busy_engines: int) -> float:
        """The factor a step starting now takes longer by, with `num_busy_engines` computing
        (this one included)."""
        if not self.spec.is_modelled or num_busy_engines < 1:
            return 1.0
        free_cores = max(0, self.spec.num_cores - num_busy_engines)
        demand = self.demand_cores(now_s) + num_busy_engines * self.spec.engine_loop_cores
        share = max(0.0, demand - free_cores) / num_busy_engines
        return 1.0 / (1.0 - min(share, self.spec.max_share))

    def _add(self, now_s: float, cpu_s: float) -> None:
        if cpu_s > 0 and self.spec.is_modelled:
            self._recent.append((now_s, cpu_s))
            self._recent_cpu_s += cpu_s

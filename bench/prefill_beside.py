"""How much longer a prefill takes on a CPU host while another engine prefills: measured on an
idle live deployment before a run, for the simulator's host model (form `prefill-neighbour`).

The load probe (`bench.host_load`) measures a prefill beside another engine's decode steps; the
simulator's decode-neighbour form took a prefill beside another engine's step with a prompt's
chunk in it at its engine time, as if the neighbour, computing on a core of its own, took
nothing from it. It does: each of its requests comes through the request path, is scheduled and
handed to its model process, and each of its steps ends in output work, all on the two shared
cores. Measured here (stop 37, 1,024-token probes, their part inside their engine, medians of
six): colocated 112 -> 144 ms and 120 -> 146 ms beside back-to-back 1,024-token prompts on the
other engine (x1.28, x1.21); adaptive x1.21 and x1.35; hybrid's prefill-only engine beside the
other engine's prefills x1.29 and x1.19. Beside 512-token prompts, twice as many requests a
second, x1.2-1.8. Over runs 59-66 the decode-neighbour form simulated colocated 14-20% fast.

The probe: `REPEATS` probes with nothing else running, then `REPEATS` beside a background of one
`BACKGROUND_PROMPT_TOKENS` prompt at a time (one output token, sent again as soon as it ends), on
the other engine; `ROUNDS` times, alternating, so that a drift of the host lands on both sides.
A probe beside is sent `PROBE_DELAY_S` after a background prompt was sent, so that the router,
least loaded first, has placed that prompt and sends the probe to the other engine; a probe that
shared its engine with a background prompt all the same is dropped and counted. What is
measured is the probe's part inside its engine (vLLM's timestamps, the router's log), not its
TTFT: on hybrid a probe's first token waits for the busy engine's step after its hand-over.
The stretch is the median part beside over the median part alone.
"""
from __future__ import annotations

import statistics
import threading
import time
from dataclasses import dataclass
from typing import Any, Callable, Mapping, Sequence

from bench.router_log import engine_parts_by_id
from schedulers.types import ROLE_BOTH, ROLE_PREFILL, ROUTE_COLOCATED, ROUTE_DISAGGREGATED

PROBE_PROMPT_TOKENS = 1024
BACKGROUND_PROMPT_TOKENS = 1024  # the probe's size: a neighbour prefilling prompts like it
REPEATS = 4
ROUNDS = 2
PROBE_DELAY_S = 0.02  # after a background prompt is sent: the router has placed it by then
WAIT_S = 10.0  # for a background prompt to be sent; longer: the background has stalled
PAUSE_S = 0.2  # between probes alone
# Salts of the probes' and the background's prompts: apart from every other probe's
# (`bench.host_load` uses under 10,000), so that no prompt comes from an engine's prefix cache.
PROBE_SALT = 7_000_000
BACKGROUND_SALT = 8_000_000


@dataclass(frozen=True)
class ProbeRoutes:
    """`probe`: the route the probe is sent on; `background`: the background prompts'; `part`:
    which engine's part of the probe is its prefill ("decode": a colocated request's engine,
    "prefill": a disaggregated request's prefill engine)."""

    probe: str
    background: str
    part: str


@dataclass(frozen=True)
class PrefillBeside:
    """`factor`: median part beside over median part alone; `alone_s` / `beside_s`: every kept
    probe's part inside its engine (seconds); `dropped`: probes beside that shared their engine
    with a background prompt; `background`: the background prompts served."""

    factor: float
    alone_s: tuple[float, ...]
    beside_s: tuple[float, ...]
    dropped: int
    background: int
    routes: ProbeRoutes
    probe_prompt_tokens: int = PROBE_PROMPT_TOKENS
    background_prompt_tokens: int = BACKGROUND_PROMPT_TOKENS

    def to_dict(self) -> dict[str, Any]:
        return {"factor": self.factor, "alone_s": list(self.alone_s), "beside_s": list(self.beside_s),
                "dropped": self.dropped, "background": self.background,
                "routes": {"probe": self.routes.probe, "background": self.routes.background,
                           "part": self.routes.part},
                "probe_prompt_tokens": self.probe_prompt_tokens,
                "background_prompt_tokens": self.background_prompt_tokens}


def probe_routes(role_counts: Mapping[str, int]) -> ProbeRoutes | None:
    """Where to send the probe and its background so that they land on two engines that
    prefill, or None where fewer than two engines prefill (nothing prefills beside another)."""
    both, prefill = role_counts.get(ROLE_BOTH, 0), role_counts.get(ROLE_PREFILL, 0)
    if both >= 2:
        return ProbeRoutes(ROUTE_COLOCATED, ROUTE_COLOCATED, "decode")
    if prefill >= 2:
        return ProbeRoutes(ROUTE_DISAGGREGATED, ROUTE_DISAGGREGATED, "prefill")
    if prefill and both:  # hybrid: the probe on the prefill-only engine, the background beside it
        return ProbeRoutes(ROUTE_DISAGGREGATED, ROUTE_COLOCATED, "prefill")
    return None


def stretch_factor(alone_s: Sequence[float], beside_s: Sequence[float]) -> float:
    """Median part beside over median part alone (below 1 kept as measured: the simulator floors it)."""
    if not alone_s or not beside_s:
        raise ValueError(f"the probe needs parts alone and beside, got {len(alone_s)} and {len(beside_s)}")
    if min(alone_s) <= 0 or min(beside_s) <= 0:
        raise ValueError("a probe's part inside its engine must be positive")
    return statistics.median(beside_s) / statistics.median(alone_s)


def engine_of(record: Any, route: str) -> str | None:
    """The engine that prefilled a request (`bench.run.RequestRecord`) sent on `route`."""
    return record.prefill_worker if route == ROUTE_DISAGGREGATED else record.decode_worker


def shared_engine(probe: Any, background: Sequence[Any], routes: ProbeRoutes) -> bool:
    """Whether a background prompt that overlapped the probe (sent to first token) ran on its engine."""
    engine = engine_of(probe, routes.probe)
    end = probe.first_token_s if probe.first_token_s is not None else probe.finish_s
    return any(engine_of(b, routes.background) == engine for b in background
               if b.arrival_s <= end and (b.finish_s is None or b.finish_s >= probe.arrival_s))


class BackgroundPrompts:
    """One prompt at a time through `stream` on `route`, sent again as soon as it ends, until
    `stop()`; a failed one is raised by `stop()`. `records`: every prompt's `RequestRecord`;
    `sent`: set each time a prompt is about to be sent."""

    def __init__(self, stream: Callable[..., Any], vocab_size: int, route: str, salt: int) -> None:
        self._stream, self._vocab, self._route, self._salt = stream, vocab_size, route, salt
        self._stop = threading.Event()
        self.sent = threading.Event()
        self.records: list[Any] = []
        self._errors: list[BaseException] = []
        self._thread = threading.Thread(target=self._run, daemon=True, name="bg-prompts")
        self._thread.start()

    def _run(self) -> None:
        n = 0
        try:
            while not self._stop.is_set():
                self.sent.set()
                record = one_prompt(self._stream, self._vocab, BACKGROUND_PROMPT_TOKENS, self._route,
                                    self._salt + n)
                self.records.append(record)
                n += 1
        except BaseException as error:  # surfaced by stop()
            self._errors.append(error)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()
        if self._errors:
            raise RuntimeError(f"a background prompt failed: {self._errors[0]!r}") from self._errors[0]


def one_prompt(stream: Callable[..., Any], vocab_size: int, num_tokens: int, route: str, salt: int) -> Any:
    """One `num_tokens` prompt with one output token through the benchmarks' own client; its
    `RequestRecord`, or RuntimeError if it failed."""
    from bench.run import run_workload
    from bench.workloads import fixed

    (record,) = run_workload(stream, fixed(1, num_tokens, 1), vocab_size, route=route, progress=False, salt=salt)
    if not record.ok or record.first_token_s is None:
        raise RuntimeError(f"a prefill-beside probe failed: {record.error or 'no token came back'}")
    if record.route != route:  # a fallback: served elsewhere than the probe is about
        raise RuntimeError(f"a prefill-beside prompt sent on route {route!r} was served on {record.route!r}")
    return record


def measure_prefill_beside(dep: Any, routes: ProbeRoutes, router_log: Callable[[], Sequence[Mapping[str, Any]]],
                           repeats: int = REPEATS, rounds: int = ROUNDS) -> PrefillBeside:
    """The probe (module docstring) on `dep`, otherwise idle. `router_log()` returns the router's
    log of the requests served so far (`bench.router_log`), which holds each probe's parts inside
    its engines."""
    alone: list[Any] = []
    beside: list[Any] = []  # the probes beside that had their engine to themselves
    dropped = background_served = 0
    salt = PROBE_SALT
    # One probe first, not counted: no one-off cost of the first such prompt lands in the baseline.
    one_prompt(dep.stream, dep.vocab_size, PROBE_PROMPT_TOKENS, routes.probe, salt)
    for r in range(rounds):
        for _ in range(repeats):
            salt += 1
            alone.append(one_prompt(dep.stream, dep.vocab_size, PROBE_PROMPT_TOKENS, routes.probe, salt))
            time.sleep(PAUSE_S)
        background = BackgroundPrompts(dep.stream, dep.vocab_size, routes.background, BACKGROUND_SALT + 10_000 * r)
        probes = []
        try:
            for _ in range(repeats):
                salt += 1
                background.sent.clear()
                if not background.sent.wait(WAIT_S):
                    raise RuntimeError(f"no background prompt was sent in {WAIT_S:.0f} s")
                time.sleep(PROBE_DELAY_S)
                probes.append(one_prompt(dep.stream, dep.vocab_size, PROBE_PROMPT_TOKENS, routes.probe, salt))
        finally:
            background.stop()
        background_served += len(background.records)
        kept = [p for p in probes if not shared_engine(p, background.records, routes)]
        dropped += len(probes) - len(kept)
        beside += kept
    if not beside:
        raise RuntimeError(f"every probe beside ({dropped}) shared its engine with a background prompt: "
                           f"the router did not send them to two engines")
    parts = engine_parts_by_id(router_log())
    alone_s, beside_s = _parts_of(alone, parts, routes.part), _parts_of(beside, parts, routes.part)
    return PrefillBeside(stretch_factor(alone_s, beside_s), tuple(alone_s), tuple(beside_s), dropped,
                         background_served, routes)


def _parts_of(records: Sequence[Any], parts: Mapping[str, Mapping[str, Any]], part: str) -> list[float]:
    """Each record's part `part` inside its engine, from `parts`; RuntimeError where one is missing
    (the router logs a request's parts only where it predicted it: the deployment needs its
    calibration)."""
    out = []
    for rec in records:
        value = (parts.get(rec.served_id) or {}).get(part)
        if value is None:
            raise RuntimeError(f"the router's log has no {part!r} engine part for probe {rec.served_id}: "
                               f"is the deployment calibrated (scheduler.calibrate)?")
        out.append(float(value))
    return out

"""Per-request choice between colocated and disaggregated from predicted costs."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Sequence

from schedulers.candidates import COLOCATED_ROLES, all_pairs, serving
from schedulers.route_prediction import RoutePrediction, RoutePredictor
from schedulers.slo import SloTable
from schedulers.step_time import StepTimeModel
from schedulers.types import (ROUTE_COLOCATED, ROUTE_DISAGGREGATED, ClusterView, Decision,
                              LinkEstimate, NoCandidateError, RequestInfo)


def lost_to_goodput(ttft_s: float, ttft_slo_s: float, lost_ttft_ratio: float) -> bool:
    """A predicted TTFT past `lost_ttft_ratio` times its SLO: the request is lost to goodput there."""
    return ttft_s / ttft_slo_s > lost_ttft_ratio


def _is_lost(p: RoutePrediction, lost_ttft_ratio: float) -> bool:
    return lost_to_goodput(p.ttft_s, p.ttft_slo_s, lost_ttft_ratio)


MEETING_ORDERS = ("ttft", "load")


def _candidate_key(p: RoutePrediction, lost_ttft_ratio: float, meeting_order: str = "ttft") -> tuple:
    """Within a route: SLO-meeting first, and among them the lowest TTFT (`meeting_order`
    "ttft") or the least loaded worker ("load"); else least violation; a candidate lost to
    goodput (TTFT past `lost_ttft_ratio` times its SLO) last, and among those the least harm to
    the requests decoding, then load; ties on load."""
    if p.meets_slo:
        if meeting_order == "load":
            return (0, p.decode_worker.load_key, p.ttft_s)
        return (0, p.ttft_s, p.decode_worker.load_key)
    if _is_lost(p, lost_ttft_ratio):
        return (2, p.decode_harm, p.decode_worker.load_key)
    return (1, p.violation, p.decode_worker.load_key)


def _worker_time_key(p: RoutePrediction) -> tuple:
    """Both meet the SLOs: the one cheaper in worker time; colocated wins exact ties."""
    return (p.engine_s, p.route != ROUTE_COLOCATED)


def _decoder_time_key(p: RoutePrediction) -> tuple:
    """Both miss by about as much (or both meet, with `both_meet="decoder"`): the one that takes
    less from decode-capable workers (what running and arriving requests need), then less worker
    time; colocated wins exact ties."""
    return (p.decoder_engine_s, p.engine_s, p.route != ROUTE_COLOCATED)


# Between two routes that both meet the SLOs (`AdaptivePolicy.both_meet`): the one cheaper in engine
# seconds anywhere, or the one taking less from decode-capable workers.
BOTH_MEET_KEYS = {"engine": _worker_time_key, "decoder": _decoder_time_key}


def _lost_key(p: RoutePrediction) -> tuple:
    """Lost either way: not through a stalled worker, which may never serve it (a stopped
    process); then as `_decoder_time_key`."""
    return (p.through_stall,) + _decoder_time_key(p)


# Which rule picks between two routes that both miss (`miss_rule`); bench.route_choices reports by it
MISS_LOST = "lost both ways"  # both past lost_ttft_ratio x SLO: the one that costs the others less
MISS_BY_VIOLATION = "by violation"  # one misses by more than the tolerance: the other
MISS_TIE = "about as much"  # within the tolerance: the one taking less from decode-capable workers
MISS_RULES = (MISS_LOST, MISS_BY_VIOLATION, MISS_TIE)


def miss_rule(violations: tuple[float, float], lost: tuple[bool, bool], tolerance: float) -> str:
    """The rule that chooses between two routes that both miss their SLOs (MISS_RULES), from
    their violations and whether each is lost to goodput (`_is_lost`)."""
    if all(lost):
        return MISS_LOST
    lo, hi = sorted(violations)
    return MISS_BY_VIOLATION if hi > lo * (1 + tolerance) else MISS_TIE


def _better_route(a: RoutePrediction, b: RoutePrediction, tolerance: float,
                  lost_ttft_ratio: float, both_meet: str = "engine") -> RoutePrediction:
    if a.meets_slo != b.meets_slo:
        return a if a.meets_slo else b
    if a.meets_slo:
        return min(a, b, key=BOTH_MEET_KEYS[both_meet])
    rule = miss_rule((a.violation, b.violation), (_is_lost(a, lost_ttft_ratio), _is_lost(b, lost_ttft_ratio)),
                     tolerance)
    if rule == MISS_LOST:
        return min(a, b, key=_lost_key)
    if rule == MISS_BY_VIOLATION:
        return min(a, b, key=lambda p: p.violation)
    return min(a, b, key=_decoder_time_key)


def _summary(p: RoutePrediction) -> str:
    parts = f"queue {p.prefill.queue_s:.3f} + prefill {p.prefill.prefill_s:.3f}"
    if p.prefill_worker is not None:
        parts += f" + transfer {p.transfer_s:.3f}"
        if p.decode_wait_s:
            parts += f" + wait for {p.decode_worker.worker_id} {p.decode_wait_s:.3f}"
        parts += f" + first step {p.first_step_s:.3f}"
    if p.path_s:
        parts += f" + path {p.path_s:.3f}"
    verdict = "meets" if p.meets_slo else "misses"
    return (f"{p.route} on {p.where}: TTFT {p.ttft_s:.3f} s ({parts}) vs SLO {p.ttft_slo_s:.3f} s, "
            f"ITL inflicted {p.prefill.itl_s:.3f} s, decode harm {p.decode_harm:.2f}, "
            f"engine {p.engine_s:.3f} s: {verdict}")


@dataclass(frozen=True)
class AdaptivePolicy:
    """Route each request to the candidate whose predictions best fit its SLOs.

    For every healthy colocated worker W and every (prefill, decode) pair P != D with a link
    estimate (see `route_prediction`):
        ok(c) = TTFT(c) <= TTFT SLO and decode harm(c) <= 1
    (decode harm: the prefill's delay to the requests decoding beside it over their TPOT slack,
    `RoutePrediction.decode_harm`)
    Best of each route: ok with the lowest TTFT, else the least violation
    max(TTFT / SLO, decode harm); a candidate whose TTFT is past `lost_ttft_ratio` times its
    SLO comes last, and among such the least decode harm, then the least load: the request's
    own TTFT is lost to goodput there, the decodes beside it are not yet. (Taking the least
    violation, as before, sent it to the worker with the shortest queue, often the one with the
    most decodes: on run 54's records, simulated, colocated against adaptive with the same
    measurements, this raised adaptive's requests within both SLOs at 0.75 / 0.9 / 1.0 of
    capacity from 142 / 108 / 84 to 149 / 125 / 117 of 240, colocated's being 126 / 97 / 67.)
    Between routes: if one is ok, it; if both are ok, the one
    cheaper in worker time (engine seconds; exact ties: colocated); if both miss, the one that
    violates less by more than `violation_tolerance` (relative), and when they miss by about as
    much, the one taking less engine time from decode-capable workers. A long prompt that misses
    its SLO either way thus goes to a prefill-only worker, keeping the decoder free for what
    arrives next. When both routes put the TTFT past `lost_ttft_ratio` times its SLO, the request
    is lost to goodput whichever it takes (no prediction here errs by that much), so the choice
    is only what it costs the others: the one taking less from decode-capable workers, unless
    it passes a stalled worker and the other does not (stall.py: a stopped process may never
    serve it; hybrid's prefill worker stopped for 3 s took 1-5 of 5 lost prompts before). Measured
    (hybrid at 2.1 req/s on this CPU, 2026-12-02): a 3,922-token prompt predicted at 18x its SLO
    colocated and 36x disaggregated went colocated by the least violation, held the only decoder
    for 4.2 s, and the 12 requests after it waited 0.7-4.4 s for their first tokens.

    `default_link`: used for pairs the view has no estimate for; None skips such pairs.
    """

    step_model: StepTimeModel
    slo_table: SloTable = field(default_factory=SloTable)
    chunk_tokens: int = 2048
    decode_context_tokens: int = 1024
    default_link: LinkEstimate | None = None
    violation_tolerance: float = 0.1
    lost_ttft_ratio: float = 2.0
    meeting_order: str = "ttft"
    credit_queue_head: bool = True  # RoutePredictor's: a queue's wait less what its head has had
    wait_running_step: bool = False  # RoutePredictor's: a prompt waits out half the running step
    # Both routes meet the SLOs: "engine" takes the one cheaper in engine seconds (usually colocated),
    # "decoder" the one taking less from decode-capable workers (a prefill-only worker's prefill is
    # free to them). Simulated 4 x H100 on 2 prefill + 2 both, "decoder" gained 12-21% at 64 req/s
    # (stop 60); live on this host's hybrid it shipped 62% of prompts against 17% and lost x0.859,
    # 7 rounds of 8: a shipped short prompt's hand-over, 70-107 ms against a 200 ms SLO, left it
    # missing on the scatter (17% of those predicted to meet; docs/MEASUREMENTS.md stop 61).
    both_meet: str = "engine"
    name: str = "adaptive"

    def __post_init__(self) -> None:
        if self.chunk_tokens <= 0 or self.decode_context_tokens < 0:
            raise ValueError("chunk_tokens must be > 0 and decode_context_tokens >= 0")
        if self.lost_ttft_ratio < 1:
            raise ValueError(f"lost_ttft_ratio must be >= 1, got {self.lost_ttft_ratio}")
        if self.meeting_order not in MEETING_ORDERS:
            raise ValueError(f"meeting_order must be one of {MEETING_ORDERS}, got {self.meeting_order!r}")
        if self.both_meet not in BOTH_MEET_KEYS:
            raise ValueError(f"both_meet must be one of {tuple(BOTH_MEET_KEYS)}, got {self.both_meet!r}")

    def decide(self, request: RequestInfo, view: ClusterView) -> Decision:
        candidates = self._colocated(request, view) + self._disaggregated(request, view)
        if not candidates:
            raise NoCandidateError(f"request {request.request_id}: no decode-capable worker can take "
                                   f"it (down, or max_model_len too short)")
        best_by_route = {}
        for c in sorted(candidates, key=lambda c: _candidate_key(c, self.lost_ttft_ratio, self.meeting_order)):
            best_by_route.setdefault(c.route, c)
        chosen = None
        for p in best_by_route.values():
            chosen = p if chosen is None else _better_route(chosen, p, self.violation_tolerance,
                                                            self.lost_ttft_ratio, self.both_meet)
        return self._decision(chosen, [p for p in best_by_route.values() if p is not chosen],
                              request, view)

    def _slos(self, request: RequestInfo) -> tuple[float, float]:
        return self.slo_table.for_request(request)

    def _predictor(self) -> RoutePredictor:
        return RoutePredictor(self.step_model, self.chunk_tokens, self.decode_context_tokens,
                              self.credit_queue_head, self.wait_running_step)

    def _colocated(self, request: RequestInfo, view: ClusterView) -> list[RoutePrediction]:
        workers = serving(view, COLOCATED_ROLES, request)
        predictor, slos = self._predictor(), self._slos(request)
        path_s = view.path_s.get(ROUTE_COLOCATED, 0.0)
        return [predictor.colocated(request, w, slos, path_s) for w in workers]

    def _disaggregated(self, request: RequestInfo, view: ClusterView) -> list[RoutePrediction]:
        predictor, slos = self._predictor(), self._slos(request)
        kv_bytes = (view.kv_bytes_per_token * request.num_prompt_tokens if view.kv_bytes_per_token
                    else self.step_model.kv.bytes_for_tokens(request.num_prompt_tokens))
        path_s = view.path_s.get(ROUTE_DISAGGREGATED, 0.0)
        parts = {}
        predictions = []
        for prefill, decode in all_pairs(view, request):
            link = view.link(prefill.worker_id, decode.worker_id) or self.default_link
            if link is None:
                continue
            if prefill.worker_id not in parts:
                parts[prefill.worker_id] = predictor.prefill_on(request, prefill)
            predictions.append(predictor.disaggregated(request, prefill, decode, parts[prefill.worker_id],
                                                       link, kv_bytes, slos, path_s))
        return predictions

    def _decision(self, chosen: RoutePrediction, others: Sequence[RoutePrediction],
                  request: RequestInfo, view: ClusterView) -> Decision:
        predictions = {"ttft_slo_s": chosen.ttft_slo_s, "tpot_slo_s": chosen.tpot_slo_s}
        for p in (*others, chosen):  # the chosen candidate's figures win a shared route prefix
            predictions.update(p.as_dict())
        reason = "chose " + _summary(chosen)
        if others:
            reason += "; rather than " + "; ".join(_summary(p) for p in others)
        elif not (pairs := all_pairs(view, request)):
            reason += "; no prefill/decode pair to disaggregate"
        else:
            reason += f"; no link estimate for any of {len(pairs)} prefill/decode pairs"
        prefill_id = chosen.prefill_worker.worker_id if chosen.prefill_worker else None
        return Decision(chosen.route, chosen.decode_worker.worker_id, prefill_id, reason + ".",
                        chosen.ttft_s, predictions)

"""`pd-serve diagnose`: which bottleneck path is active, with the numbers, and what to change first.

The paths and the queries are the seeds' (vLLM's metrics, renamed `pd_serve:`):

| path                 | evidence over the window                                                  |
|----------------------|---------------------------------------------------------------------------|
| prefill interference | p99 TTFT far above p50 (the tail), p99 prefill time rising with it, and    |
|                      | long prompts mixed into short ones (prompt-length p99 >> p50)              |
| KV pressure          | waiting requests rising while KV cache usage is at or above 0.8            |
| transfer-bound       | KV transfer a large share of the disaggregated requests' TTFT              |

What to change, in the seeds' order: chunk size first, then length-based routing, then more
prefill workers / disaggregation. `diagnose()` is pure (thresholds are named parameters);
`collect()` does the scraping.
"""
from __future__ import annotations

import statistics
import time
from dataclasses import asdict, dataclass, field
from typing import Callable

from pd_serve.metrics_window import Snapshot, parse_snapshot

P = "pd_serve:"
PREFILL_INTERFERENCE = "prefill interference"
KV_PRESSURE = "KV pressure"
TRANSFER_BOUND = "transfer-bound"
NONE = "none"


@dataclass(frozen=True)
class Thresholds:
    """`tail_ratio`: p99/p50 TTFT that counts as a tail (3: the seeds' 200 ms p50 vs 3-5 s p99
    is 15-25). `min_tail_s`: p99 - p50 below this is noise. `prefill_share`: p99 prefill time
    over p99 TTFT for the prefill to explain the tail. `min_correlation`: p99 TTFT and p99
    prefill per interval must move together (checked with >= 3 intervals). `length_mix_ratio`:
    prompt-length p99/p50 that counts as long prompts mixed in. `kv_usage_high`: the seeds' 0.8.
    `transfer_share`: KV transfer seconds / TTFT of disaggregated requests. `min_requests`:
    fewer requests in the window say nothing."""

    tail_ratio: float = 3.0
    min_tail_s: float = 0.05
    prefill_share: float = 0.5
    min_correlation: float = 0.5
    length_mix_ratio: float = 4.0
    kv_usage_high: float = 0.8
    transfer_share: float = 0.3
    min_requests: int = 10
    min_disaggregated: int = 3


@dataclass(frozen=True)
class WindowStats:
    """What the metrics say about one window (seconds unless named otherwise)."""

    duration_s: float
    num_requests: int
    ttft_p50_s: float | None
    ttft_p99_s: float | None
    prefill_p99_s: float | None
    prompt_tokens_p50: float | None
    prompt_tokens_p99: float | None
    ttft_p99_by_interval: tuple[float | None, ...]
    prefill_p99_by_interval: tuple[float | None, ...]
    num_waiting_by_scrape: tuple[float, ...]   # summed over workers
    kv_usage_by_scrape: tuple[float, ...]      # the fullest worker
    num_disaggregated: int
    transfer_share: float | None                # transfer seconds / TTFT, disaggregated requests


@dataclass(frozen=True)
class Finding:
    path: str
    evidence: str


@dataclass(frozen=True)
class Diagnosis:
    active: tuple[Finding, ...]          # in the seeds' order; empty: none
    advice: tuple[str, ...]              # what to change, first thing first
    notes: tuple[str, ...] = field(default=())

    @property
    def verdict(self) -> str:
        return ", ".join(f.path for f in self.active) or NONE


# ---- window statistics ---------------------------------------------------------------------
def window_stats(snapshots: list[Snapshot]) -> WindowStats:
    """Statistics of the window from the first to the last snapshot (at least two)."""
    if len(snapshots) < 2:
        raise ValueError("a window needs at least two snapshots")
    first, last = snapshots[0], snapshots[-1]
    ttft = _delta(first, last, P + "time_to_first_token_seconds")
    prefill = _delta(first, last, P + "request_prefill_time_seconds")
    prompt = _delta(first, last, P + "request_prompt_tokens")
    disagg_ttft = _delta(first, last, P + "time_to_first_token_seconds", route="disaggregated")
    transfer = _delta(first, last, P + "kv_transfer_seconds")
    pairs = list(zip(snapshots, snapshots[1:]))
    return WindowStats(
        duration_s=last.t - first.t, num_requests=int(round(ttft.count)),
        ttft_p50_s=ttft.quantile(0.5), ttft_p99_s=ttft.quantile(0.99),
        prefill_p99_s=prefill.quantile(0.99),
        prompt_tokens_p50=prompt.quantile(0.5), prompt_tokens_p99=prompt.quantile(0.99),
        ttft_p99_by_interval=tuple(_delta(a, b, P + "time_to_first_token_seconds").quantile(0.99)
                                   for a, b in pairs),
        prefill_p99_by_interval=tuple(_delta(a, b, P + "request_prefill_time_seconds").quantile(0.99)
                                      for a, b in pairs),
        num_waiting_by_scrape=tuple(s.total(P + "num_requests_waiting") for s in snapshots),
        kv_usage_by_scrape=tuple(max(s.samples(P + "kv_cache_usage_perc").values(), default=0.0)
                                 for s in snapshots),
        num_disaggregated=int(round(disagg_ttft.count)),
        transfer_share=transfer.sum / disagg_ttft.sum if disagg_ttft.sum > 0 else None)


def _delta(first: Snapshot, last: Snapshot, name: str, **labels: str):
    return last.histogram(name, **labels).minus(first.histogram(name, **labels))


# ---- the rules -----------------------------------------------------------------------------
def diagnose(w: WindowStats, th: Thresholds = Thresholds()) -> Diagnosis:
    notes = []
    if w.num_requests < th.min_requests:
        notes.append(f"only {w.num_requests} requests finished in the window (< {th.min_requests}): "
                     "TTFT evidence is too thin to judge")
    active = [f for f in (_prefill_interference(w, th, notes), _kv_pressure(w, th),
                          _transfer_bound(w, th)) if f is not None]
    return Diagnosis(tuple(active), _advice(active), tuple(notes))


def _prefill_interference(w: WindowStats, th: Thresholds, notes: list[str]) -> Finding | None:
    if w.num_requests < th.min_requests or None in (w.ttft_p50_s, w.ttft_p99_s, w.prefill_p99_s):
        return None
    p50, p99, pre = w.ttft_p50_s, w.ttft_p99_s, w.prefill_p99_s
    has_tail = p99 >= th.tail_ratio * max(p50, 1e-9) and p99 - p50 >= th.min_tail_s
    is_prefill = pre >= th.prefill_share * p99
    corr = _correlation(w.ttft_p99_by_interval, w.prefill_p99_by_interval)
    moves_together = corr is None or corr >= th.min_correlation
    mix = (w.prompt_tokens_p99 / max(w.prompt_tokens_p50, 1.0)
           if w.prompt_tokens_p99 is not None and w.prompt_tokens_p50 is not None else None)
    has_mix = mix is not None and mix >= th.length_mix_ratio
    if has_tail and is_prefill and moves_together and not has_mix:
        notes.append(f"TTFT has a tail (p99 {p99:.3f} s = {p99 / max(p50, 1e-9):.1f}x p50) but prompt "
                     f"lengths are uniform (p99/p50 {mix or 0:.1f}): queueing, not interference")
    if not (has_tail and is_prefill and moves_together and has_mix):
        return None
    together = "" if corr is None else f", correlation {corr:.2f} across intervals"
    return Finding(PREFILL_INTERFERENCE, (
        f"p99 TTFT {p99:.3f} s is {p99 / max(p50, 1e-9):.1f}x p50 {p50:.3f} s; p99 prefill time "
        f"{pre:.3f} s ({pre / p99:.0%} of p99 TTFT) rises with it{together}; prompt lengths "
        f"p50 {w.prompt_tokens_p50:.0f} / p99 {w.prompt_tokens_p99:.0f} tokens ({mix:.0f}x): long "
        f"prefills are mixed into short ones"))


def _kv_pressure(w: WindowStats, th: Thresholds) -> Finding | None:
    usage = max(w.kv_usage_by_scrape, default=0.0)
    waiting = w.num_waiting_by_scrape
    if usage < th.kv_usage_high or len(waiting) < 2:
        return None
    half = len(waiting) // 2
    early, late = statistics.fmean(waiting[:half] or waiting[:1]), statistics.fmean(waiting[half:])
    if not (late > early and max(waiting) >= 1):
        return None
    return Finding(KV_PRESSURE, (
        f"KV cache usage reached {usage:.2f} (>= {th.kv_usage_high}) while waiting requests rose "
        f"from {early:.1f} to {late:.1f} on average (max {max(waiting):.0f})"))


def _transfer_bound(w: WindowStats, th: Thresholds) -> Finding | None:
    if w.transfer_share is None or w.num_disaggregated < th.min_disaggregated:
        return None
    if w.transfer_share < th.transfer_share:
        return None
    return Finding(TRANSFER_BOUND, (
        f"KV transfer is {w.transfer_share:.0%} of the TTFT of {w.num_disaggregated} disaggregated "
        f"requests (>= {th.transfer_share:.0%})"))


def _correlation(xs: tuple[float | None, ...], ys: tuple[float | None, ...]) -> float | None:
    """Pearson correlation over intervals where both have data; None with < 3 or no variance."""
    pts = [(x, y) for x, y in zip(xs, ys) if x is not None and y is not None]
    if len(pts) < 3:
        return None
    try:
        return statistics.correlation([x for x, _ in pts], [y for _, y in pts])
    except statistics.StatisticsError:
        return None


# What to change, per path, in the seeds' order (chunk size, length routing, disaggregation).
ADVICE = {
    PREFILL_INTERFERENCE: (
        "chunk size: enable chunked prefill and lower max_num_batched_tokens on the "
        "decode-capable workers (each halving roughly halves short requests' p99 TTFT and "
        "lengthens long prompts' TTFT); long_prefill_token_threshold spreads a long prompt's chunks",
        "length-based routing: scheduler.policy length_threshold (or adaptive) so long prompts "
        "go to a prefill worker and short ones stay local",
        "more prefill workers / disaggregation: add workers.prefill so long prefills never share "
        "an engine with decodes"),
    KV_PRESSURE: (
        "KV cache: more kv_cache_gib per decode worker, or fewer concurrent sequences "
        "(max_num_seqs), so admissions stop waiting for blocks",
        "length-based routing: long prompts hold many blocks; route them to their own workers",
        "more decode workers to spread the blocks"),
    TRANSFER_BOUND: (
        "keep more prompts local: raise the disaggregation threshold (threshold_tokens) or use the "
        "adaptive policy, which weighs transfer time against interference",
        "check the link: `pd-serve transfer-probe` measures it; a faster backend (RDMA, NVLink) "
        "or co-locating prefill and decode workers on one node shortens transfers"),
}


def _advice(active: list[Finding]) -> tuple[str, ...]:
    out: list[str] = []
    for f in active:
        out.extend(a for a in ADVICE[f.path] if a not in out)
    return tuple(out)


# ---- reporting and collection --------------------------------------------------------------
def _fmt_s(x: float | None) -> str:
    return "n/a" if x is None else f"{x:.3f} s"


def format_report(w: WindowStats, d: Diagnosis) -> str:
    lines = [f"pd-serve diagnose: {w.duration_s:.0f} s window, {w.num_requests} requests finished",
             f"  TTFT p50 {_fmt_s(w.ttft_p50_s)}, p99 {_fmt_s(w.ttft_p99_s)}; "
             f"prefill time p99 {_fmt_s(w.prefill_p99_s)}",
             f"  prompt tokens p50 {w.prompt_tokens_p50 or 0:.0f}, p99 {w.prompt_tokens_p99 or 0:.0f}",
             f"  waiting requests {w.num_waiting_by_scrape[0]:.0f} -> {w.num_waiting_by_scrape[-1]:.0f}"
             f" (max {max(w.num_waiting_by_scrape):.0f}); KV cache usage max "
             f"{max(w.kv_usage_by_scrape):.2f}"]
    if w.num_disaggregated:
        share = "n/a" if w.transfer_share is None else f"{w.transfer_share:.0%}"
        lines.append(f"  KV transfer: {share} of TTFT over {w.num_disaggregated} disaggregated requests")
    lines.append(f"verdict: {d.verdict}")
    lines += [f"  {f.path}: {f.evidence}" for f in d.active]
    lines += [f"  note: {n}" for n in d.notes]
    if d.advice:
        lines.append("change first:")
        lines += [f"  {i}. {a}" for i, a in enumerate(d.advice, 1)]
    return "\n".join(lines)


def as_dict(w: WindowStats, d: Diagnosis) -> dict:
    return {"window": asdict(w), "verdict": d.verdict, "active": [asdict(f) for f in d.active],
            "advice": list(d.advice), "notes": list(d.notes)}


def collect(fetch: Callable[[], str], window_s: float, interval_s: float,
            clock: Callable[[], float] = time.time,
            sleep: Callable[[float], None] = time.sleep) -> list[Snapshot]:
    """Scrape `fetch()` every `interval_s` for `window_s` (at least two scrapes)."""
    snapshots = [parse_snapshot(fetch(), clock())]
    num_intervals = max(1, round(window_s / interval_s))
    for _ in range(num_intervals):
        sleep(window_s / num_intervals)
        snapshots.append(parse_snapshot(fetch(), clock()))
    return snapshots


def http_fetcher(url: str, token: str | None, timeout_s: float = 10.0) -> Callable[[], str]:
    """`fetch()` for a pd-serve HTTP server's /metrics (`url` is the server's base URL)."""
    import urllib.request

    target = url.rstrip("/") + "/metrics"
    headers = {"Authorization": f"Bearer {token}"} if token else {}

    def fetch() -> str:
        with urllib.request.urlopen(urllib.request.Request(target, headers=headers),
                                    timeout=timeout_s) as resp:
            return resp.read().decode()

    return fetch

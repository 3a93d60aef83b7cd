"""The one metrics module: per-request records, their summary, tables, JSON and plots.

The live runner (real deployments) and the simulator (modelled ones) both produce
`RequestRecord`s and summarize them here, so their numbers mean the same thing:

    TTFT  = first_token_s - arrival_s
    E2E   = finish_s - arrival_s
    ITL   = gaps between consecutive token times (every gap of every request, pooled)
    TPOT  = (E2E - TTFT) / (output_tokens - 1), per request with at least two output tokens
    throughput = finished requests (and their output tokens) / duration
    goodput    = requests meeting BOTH their TTFT SLO and the TPOT SLO / duration (DistServe)

`duration` runs from the first arrival to the last finish unless given. Percentiles interpolate
linearly between order statistics (numpy's default). Plots need matplotlib; without it the plot
functions raise `PlottingUnavailableError` and everything else works.
"""
from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

import numpy as np

from schedulers.slo import DEFAULT_TPOT_SLO_S, DEFAULT_TTFT_BUCKETS, SloTable

PERCENTILES = (50, 90, 99)
METRICS_VERSION = 1


@dataclass
class RequestRecord:
    """One request as it was served. Times are seconds on one clock (wall clock live, sim time
    simulated); `token_times` holds when each output token reached the client.

    `route`: "colocated" | "disaggregated" | None (never routed). `kv_transfer_*`: the KV moved for
    a disaggregated request (0 / None otherwise). `predicted_ttft_s`: the policy's prediction,
    None if it made none. `fallback`: why `route` is not the one it was given (a prefill worker
    failed or was taken back from), None if it is. `bucket`: a workload label; None means the
    SLO's length bucket. `ok` False with `error` for a request that failed; its times may be None.
    """

    request_id: str
    input_tokens: int
    output_tokens: int
    arrival_s: float
    first_token_s: float | None = None
    finish_s: float | None = None
    token_times: list[float] = field(default_factory=list)
    route: str | None = None
    kv_transfer_bytes: int = 0
    kv_transfer_s: float | None = None
    predicted_ttft_s: float | None = None
    bucket: str | None = None
    ok: bool = True
    error: str | None = None
    prefill_worker: str | None = None
    decode_worker: str | None = None
    served_id: str | None = None  # the server's id for it: joins the router's prediction log
    fallback: str | None = None  # why it did not take the route it was given (the router's words)

    @property
    def ttft_s(self) -> float | None:
        if not self.ok or self.first_token_s is None:
            return None
        return self.first_token_s - self.arrival_s

    @property
    def e2e_s(self) -> float | None:
        if not self.ok or self.finish_s is None:
            return None
        return self.finish_s - self.arrival_s

    @property
    def itl_s(self) -> list[float]:
        times = self.token_times
        return [b - a for a, b in zip(times, times[1:])]

    @property
    def tpot_s(self) -> float | None:
        """(E2E - TTFT) / (output_tokens - 1); None with fewer than two tokens or no times."""
        ttft_s, e2e_s = self.ttft_s, self.e2e_s
        if ttft_s is None or e2e_s is None or self.output_tokens < 2:
            return None
        return (e2e_s - ttft_s) / (self.output_tokens - 1)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> RequestRecord:
        return cls(**{k: data[k] for k in cls.__dataclass_fields__ if k in data})


@dataclass(frozen=True)
class SloSpec:
    """Latency targets: TTFT by prompt length bucket, one TPOT for all.

    `ttft_buckets`: ascending (largest prompt tokens in the bucket, or None for the rest, TTFT
    seconds). Defaults are the seeds': <=4K 0.2 s, 4K-16K 1 s, >16K 5 s; TPOT 0.1 s.
    """

    ttft_buckets: tuple[tuple[int | None, float], ...] = DEFAULT_TTFT_BUCKETS
    tpot_slo_s: float = DEFAULT_TPOT_SLO_S

    def __post_init__(self) -> None:
        buckets = tuple((None if b is None else int(b), float(s)) for b, s in self.ttft_buckets)
        object.__setattr__(self, "ttft_buckets", buckets)
        # One set of validation rules, the scheduler's; kept for lookups.
        object.__setattr__(self, "_table", SloTable(buckets, self.tpot_slo_s))

    def as_table(self) -> SloTable:
        """The same targets as the scheduler's `SloTable`."""
        return self._table

    def ttft_slo_s(self, input_tokens: int) -> float:
        return self._table.ttft_slo_s(input_tokens)

    def bucket_label(self, input_tokens: int) -> str:
        """"<=4K", "4K-16K", ">16K" for the default buckets (K = 1024 tokens when exact)."""
        lower = None
        for bound, _ in self.ttft_buckets:
            if bound is None:
                return f">{_tokens_label(lower)}"
            if input_tokens <= bound:
                return f"<={_tokens_label(bound)}" if lower is None else \
                    f"{_tokens_label(lower)}-{_tokens_label(bound)}"
            lower = bound
        raise AssertionError("unreachable: the last bucket is unbounded")

    def meets(self, record: RequestRecord) -> bool:
        """Served, TTFT within its bucket's SLO, and TPOT within the TPOT SLO (or one token only)."""
        ttft_s = record.ttft_s
        if ttft_s is None or record.e2e_s is None:
            return False
        tpot_s = record.tpot_s
        meets_tpot = tpot_s is None or tpot_s <= self.tpot_slo_s
        return ttft_s <= self.ttft_slo_s(record.input_tokens) and meets_tpot

    def to_dict(self) -> dict[str, Any]:
        return {"ttft_buckets": [list(b) for b in self.ttft_buckets], "tpot_slo_s": self.tpot_slo_s}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> SloSpec:
        unknown = sorted(set(data) - {"ttft_buckets", "tpot_slo_s"})
        if unknown:
            raise ValueError(f"slo: unknown key(s) {unknown}; allowed: ttft_buckets, tpot_slo_s")
        buckets = data.get("ttft_buckets", DEFAULT_TTFT_BUCKETS)
        if any(not isinstance(b, (list, tuple)) or len(b) != 2 for b in buckets):
            raise ValueError("slo.ttft_buckets: each entry must be [max_tokens or null, seconds]")
        return cls(tuple((b, s) for b, s in buckets), float(data.get("tpot_slo_s", DEFAULT_TPOT_SLO_S)))


def _tokens_label(num_tokens: int | None) -> str:
    if num_tokens is not None and num_tokens % 1024 == 0:
        return f"{num_tokens // 1024}K"
    return str(num_tokens)


# ---- summary ---------------------------------------------------------------------------------

def distribution(values: Iterable[float]) -> dict[str, float | None]:
    """mean, p50, p90, p99 (linear interpolation); all None for no values."""
    array = np.asarray([v for v in values if v is not None], dtype=float)
    keys = ["mean"] + [f"p{p}" for p in PERCENTILES]
    if array.size == 0:
        return {k: None for k in keys}
    stats = [float(array.mean())] + [float(np.percentile(array, p)) for p in PERCENTILES]
    return dict(zip(keys, stats))


def run_duration_s(records: Sequence[RequestRecord]) -> float:
    """First arrival to last finish of the served requests (0 when nothing finished)."""
    finishes = [r.finish_s for r in records if r.ok and r.finish_s is not None]
    if not finishes:
        return 0.0
    return max(finishes) - min(r.arrival_s for r in records)


def pooled_summary(runs: Sequence[Sequence[RequestRecord]], slo: SloSpec | None = None) -> dict[str, Any]:
    """Several runs of one workload summarized together: their records pooled, rates over the
    runs' summed durations (the gaps between runs are no one's serving time)."""
    return summarize([r for run in runs for r in run], slo, duration_s=sum(run_duration_s(run) for run in runs))


def summarize(records: Sequence[RequestRecord], slo: SloSpec | None = None,
              duration_s: float | None = None) -> dict[str, Any]:
    """Latency distributions, throughput and goodput, overall and per bucket (see module docstring).

    `duration_s`: the window rates are divided by; default `run_duration_s(records)`. Per-bucket
    rates use the same window, so buckets' goodputs add up to the total.
    """
    slo = slo or SloSpec()
    if duration_s is None:
        duration_s = run_duration_s(records)
    summary = _summary_of(records, slo, duration_s)
    groups: dict[str, list[RequestRecord]] = {}
    for record in records:
        groups.setdefault(record.bucket or slo.bucket_label(record.input_tokens), []).append(record)
    summary["per_bucket"] = {label: _summary_of(group, slo, duration_s)
                             for label, group in sorted(groups.items())}
    summary["slo"] = slo.to_dict()
    summary["version"] = METRICS_VERSION
    return summary


def num_within_slos(records: Iterable[RequestRecord], slo: SloSpec) -> int:
    """Requests served within both their TTFT and their TPOT SLO (goodput's numerator)."""
    return sum(1 for r in records if slo.meets(r))


def _summary_of(records: Sequence[RequestRecord], slo: SloSpec, duration_s: float) -> dict[str, Any]:
    served = [r for r in records if r.ok and r.finish_s is not None]
    num_good = num_within_slos(served, slo)
    output_tokens = sum(r.output_tokens for r in served)
    routes: dict[str, int] = {}
    for r in records:
        routes[r.route or "none"] = routes.get(r.route or "none", 0) + 1
    transfers = [r for r in served if r.kv_transfer_s is not None]
    return {
        "num_requests": len(records),
        "num_ok": len(served),
        "num_failed": len(records) - len(served),
        "duration_s": duration_s,
        "ttft_s": distribution(r.ttft_s for r in served),
        "tpot_s": distribution(r.tpot_s for r in served),
        "itl_s": distribution(gap for r in served for gap in r.itl_s),
        "e2e_s": distribution(r.e2e_s for r in served),
        "throughput_rps": _rate(len(served), duration_s),
        "output_tokens_per_s": _rate(output_tokens, duration_s),
        "goodput_rps": _rate(num_good, duration_s),
        "slo_attainment": num_good / len(records) if records else None,
        "routes": dict(sorted(routes.items())),
        "num_fallbacks": sum(1 for r in records if r.fallback),
        "kv_transfer_bytes": sum(r.kv_transfer_bytes for r in served),
        "kv_transfer_s": distribution(r.kv_transfer_s for r in transfers),
    }


def _rate(count: float, duration_s: float) -> float | None:
    return count / duration_s if duration_s > 0 else None


# ---- tables and files ------------------------------------------------------------------------

TABLE_COLUMNS: tuple[tuple[str, str, float], ...] = (
    # (header, path in a summary, scale)
    ("reqs", "num_requests", 1), ("ok", "num_ok", 1),
    ("TTFT mean ms", "ttft_s.mean", 1e3), ("TTFT p50 ms", "ttft_s.p50", 1e3),
    ("TTFT p99 ms", "ttft_s.p99", 1e3), ("TPOT p50 ms", "tpot_s.p50", 1e3),
    ("TPOT p99 ms", "tpot_s.p99", 1e3), ("ITL p99 ms", "itl_s.p99", 1e3),
    ("E2E p50 s", "e2e_s.p50", 1), ("req/s", "throughput_rps", 1),
    ("out tok/s", "output_tokens_per_s", 1), ("goodput req/s", "goodput_rps", 1),
    ("SLO %", "slo_attainment", 100),
)


def summary_value(summary: Mapping[str, Any], path: str) -> Any:
    """`summary_value(s, "ttft_s.p99")` -> s["ttft_s"]["p99"] (None when missing)."""
    value: Any = summary
    for key in path.split("."):
        if not isinstance(value, Mapping) or key not in value:
            return None
        value = value[key]
    return value


def markdown_table(rows: Mapping[str, Mapping[str, Any]], label_header: str = "run",
                   columns: Sequence[tuple[str, str, float]] = TABLE_COLUMNS) -> str:
    """A markdown table, one row per (label, summary)."""
    header = [label_header] + [c[0] for c in columns]
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    for label, summary in rows.items():
        cells = [label] + [_cell(summary_value(summary, path), scale) for _, path, scale in columns]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def bucket_table(summary: Mapping[str, Any],
                 columns: Sequence[tuple[str, str, float]] = TABLE_COLUMNS) -> str:
    """The per-bucket rows of one summary as a markdown table."""
    return markdown_table(summary.get("per_bucket", {}), "bucket", columns)


def _cell(value: Any, scale: float) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    if isinstance(value, int) and scale == 1:
        return str(value)
    scaled = value * scale
    return f"{scaled:.1f}" if abs(scaled) >= 10 else f"{scaled:.2f}"


def write_json(path: str | Path, payload: Any) -> Path:
    """Write `payload` (summaries, records as dicts) as indented JSON; returns the path."""
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(json.dumps(payload, indent=2, default=_json_default) + "\n")
    return p


def write_markdown(path: str | Path, text: str) -> Path:
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(text.rstrip() + "\n")
    return p


def write_summary(out: str | Path, payload: Any, table: str) -> None:
    """An experiment's end: DIR/summary.json (the payload) and DIR/summary.md (the table), the
    table printed for the terminal."""
    write_json(Path(out) / "summary.json", payload)
    write_markdown(Path(out) / "summary.md", table)
    print(table)
    print(f"\nwrote {out}/summary.json and summary.md")


def records_to_dicts(records: Iterable[RequestRecord]) -> list[dict[str, Any]]:
    return [r.to_dict() for r in records]


def _json_default(value: Any) -> Any:
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, RequestRecord):
        return value.to_dict()
    raise TypeError(f"cannot write {type(value).__name__} as JSON")


# ---- plots -----------------------------------------------------------------------------------

class PlottingUnavailableError(RuntimeError):
    """matplotlib is not installed."""


def can_plot() -> bool:
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        return False
    return True


def _pyplot() -> Any:
    try:
        import matplotlib
    except ImportError:
        raise PlottingUnavailableError("plots need matplotlib, which is not installed: "
                                       "pip install matplotlib") from None
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    return plt


def plot_ttft_cdf(records_by_label: Mapping[str, Sequence[RequestRecord]], path: str | Path,
                  title: str = "TTFT CDF") -> Path:
    """One TTFT CDF line per configuration (label), log-scaled seconds, written as PNG."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for label, records in records_by_label.items():
        ttfts = np.sort([r.ttft_s for r in records if r.ttft_s is not None])
        if ttfts.size:
            ax.step(ttfts, np.arange(1, ttfts.size + 1) / ttfts.size, where="post", label=label)
    ax.set_xscale("log")
    ax.set_xlabel("TTFT (s)")
    ax.set_ylabel("fraction of requests")
    ax.set_title(title)
    ax.grid(True, alpha=0.3)
    ax.legend()
    return _save(fig, plt, path)


def plot_rate_sweep(sweep: Mapping[str, Sequence[tuple[float, Mapping[str, Any]]]], path: str | Path,
                    title: str = "rate sweep") -> Path:
    """p99 TTFT and goodput against request rate, one line per configuration, as PNG.

    `sweep`: label -> [(rate req/s, summary), ...].
    """
    plt = _pyplot()
    fig, (ax_ttft, ax_good) = plt.subplots(1, 2, figsize=(11, 4.5))
    for label, points in sweep.items():
        points = sorted(points, key=lambda p: p[0])
        rates = [rate for rate, _ in points]
        ax_ttft.plot(rates, [summary_value(s, "ttft_s.p99") for _, s in points], marker="o", label=label)
        ax_good.plot(rates, [summary_value(s, "goodput_rps") for _, s in points], marker="o", label=label)
    ax_ttft.set_yscale("log")
    ax_ttft.set_xlabel("request rate (req/s)")
    ax_ttft.set_ylabel("p99 TTFT (s)")
    ax_good.set_xlabel("request rate (req/s)")
    ax_good.set_ylabel("goodput (req/s meeting TTFT and TPOT SLOs)")
    for ax in (ax_ttft, ax_good):
        ax.grid(True, alpha=0.3)
        ax.legend()
    fig.suptitle(title)
    return _save(fig, plt, path)


def _save(fig: Any, plt: Any, path: str | Path) -> Path:
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    fig.tight_layout()
    fig.savefig(p, dpi=120)
    plt.close(fig)
    return p

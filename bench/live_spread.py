"""How precisely a live run pins each figure the simulator is judged on: a bootstrap interval.

A pooled p99 TTFT of 240 requests is about their third-longest; a new draw of the same workload
on the same deployment moves it by more than any model error worth finding. For each figure
(p50 and p99 TTFT, mean TPOT) this resamples the live requests' values with replacement and keeps
the central 95% of the figure over the resamples. Where that interval reaches past +-20% of the
figure, no simulator can be shown to be within 20% of the live system from this many requests:
the live figure is not known that well.

The resampling treats requests as independent. They are not (a request queued behind a long one
waits with it), so the true spread is wider than this: the intervals are a lower bound.
"""
from __future__ import annotations

from typing import Any, Callable, Mapping, Sequence

import numpy as np

from bench.metrics import RequestRecord

RESAMPLES = 1000
LEVEL = 0.95
SEED = 0

# Each of the simulator's figures (bench.sim_fidelity.METRICS): the per-request values it is
# taken over, and the statistic, as bench.metrics.summarize takes them (served requests only).
FIGURES: dict[str, tuple[Callable[[RequestRecord], float | None], Callable[..., Any]]] = {
    "p50_ttft_s": (lambda r: r.ttft_s, lambda a, axis=None: np.percentile(a, 50, axis=axis)),
    "p99_ttft_s": (lambda r: r.ttft_s, lambda a, axis=None: np.percentile(a, 99, axis=axis)),
    "mean_tpot_s": (lambda r: r.tpot_s, lambda a, axis=None: np.mean(a, axis=axis)),
}


def _values(records: Sequence[RequestRecord], figure: str) -> np.ndarray:
    of, _ = FIGURES[figure]
    served = (of(r) for r in records if r.ok and r.finish_s is not None)
    return np.asarray([v for v in served if v is not None], dtype=float)


def bootstrap_interval(records: Sequence[RequestRecord], figure: str, resamples: int = RESAMPLES,
                       level: float = LEVEL, seed: int = SEED) -> tuple[float, float] | None:
    """The central `level` of `figure` over `resamples` resamples of the requests' values
    (None: no value)."""
    if figure not in FIGURES:
        raise ValueError(f"figure must be one of {sorted(FIGURES)}, got {figure!r}")
    if resamples < 2 or not 0 < level < 1:
        raise ValueError(f"need resamples >= 2 and 0 < level < 1, got {resamples}, {level}")
    return _interval(_values(records, figure), FIGURES[figure][1], resamples, level, seed)


def _interval(values: np.ndarray, stat: Callable[..., Any], resamples: int = RESAMPLES,
              level: float = LEVEL, seed: int = SEED) -> tuple[float, float] | None:
    if values.size == 0:
        return None
    draws = values[np.random.default_rng(seed).integers(0, values.size, size=(resamples, values.size))]
    stats = stat(draws, axis=1)
    tail = (1 - level) / 2 * 100
    return float(np.percentile(stats, tail)), float(np.percentile(stats, 100 - tail))


def spread(records: Sequence[RequestRecord], tolerance: float) -> dict[str, dict[str, Any]]:
    """Per figure: the live value, its bootstrap interval, and whether the interval stays within
    `tolerance` of the value (`pinned`: a model can be judged to that tolerance here)."""
    out = {}
    for name, (_, stat) in FIGURES.items():
        values = _values(records, name)
        value = float(stat(values)) if values.size else None
        interval = _interval(values, stat)
        pinned = (value is not None and interval is not None and value > 0
                  and max(value - interval[0], interval[1] - value) <= tolerance * value)
        out[name] = {"value": value, "interval": interval, "pinned": pinned}
    return out


def inside(interval: Sequence[float] | None, value: float | None) -> bool:
    return interval is not None and value is not None and interval[0] <= value <= interval[1]


def spread_counts(rows: Sequence[Mapping[str, Any]]) -> dict[str, int]:
    """Over fidelity rows carrying `spread` (per metric) and `metrics` (live/sim/ok): figures
    the live run pins to the tolerance, and simulated figures within the tolerance or inside
    the live interval."""
    pinned = within_or_inside = total = 0
    for row in rows:
        for name, m in row["metrics"].items():
            s = row["spread"][name]
            total += 1
            pinned += s["pinned"]
            within_or_inside += bool(m["ok"] or inside(s["interval"], m["sim"]))
    return {"figures": total, "pinned": pinned, "within_or_inside": within_or_inside}


def spread_table(rows: Sequence[Mapping[str, Any]]) -> str:
    """Markdown: per system and rate, each figure's live 95% interval (ms, and its widest side
    in % of the figure) and the simulated figure; `!` marks an interval past the tolerance."""
    from pd_serve.report import format_table

    names = list(FIGURES)
    body = []
    for row in rows:
        line: list[Any] = [row["system"], f"{row['rate']:g}"]
        for name in names:
            s, sim = row["spread"][name], row["metrics"][name]["sim"]
            if s["interval"] is None or not s["value"]:
                line += ["-", "-"]
                continue
            lo, hi = s["interval"]
            wide = max(s["value"] - lo, hi - s["value"]) / s["value"]
            line.append(f"{lo * 1e3:.1f}-{hi * 1e3:.1f} ({wide:.0%}{'' if s['pinned'] else ' !'})")
            line.append("-" if sim is None else f"{sim * 1e3:.1f}" + (" in" if inside(s["interval"], sim) else ""))
        body.append(line)
    headers = ["system", "rate"]
    for name in names:
        short = name.replace("_s", "")
        headers += [f"{short} live 95% ms", f"{short} sim ms"]
    return format_table(headers, body)

"""The link model `t(bytes) = alpha + bytes / beta`: fitted from a probe, then kept current.

`fit_link` turns a probe's (bytes, seconds) samples into a `LinkFit`. `OnlineLinkModel` starts
from that fit and folds in every real transfer the pair makes, forgetting old evidence
exponentially, so the prediction follows the link as load on it changes. `LinkModelRegistry`
holds one model per (prefill_id, decode_id) pair: the thing the scheduler asks.

Pure Python: no numpy, torch, nixl or Ray, so the scheduler and the simulator import it freely.

Both fits minimise *relative* squared error (weights 1/t^2): a transfer of one block takes
tens of microseconds and one of a whole long prompt tens of milliseconds, and a model that is
10% off at either end misleads the scheduler just as much. Plain least squares would let the
largest sizes decide alone and leave alpha to chance.
"""
from __future__ import annotations

import logging
import math
import statistics
from dataclasses import dataclass, field, replace
from typing import Any, Iterable, Mapping

logger = logging.getLogger(__name__)

LINK_MODEL_VERSION = 1

# Floor on a time used as a weight denominator: timers do not resolve below this.
_MIN_SECONDS = 1e-7


@dataclass(frozen=True)
class LinkFit:
    """A fitted `t = alpha_s + bytes / beta_bytes_per_s` with how well it fits.

    `residuals` holds one entry per distinct size: (num_bytes, median_s, median_s - predicted_s).
    `r2` is the coefficient of determination of the per-size medians (1.0 is a perfect line).
    `num_samples` counts the raw samples behind the fit, all sizes together.
    """

    alpha_s: float
    beta_bytes_per_s: float
    residuals: tuple[tuple[int, float, float], ...] = ()
    r2: float = float("nan")
    num_samples: int = 0

    def predict(self, num_bytes: float) -> float:
        return self.alpha_s + num_bytes / self.beta_bytes_per_s

    @property
    def min_bytes(self) -> int:
        return min((r[0] for r in self.residuals), default=0)

    @property
    def max_bytes(self) -> int:
        return max((r[0] for r in self.residuals), default=0)

    @property
    def max_relative_error(self) -> float:
        """Largest |median - predicted| / median over the fitted sizes."""
        return max((abs(err) / max(t, _MIN_SECONDS) for _, t, err in self.residuals), default=0.0)

    def to_dict(self) -> dict[str, Any]:
        return {
            "alpha_s": self.alpha_s,
            "beta_bytes_per_s": self.beta_bytes_per_s,
            "residuals": [list(r) for r in self.residuals],
            "r2": self.r2,
            "num_samples": self.num_samples,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "LinkFit":
        return cls(
            alpha_s=float(data["alpha_s"]),
            beta_bytes_per_s=float(data["beta_bytes_per_s"]),
            residuals=tuple((int(b), float(t), float(e)) for b, t, e in data.get("residuals", ())),
            r2=float(data.get("r2", float("nan"))),
            num_samples=int(data.get("num_samples", 0)),
        )


def median_by_size(samples: Iterable[tuple[int, float]]) -> list[tuple[int, float]]:
    """Per-size medians, ascending by size: one slow outlier per size cannot drag the fit."""
    by_size: dict[int, list[float]] = {}
    for num_bytes, seconds in samples:
        if num_bytes < 0 or not seconds >= 0:
            raise ValueError(f"sample ({num_bytes}, {seconds}) must have bytes >= 0 and seconds >= 0")
        by_size.setdefault(int(num_bytes), []).append(float(seconds))
    return [(b, statistics.median(ts)) for b, ts in sorted(by_size.items())]


def _weighted_line(points: list[tuple[float, float, float]]) -> tuple[float, float]:
    """Weighted least squares of y = a + b*x over (x, y, w); returns (a, b)."""
    sw = sum(w for _, _, w in points)
    sx = sum(w * x for x, _, w in points)
    sy = sum(w * y for _, y, w in points)
    sxx = sum(w * x * x for x, _, w in points)
    sxy = sum(w * x * y for x, y, w in points)
    return _solve_line(sw, sx, sy, sxx, sxy)


def _solve_line(sw: float, sx: float, sy: float, sxx: float, sxy: float) -> tuple[float, float]:
    """Normal equations of a weighted line fit, with alpha clamped at zero.

    A negative intercept means the data cannot see a fixed cost (noise at the small sizes);
    then the best line through the origin is the honest answer.
    """
    det = sw * sxx - sx * sx
    if det > 1e-12 * max(sw * sxx, 1e-300):
        slope = (sw * sxy - sx * sy) / det
        intercept = (sy - slope * sx) / sw
        if intercept >= 0:
            return intercept, slope
    slope = sxy / sxx if sxx > 0 else float("nan")
    return 0.0, slope


def _r2(medians: list[tuple[int, float]], alpha_s: float, seconds_per_byte: float) -> float:
    ts = [t for _, t in medians]
    mean_t = sum(ts) / len(ts)
    ss_tot = sum((t - mean_t) ** 2 for t in ts)
    ss_res = sum((t - alpha_s - b * seconds_per_byte) ** 2 for b, t in medians)
    return 1.0 - ss_res / ss_tot if ss_tot > 0 else float("nan")


# How much each size's error counts: its relative error ("relative", 1/t^2), its absolute
# error ("absolute", 1: the largest sizes decide), or in between ("sqrt", 1/t).
_WEIGHTINGS = {"relative": 2, "sqrt": 1, "absolute": 0}


def fit_link(samples: list[tuple[int, float]], weighting: str = "relative") -> LinkFit:
    """Fit `t = alpha + bytes / beta` to (num_bytes, seconds) samples of at least two sizes.

    Fits the per-size medians, by default on relative error (see the module docstring);
    alpha >= 0. Where the link is not a line (a host whose copies fall out of the CPU cache
    past some size), "absolute" favours the large transfers, which cost the most seconds.
    Raises ValueError when the samples cannot determine a positive bandwidth.
    """
    if weighting not in _WEIGHTINGS:
        raise ValueError(f"unknown weighting {weighting!r}; known: {sorted(_WEIGHTINGS)}")
    power = _WEIGHTINGS[weighting]
    medians = median_by_size(samples)
    if len(medians) < 2:
        raise ValueError(f"need samples of at least two distinct sizes, got {len(medians)}")
    points = [(float(b), t, 1.0 / max(t, _MIN_SECONDS) ** power) for b, t in medians]
    alpha_s, seconds_per_byte = _weighted_line(points)
    if not seconds_per_byte > 0:
        raise ValueError(
            f"time does not grow with size (slope {seconds_per_byte:.3g} s/B): widen the size sweep")
    residuals = tuple((b, t, t - alpha_s - b * seconds_per_byte) for b, t in medians)
    return LinkFit(alpha_s, 1.0 / seconds_per_byte, residuals,
                   _r2(medians, alpha_s, seconds_per_byte), len(samples))


@dataclass(frozen=True)
class EngineExcess:
    """What the engine's own load path adds to each transfer, beyond the link the probe timed:
    `overhead_s + num_bytes * s_per_byte`, both >= 0."""

    overhead_s: float
    s_per_byte: float = 0.0

    def predict(self, num_bytes: float) -> float:
        return self.overhead_s + num_bytes * self.s_per_byte

    def on(self, fit: LinkFit) -> LinkFit:
        """The probe's line with this excess added: the link as the engine's transfers see it."""
        return replace(fit, alpha_s=fit.alpha_s + self.overhead_s,
                       beta_bytes_per_s=1.0 / (1.0 / fit.beta_bytes_per_s + self.s_per_byte))


def engine_excess(fit: LinkFit, real_transfers: Iterable[tuple[int, float]]) -> EngineExcess:
    """The engine's excess over the probe's line, fitted to a few real vLLM transfers.

    Real vLLM transfers take longer than the probe's line says. On CPU the READ completes inside
    NIXL's post call: vLLM's telemetry gives a post time equal to the whole transfer time for
    every transfer (`bench.transfer_prediction` reports it). So the extra is spent inside the
    engine's post (vLLM coalesces a fresh request's blocks into one descriptor per layer), not
    waiting for the engine's next check. How it grows with size depends on the host:
    - run 30's Intel host: 2-4 ms at 6 and 16 MiB alike, a cost per transfer;
    - run 33's AVX2-only AMD host: 1.9-2.4 ms at 2.1 MiB, 4.0 ms at 8.1 MiB and 11-19 ms at
      15.6 MiB (median excesses): the engine's copy ran at a quarter to a half of the probe's
      bandwidth. A constant fitted to the small transfers predicted 4,000-token transfers 41%
      low, and failed CI (the router's warm-ups now reach 16 MiB: WARMUP_TRANSFER_BLOCKS).
    Hence a line: the median excess of every size measured at least twice (a size seen once
    cannot be told from a stall; the first transfer after a handshake is often one), and the
    line through those medians. A falling line is noise: then, as with fewer than two repeated
    sizes, the excess is `constant_excess`. Never negative.
    """
    real_transfers = list(real_transfers)  # read twice: per size here, all at once below
    excess: dict[int, list[float]] = {}
    for b, t in real_transfers:
        excess.setdefault(int(b), []).append(t - fit.predict(b))
    if not excess:
        raise ValueError("engine_excess needs at least one real transfer")
    medians = [(float(b), statistics.median(e)) for b, e in sorted(excess.items()) if len(e) >= 2]
    if len(medians) >= 2:
        intercept, slope = _weighted_line([(b, e, 1.0) for b, e in medians])  # intercept >= 0
        if slope > 0:
            return EngineExcess(intercept, slope)
    return constant_excess(fit, real_transfers)


def constant_excess(fit: LinkFit, real_transfers: Iterable[tuple[int, float]]) -> EngineExcess:
    """The median excess over the probe's line, the same at every size, never negative: the
    start-up model's excess until run 33, and `engine_excess`'s where no line can be fitted."""
    excess = [t - fit.predict(b) for b, t in real_transfers]
    if not excess:
        raise ValueError("constant_excess needs at least one real transfer")
    return EngineExcess(max(0.0, statistics.median(excess)))


@dataclass
class _WeightedSums:
    """Sufficient statistics of a weighted line fit; decaying them all is forgetting."""

    sw: float = 0.0
    sx: float = 0.0
    sy: float = 0.0
    sxx: float = 0.0
    sxy: float = 0.0

    def add(self, x: float, y: float, w: float) -> None:
        self.sw += w
        self.sx += w * x
        self.sy += w * y
        self.sxx += w * x * x
        self.sxy += w * x * y

    def scale(self, factor: float) -> None:
        self.sw *= factor
        self.sx *= factor
        self.sy *= factor
        self.sxx *= factor
        self.sxy *= factor

    def plus(self, other: "_WeightedSums") -> "_WeightedSums":
        return _WeightedSums(self.sw + other.sw, self.sx + other.sx, self.sy + other.sy,
                             self.sxx + other.sxx, self.sxy + other.sxy)


@dataclass
class OnlineLinkModel:
    """A link model that starts from a probe fit and follows every real transfer.

    Exponentially weighted least squares on relative error: each update first multiplies the
    evidence so far by `forgetting` (0.98 forgets with a half-life of ~34 transfers), then adds
    the new (bytes, seconds). The probe seed is kept separately and decays the same way but
    never below `min_prior_weight` sample-equivalents: real transfers often cluster around one
    size, which alone cannot separate alpha from beta, and the probe's shape fills that gap
    without outvoting fresh data.

    A sample far from the prediction (a handshake, a stall) counts with weight
    `huber_ratio / |relative error|` instead of 1, so one outlier moves the model a little
    while a lasting change still wins within a few dozen transfers.
    """

    alpha_s: float
    beta_bytes_per_s: float
    forgetting: float = 0.98
    prior_weight: float = 8.0
    min_prior_weight: float = 1.0
    huber_ratio: float = 1.0
    num_updates: int = 0
    _prior: _WeightedSums = field(default_factory=_WeightedSums, repr=False)
    _data: _WeightedSums = field(default_factory=_WeightedSums, repr=False)
    _prior_scale: float = field(default=1.0, repr=False)

    def __post_init__(self) -> None:
        if not 0.0 < self.forgetting <= 1.0:
            raise ValueError(f"forgetting must be in (0, 1], got {self.forgetting}")
        if not self.beta_bytes_per_s > 0 or not self.alpha_s >= 0:
            raise ValueError(
                f"need alpha_s >= 0 and beta_bytes_per_s > 0, "
                f"got {self.alpha_s}, {self.beta_bytes_per_s}")

    @classmethod
    def from_fit(cls, fit: LinkFit, **kwargs: Any) -> "OnlineLinkModel":
        """Seeded from a probe fit at the ends of its size range (or 1 KiB..64 MiB)."""
        model = cls(fit.alpha_s, fit.beta_bytes_per_s, **kwargs)
        lo_bytes = fit.min_bytes or 1 << 10
        hi_bytes = max(fit.max_bytes, 2 * lo_bytes) if fit.residuals else 64 << 20
        model._seed_prior(lo_bytes, hi_bytes)
        return model

    @classmethod
    def from_params(cls, alpha_s: float, beta_bytes_per_s: float, lo_bytes: int = 1 << 10,
                    hi_bytes: int = 64 << 20, **kwargs: Any) -> "OnlineLinkModel":
        model = cls(alpha_s, beta_bytes_per_s, **kwargs)
        model._seed_prior(lo_bytes, hi_bytes)
        return model

    def _seed_prior(self, lo_bytes: int, hi_bytes: int) -> None:
        # Two points pin a line; split the prior weight between the ends of the probed range.
        for num_bytes in (lo_bytes, hi_bytes):
            t = self.predict(num_bytes)
            self._prior.add(float(num_bytes), t, 0.5 * self.prior_weight / max(t, _MIN_SECONDS) ** 2)

    def predict(self, num_bytes: float) -> float:
        """Seconds a transfer of `num_bytes` is expected to take on this link now."""
        return self.alpha_s + num_bytes / self.beta_bytes_per_s

    def update(self, num_bytes: int, seconds: float) -> None:
        """Fold in one measured transfer."""
        if num_bytes <= 0 or not seconds > 0 or math.isinf(seconds):
            raise ValueError(f"need num_bytes > 0 and finite seconds > 0, got {num_bytes}, {seconds}")
        predicted_s = self.predict(num_bytes)
        relative_error = abs(seconds - predicted_s) / max(predicted_s, _MIN_SECONDS)
        robust_weight = min(1.0, self.huber_ratio / relative_error) if relative_error > 0 else 1.0
        self._data.scale(self.forgetting)
        min_scale = self.min_prior_weight / self.prior_weight if self.prior_weight > 0 else 0.0
        new_scale = max(self._prior_scale * self.forgetting, min_scale)
        self._prior.scale(new_scale / self._prior_scale)
        self._prior_scale = new_scale
        # Weight by the prediction, not the sample: a weight built from the sample itself would
        # favour fast outliers (1/t^2 grows as t shrinks) and bias the fit low.
        weight = robust_weight / max(predicted_s, _MIN_SECONDS) ** 2
        self._data.add(float(num_bytes), float(seconds), weight)
        self.num_updates += 1
        self._refit()

    def _refit(self) -> None:
        sums = self._prior.plus(self._data)
        alpha_s, seconds_per_byte = _solve_line(sums.sw, sums.sx, sums.sy, sums.sxx, sums.sxy)
        if seconds_per_byte > 0 and math.isfinite(seconds_per_byte):
            self.alpha_s, self.beta_bytes_per_s = alpha_s, 1.0 / seconds_per_byte
        else:
            logger.debug("link refit gave slope %s; keeping alpha=%s beta=%s",
                         seconds_per_byte, self.alpha_s, self.beta_bytes_per_s)

    def to_dict(self) -> dict[str, Any]:
        def sums(s: _WeightedSums) -> list[float]:
            return [s.sw, s.sx, s.sy, s.sxx, s.sxy]
        return {
            "version": LINK_MODEL_VERSION,
            "alpha_s": self.alpha_s,
            "beta_bytes_per_s": self.beta_bytes_per_s,
            "forgetting": self.forgetting,
            "prior_weight": self.prior_weight,
            "min_prior_weight": self.min_prior_weight,
            "huber_ratio": self.huber_ratio,
            "num_updates": self.num_updates,
            "prior_sums": sums(self._prior),
            "data_sums": sums(self._data),
            "prior_scale": self._prior_scale,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "OnlineLinkModel":
        version = int(data.get("version", LINK_MODEL_VERSION))
        if version != LINK_MODEL_VERSION:
            raise ValueError(
                f"link model version {version} is not supported (want {LINK_MODEL_VERSION})")
        model = cls(
            alpha_s=float(data["alpha_s"]), beta_bytes_per_s=float(data["beta_bytes_per_s"]),
            forgetting=float(data.get("forgetting", 0.98)),
            prior_weight=float(data.get("prior_weight", 8.0)),
            min_prior_weight=float(data.get("min_prior_weight", 1.0)),
            huber_ratio=float(data.get("huber_ratio", 1.0)),
            num_updates=int(data.get("num_updates", 0)),
        )
        if "prior_sums" in data:
            model._prior = _WeightedSums(*map(float, data["prior_sums"]))
            model._data = _WeightedSums(*map(float, data.get("data_sums", [0.0] * 5)))
            model._prior_scale = float(data.get("prior_scale", 1.0))
        else:
            model._seed_prior(1 << 10, 64 << 20)
        return model


PairKey = tuple[str, str]  # (prefill_id, decode_id)


class LinkModelRegistry:
    """One `OnlineLinkModel` per (prefill_id, decode_id) pair.

    Filled from probe results at start-up (`seed` / `load_probe_results`), updated by the router
    after every disaggregated transfer (`observe`), read by the scheduler (`predict`).
    """

    def __init__(self, **model_kwargs: Any) -> None:
        self._model_kwargs = model_kwargs
        # (prefill_id, decode_id) -> model; fills as pairs are probed, never empties.
        self._models: dict[PairKey, OnlineLinkModel] = {}

    def seed(self, prefill_id: str, decode_id: str, fit: LinkFit) -> OnlineLinkModel:
        model = OnlineLinkModel.from_fit(fit, **self._model_kwargs)
        self._models[(prefill_id, decode_id)] = model
        return model

    def has(self, prefill_id: str, decode_id: str) -> bool:
        return (prefill_id, decode_id) in self._models

    def get(self, prefill_id: str, decode_id: str) -> OnlineLinkModel:
        try:
            return self._models[(prefill_id, decode_id)]
        except KeyError:
            raise KeyError(
                f"no link model for prefill {prefill_id!r} -> decode {decode_id!r}; "
                f"known pairs: {sorted(self._models)}") from None

    def predict(self, prefill_id: str, decode_id: str, num_bytes: int) -> float:
        return self.get(prefill_id, decode_id).predict(num_bytes)

    def observe(self, prefill_id: str, decode_id: str, num_bytes: int, seconds: float) -> None:
        self.get(prefill_id, decode_id).update(num_bytes, seconds)

    def pairs(self) -> list[PairKey]:
        return sorted(self._models)

    def load_probe_results(self, data: Mapping[str, Any]) -> None:
        """Seed every pair of a probe JSON (see `transfer.probe_report`)."""
        for pair in data["pairs"]:
            fit = LinkFit.from_dict(pair["fit"]) if "fit" in pair else LinkFit(
                float(pair["alpha_s"]), float(pair["beta_bytes_per_s"]))
            self.seed(str(pair["prefill_id"]), str(pair["decode_id"]), fit)

    def to_dict(self) -> dict[str, Any]:
        return {"version": LINK_MODEL_VERSION,
                "models": [{"prefill_id": p, "decode_id": d, "model": m.to_dict()}
                           for (p, d), m in sorted(self._models.items())]}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], **model_kwargs: Any) -> "LinkModelRegistry":
        registry = cls(**model_kwargs)
        for entry in data["models"]:
            registry._models[(entry["prefill_id"], entry["decode_id"])] = \
                OnlineLinkModel.from_dict(entry["model"])
        return registry

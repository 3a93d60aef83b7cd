"""Benchmark workloads: who asks for how many tokens, and when.

A `Workload` is a list of `RequestSpec`s, built from an arrival process and a length
distribution, deterministic given a seed (numpy `Generator(PCG64(seed))`). The live runner sends
them to a deployment; the simulator feeds them to a modelled one. Both read the same records.

Arrival processes (`arrival_times`):
- all at once (`rate_per_s=None` or infinite): every request at t = 0, in list order (the seeds'
  batches: the first request is the first in line);
- Poisson at `rate_per_s` (exponential gaps, mean 1 / rate);
- gamma with `burstiness` b, as `vllm bench serve --burstiness`: gaps ~ Gamma(shape b, scale
  1 / (rate b)), mean 1 / rate for every b; b < 1 is burstier than Poisson, b = 1 is Poisson;
- closed loop at `concurrency` c: arrival decided at run time (a new request as soon as one of the
  c in flight finishes), so every `arrival_s` is None and `Workload.concurrency` = c.

Length distributions: fixed; the seeds' uniform 8x512 and mixed 1x4096 + 7x512 batches;
ShareGPT-like lognormal input and output lengths clipped to a maximum; mixes by length bucket;
and replay of a CSV trace (`arrival_s,input_tokens,output_tokens`).

`make_workload(name, **params)` builds any of them by name (see `WORKLOAD_NAMES`).
"""
from __future__ import annotations

import csv
import inspect
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

import numpy as np

# The SLO length buckets of the seeds (4K = 4096 tokens); `length_bucket` labels prompts with them.
SHORT_BUCKET, MEDIUM_BUCKET, LONG_BUCKET = "<=4K", "4K-16K", ">16K"
DEFAULT_BUCKET_MIX: dict[str, tuple[float, int, int]] = {
    SHORT_BUCKET: (0.85, 128, 4096),
    MEDIUM_BUCKET: (0.12, 4097, 16384),
    LONG_BUCKET: (0.03, 16385, 32768),
}
TRACE_HEADER = ("arrival_s", "input_tokens", "output_tokens")


@dataclass(frozen=True)
class RequestSpec:
    """One request to send.

    `arrival_s`: seconds after the run starts; None in a closed loop (sent when a slot frees).
    `input_tokens` / `output_tokens`: prompt length and tokens to generate (ignore EOS).
    `bucket`: a label to group results by (e.g. "short", "<=4K"); None lets the metrics use the
    SLO's length bucket of `input_tokens`.
    """

    request_id: str
    arrival_s: float | None
    input_tokens: int
    output_tokens: int
    bucket: str | None = None


@dataclass(frozen=True)
class Workload:
    """Requests in send order; `concurrency` is set (and every arrival is None) for a closed loop."""

    name: str
    requests: tuple[RequestSpec, ...]
    concurrency: int | None = None

    def __post_init__(self) -> None:
        is_closed = self.concurrency is not None
        if is_closed and self.concurrency < 1:
            raise ValueError(f"workload {self.name!r}: concurrency must be >= 1, got {self.concurrency}")
        if any((r.arrival_s is None) != is_closed for r in self.requests):
            raise ValueError(f"workload {self.name!r}: arrival_s must be None for every request in a "
                             f"closed loop (concurrency set) and a number for every request otherwise")

    @property
    def is_closed_loop(self) -> bool:
        return self.concurrency is not None

    @property
    def num_requests(self) -> int:
        return len(self.requests)


def length_bucket(num_tokens: int) -> str:
    """The seeds' SLO bucket of a prompt: "<=4K", "4K-16K" or ">16K"."""
    if num_tokens <= 4096:
        return SHORT_BUCKET
    return MEDIUM_BUCKET if num_tokens <= 16384 else LONG_BUCKET


def make_rng(seed: int) -> np.random.Generator:
    """The one random source of a workload: PCG64 from an integer seed."""
    if not isinstance(seed, (int, np.integer)) or isinstance(seed, bool) or seed < 0:
        raise ValueError(f"seed must be an integer >= 0, got {seed!r}")
    return np.random.Generator(np.random.PCG64(int(seed)))


# ---- arrival processes ------------------------------------------------------------------------

def poisson_arrivals(num_requests: int, rate_per_s: float, rng: np.random.Generator) -> list[float]:
    """Arrival times of a Poisson process: exponential gaps of mean 1 / rate, the first gap included."""
    return gamma_arrivals(num_requests, rate_per_s, 1.0, rng)


def gamma_arrivals(num_requests: int, rate_per_s: float, burstiness: float,
                   rng: np.random.Generator) -> list[float]:
    """Arrival times with Gamma(shape=burstiness, scale=1/(rate*burstiness)) gaps (vLLM's)."""
    _check_count(num_requests)
    _check_positive("rate_per_s", rate_per_s)
    _check_positive("burstiness", burstiness)
    if math.isinf(rate_per_s):
        return [0.0] * num_requests
    gaps = rng.gamma(shape=burstiness, scale=1.0 / (rate_per_s * burstiness), size=num_requests)
    return [float(t) for t in np.cumsum(gaps)]


def arrival_times(num_requests: int, rng: np.random.Generator, rate_per_s: float | None = None,
                  burstiness: float = 1.0, concurrency: int | None = None) -> list[float | None]:
    """Arrivals for one of the processes in the module docstring.

    No rate and no concurrency: all at t = 0. A rate: Poisson (burstiness 1) or gamma. A
    concurrency: a closed loop (all None). Giving both a rate and a concurrency is an error.
    """
    _check_count(num_requests)
    if concurrency is not None:
        if rate_per_s is not None:
            raise ValueError("give rate_per_s (open loop) or concurrency (closed loop), not both")
        if not isinstance(concurrency, int) or isinstance(concurrency, bool) or concurrency < 1:
            raise ValueError(f"concurrency must be an integer >= 1, got {concurrency!r}")
        return [None] * num_requests
    if rate_per_s is None:
        _check_positive("burstiness", burstiness)
        return [0.0] * num_requests
    return list(gamma_arrivals(num_requests, rate_per_s, burstiness, rng))


# ---- length distributions -------------------------------------------------------------------

def lognormal_lengths(num_requests: int, rng: np.random.Generator, median_tokens: float,
                      sigma: float, max_tokens: int, min_tokens: int = 1) -> list[int]:
    """Long-tailed lengths: exp(N(ln median, sigma^2)) rounded, clipped to [min, max] tokens."""
    _check_count(num_requests)
    _check_positive("median_tokens", median_tokens)
    if not sigma >= 0:
        raise ValueError(f"sigma must be >= 0, got {sigma!r}")
    if not 1 <= min_tokens <= max_tokens:
        raise ValueError(f"need 1 <= min_tokens <= max_tokens, got {min_tokens} and {max_tokens}")
    raw = rng.lognormal(mean=math.log(median_tokens), sigma=sigma, size=num_requests)
    return [int(n) for n in np.clip(np.rint(raw), min_tokens, max_tokens)]


def bucket_mix_lengths(num_requests: int, rng: np.random.Generator,
                       buckets: Mapping[str, tuple[float, int, int]]) -> list[tuple[str, int]]:
    """(bucket, input tokens) per request: a bucket drawn by weight, a length uniform in its range.

    `buckets`: name -> (weight > 0, min_tokens, max_tokens), both bounds inclusive.
    """
    _check_count(num_requests)
    if not buckets:
        raise ValueError("buckets must name at least one bucket")
    names = list(buckets)
    for name, entry in buckets.items():
        if len(entry) != 3:
            raise ValueError(f"bucket {name!r}: expected (weight, min_tokens, max_tokens), got {entry!r}")
        weight, low, high = entry
        if not weight > 0 or not 1 <= low <= high:
            raise ValueError(f"bucket {name!r}: need weight > 0 and 1 <= min_tokens <= max_tokens, "
                             f"got {entry!r}")
    weights = np.array([buckets[n][0] for n in names], dtype=float)
    choices = rng.choice(len(names), size=num_requests, p=weights / weights.sum())
    out = []
    for index in choices:
        name = names[int(index)]
        _, low, high = buckets[name]
        out.append((name, int(rng.integers(low, high, endpoint=True))))
    return out


# ---- workloads -------------------------------------------------------------------------------

def build_workload(name: str, lengths: Sequence[tuple[int, int, str | None]],
                   arrivals: Sequence[float | None], concurrency: int | None = None) -> Workload:
    """A Workload from (input, output, bucket) triples and arrivals of the same length."""
    if len(lengths) != len(arrivals):
        raise ValueError(f"{len(lengths)} lengths but {len(arrivals)} arrivals")
    requests = []
    for index, ((num_in, num_out, bucket), arrival_s) in enumerate(zip(lengths, arrivals)):
        if num_in < 1 or num_out < 1:
            raise ValueError(f"request {index}: input and output tokens must be >= 1, "
                             f"got {num_in}, {num_out}")
        requests.append(RequestSpec(f"{name}-{index}", arrival_s, int(num_in), int(num_out), bucket))
    return Workload(name, tuple(requests), concurrency)


def fixed(num_requests: int = 100, input_tokens: int = 512, output_tokens: int = 128,
          rate_per_s: float | None = None, burstiness: float = 1.0, concurrency: int | None = None,
          seed: int = 0) -> Workload:
    """Every request `input_tokens` in, `output_tokens` out."""
    _check_tokens(input_tokens=input_tokens, output_tokens=output_tokens)
    arrivals = arrival_times(num_requests, make_rng(seed), rate_per_s, burstiness, concurrency)
    lengths = [(input_tokens, output_tokens, None)] * num_requests
    return build_workload("fixed", lengths, arrivals, concurrency)


def uniform_batch(num_requests: int = 8, input_tokens: int = 512, output_tokens: int = 64) -> Workload:
    """The seeds' uniform batch: 8 x 512-token prompts, all at t = 0, bucketed "short"."""
    _check_tokens(input_tokens=input_tokens, output_tokens=output_tokens)
    _check_count(num_requests)
    lengths = [(input_tokens, output_tokens, "short")] * num_requests
    return build_workload("uniform_batch", lengths, [0.0] * num_requests)


def mixed_batch(num_long: int = 1, long_tokens: int = 4096, num_short: int = 7, short_tokens: int = 512,
                output_tokens: int = 64) -> Workload:
    """The seeds' mixed batch: 1 x 4096 then 7 x 512 prompts, all at t = 0 (the long one first in line)."""
    _check_tokens(long_tokens=long_tokens, short_tokens=short_tokens, output_tokens=output_tokens)
    _check_count(num_long)
    _check_count(num_short)
    lengths = ([(long_tokens, output_tokens, "long")] * num_long
               + [(short_tokens, output_tokens, "short")] * num_short)
    return build_workload("mixed_batch", lengths, [0.0] * len(lengths))


def sharegpt(num_requests: int = 1000, rate_per_s: float | None = None, burstiness: float = 1.0,
             concurrency: int | None = None, seed: int = 0, input_median_tokens: float = 384,
             input_sigma: float = 1.2, max_input_tokens: int = 16384, output_median_tokens: float = 128,
             output_sigma: float = 0.8, max_output_tokens: int = 1024) -> Workload:
    """ShareGPT-like long-tailed lengths: lognormal input and output, clipped, bucketed by SLO length.

    Defaults: input median 384 tokens with sigma 1.2 (p90 ~1.8K, p99 ~6.3K before clipping at
    16K), output median 128 with sigma 0.8 (clipped at 1024). Lengths use their own random
    stream, so changing the rate does not change the lengths.
    """
    arrivals = arrival_times(num_requests, make_rng(seed), rate_per_s, burstiness, concurrency)
    length_rng = make_rng(seed + 1)
    inputs = lognormal_lengths(num_requests, length_rng, input_median_tokens, input_sigma, max_input_tokens)
    outputs = lognormal_lengths(num_requests, length_rng, output_median_tokens, output_sigma,
                                max_output_tokens)
    lengths = [(i, o, length_bucket(i)) for i, o in zip(inputs, outputs)]
    return build_workload("sharegpt", lengths, arrivals, concurrency)


def bucket_mix(num_requests: int = 1000, buckets: Mapping[str, tuple[float, int, int]] | None = None,
               output_tokens: int = 128, rate_per_s: float | None = None, burstiness: float = 1.0,
               concurrency: int | None = None, seed: int = 0) -> Workload:
    """Prompts drawn from length buckets by weight (default: the seeds' SLO buckets 85/12/3 %)."""
    _check_tokens(output_tokens=output_tokens)
    arrivals = arrival_times(num_requests, make_rng(seed), rate_per_s, burstiness, concurrency)
    drawn = bucket_mix_lengths(num_requests, make_rng(seed + 1), buckets or DEFAULT_BUCKET_MIX)
    lengths = [(n, output_tokens, name) for name, n in drawn]
    return build_workload("bucket_mix", lengths, arrivals, concurrency)


def trace(path: str | Path, time_scale: float = 1.0, limit: int | None = None) -> Workload:
    """Replay a CSV trace with header `arrival_s,input_tokens,output_tokens`, sorted by arrival.

    `time_scale` multiplies arrival times (0.5 replays twice as fast); `limit` keeps the first rows.
    """
    _check_positive("time_scale", time_scale)
    rows = read_trace_rows(path)
    if limit is not None:
        if limit < 1:
            raise ValueError(f"limit must be >= 1, got {limit}")
        rows = rows[:limit]
    rows.sort(key=lambda r: r[0])
    lengths = [(num_in, num_out, length_bucket(num_in)) for _, num_in, num_out in rows]
    return build_workload(f"trace:{Path(path).name}", lengths, [t * time_scale for t, _, _ in rows])


def read_trace_rows(path: str | Path) -> list[tuple[float, int, int]]:
    """(arrival_s, input_tokens, output_tokens) rows; ValueError naming the file, line and field."""
    p = Path(path)
    if not p.is_file():
        raise ValueError(f"trace file not found: {p}")
    with p.open(newline="") as f:
        reader = csv.reader(f)
        header = tuple(h.strip() for h in next(reader, ()))
        if header != TRACE_HEADER:
            raise ValueError(f"{p}: header must be {','.join(TRACE_HEADER)}, "
                             f"got {','.join(header) or 'nothing'}")
        rows = [_trace_row(p, line_number, fields) for line_number, fields in enumerate(reader, start=2)
                if any(x.strip() for x in fields)]
    if not rows:
        raise ValueError(f"{p}: no requests after the header")
    return rows


def _trace_row(path: Path, line_number: int, fields: list[str]) -> tuple[float, int, int]:
    if len(fields) != 3:
        raise ValueError(f"{path}:{line_number}: expected 3 fields, got {len(fields)}")
    try:
        arrival_s, num_in, num_out = float(fields[0]), int(fields[1]), int(fields[2])
    except ValueError:
        raise ValueError(f"{path}:{line_number}: expected a number and two integers, got {fields}") from None
    if not (arrival_s >= 0 and math.isfinite(arrival_s)) or num_in < 1 or num_out < 1:
        raise ValueError(f"{path}:{line_number}: need arrival_s >= 0 and token counts >= 1, got {fields}")
    return arrival_s, num_in, num_out


# ---- registry --------------------------------------------------------------------------------

_FACTORIES: dict[str, Callable[..., Workload]] = {
    "bucket_mix": bucket_mix,
    "fixed": fixed,
    "mixed_batch": mixed_batch,
    "sharegpt": sharegpt,
    "trace": trace,
    "uniform_batch": uniform_batch,
}
WORKLOAD_NAMES: tuple[str, ...] = tuple(sorted(_FACTORIES))


def workload_params(name: str) -> list[str]:
    """Parameter names `make_workload(name, ...)` accepts."""
    if name not in _FACTORIES:
        raise ValueError(f"unknown workload {name!r}; allowed: {', '.join(WORKLOAD_NAMES)}")
    return list(inspect.signature(_FACTORIES[name]).parameters)


def takes_rate(name: str) -> bool:
    """Whether the workload has an open-loop arrival rate (batches and traces do not)."""
    return "rate_per_s" in workload_params(name)


def make_workload(name: str, **params: Any) -> Workload:
    """The workload called `name` built with `params`; ValueError for unknown names or parameters."""
    accepted = workload_params(name)
    unknown = sorted(set(params) - set(accepted))
    if unknown:
        raise ValueError(f"workload {name!r} does not take {unknown}; it takes {accepted}")
    return _FACTORIES[name](**params)


# ---- checks ----------------------------------------------------------------------------------

def _check_count(num_requests: int) -> None:
    if not isinstance(num_requests, (int, np.integer)) or isinstance(num_requests, bool) or num_requests < 0:
        raise ValueError(f"number of requests must be an integer >= 0, got {num_requests!r}")


def _check_positive(name: str, value: float) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
        raise ValueError(f"{name} must be a number > 0, got {value!r}")


def _check_tokens(**counts: int) -> None:
    for name, value in counts.items():
        if not isinstance(value, (int, np.integer)) or isinstance(value, bool) or value < 1:
            raise ValueError(f"{name} must be an integer >= 1, got {value!r}")

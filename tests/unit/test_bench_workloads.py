"""Workloads: deterministic, right in distribution, strict about their parameters."""
from __future__ import annotations

import math

import numpy as np
import pytest

from bench.workloads import (RequestSpec, Workload, arrival_times, bucket_mix, fixed, gamma_arrivals,
                             length_bucket, make_rng, make_workload, mixed_batch, poisson_arrivals,
                             sharegpt, takes_rate, trace, uniform_batch)


def test_same_seed_gives_the_same_workload_and_another_seed_does_not():
    assert sharegpt(200, rate_per_s=4, seed=7) == sharegpt(200, rate_per_s=4, seed=7)
    assert sharegpt(200, rate_per_s=4, seed=7) != sharegpt(200, rate_per_s=4, seed=8)


def test_lengths_do_not_depend_on_the_rate():
    # Arrivals and lengths draw from separate streams, so a rate sweep serves the same requests.
    slow, fast = sharegpt(100, rate_per_s=1, seed=3), sharegpt(100, rate_per_s=50, seed=3)
    assert [(r.input_tokens, r.output_tokens) for r in slow.requests] == \
           [(r.input_tokens, r.output_tokens) for r in fast.requests]


def test_poisson_mean_gap_is_one_over_the_rate():
    # 20,000 exponential gaps of mean 0.25 s: the sample mean's standard error is 0.25/141 ~ 0.0018.
    times = poisson_arrivals(20000, 4.0, make_rng(0))
    gaps = np.diff([0.0] + times)
    assert gaps.mean() == pytest.approx(0.25, rel=0.03)
    assert gaps.std() == pytest.approx(0.25, rel=0.05)  # exponential: std = mean


def test_gamma_burstiness_keeps_the_mean_and_changes_the_spread():
    # Gamma(shape b, scale 1/(rate b)): mean 1/rate, coefficient of variation 1/sqrt(b).
    bursty = np.diff([0.0] + gamma_arrivals(20000, 2.0, 0.25, make_rng(1)))
    smooth = np.diff([0.0] + gamma_arrivals(20000, 2.0, 4.0, make_rng(1)))
    assert bursty.mean() == pytest.approx(0.5, rel=0.05)
    assert smooth.mean() == pytest.approx(0.5, rel=0.05)
    assert bursty.std() / bursty.mean() == pytest.approx(2.0, rel=0.1)  # 1/sqrt(0.25)
    assert smooth.std() / smooth.mean() == pytest.approx(0.5, rel=0.1)  # 1/sqrt(4)


def test_arrivals_are_sorted_and_start_after_zero():
    times = fixed(50, rate_per_s=10, seed=2).requests
    arrivals = [r.arrival_s for r in times]
    assert arrivals == sorted(arrivals) and arrivals[0] > 0


def test_infinite_rate_and_no_rate_send_everything_at_once():
    assert {r.arrival_s for r in fixed(5, rate_per_s=math.inf).requests} == {0.0}
    assert {r.arrival_s for r in fixed(5).requests} == {0.0}


def test_closed_loop_leaves_arrivals_to_run_time():
    workload = fixed(6, concurrency=2)
    assert workload.concurrency == 2 and workload.is_closed_loop
    assert all(r.arrival_s is None for r in workload.requests)


def test_lognormal_median_and_clipping():
    # Median of exp(N(ln 384, 1.2^2)) is 384; clipped at 16384 (about 0.09 % of draws exceed it).
    workload = sharegpt(20000, rate_per_s=1, seed=0)
    inputs = np.array([r.input_tokens for r in workload.requests])
    outputs = np.array([r.output_tokens for r in workload.requests])
    assert np.median(inputs) == pytest.approx(384, rel=0.05)
    assert np.median(outputs) == pytest.approx(128, rel=0.05)
    assert inputs.max() == 16384 and inputs.min() >= 1
    assert outputs.max() <= 1024


def test_sharegpt_buckets_follow_the_slo_lengths():
    for r in sharegpt(500, rate_per_s=1, seed=0).requests:
        assert r.bucket == length_bucket(r.input_tokens)
    assert (length_bucket(4096), length_bucket(4097), length_bucket(16384), length_bucket(16385)) == \
           ("<=4K", "4K-16K", "4K-16K", ">16K")


def test_seed_batches():
    uniform, mixed = uniform_batch(), mixed_batch()
    assert [r.input_tokens for r in uniform.requests] == [512] * 8
    assert [r.input_tokens for r in mixed.requests] == [4096] + [512] * 7  # the long one first
    assert [r.bucket for r in mixed.requests] == ["long"] + ["short"] * 7
    assert {r.arrival_s for r in uniform.requests + mixed.requests} == {0.0}


def test_bucket_mix_draws_by_weight_within_each_range():
    buckets = {"short": (0.75, 100, 200), "long": (0.25, 5000, 6000)}
    requests = bucket_mix(8000, buckets=buckets, rate_per_s=1, seed=0).requests
    shorts = [r for r in requests if r.bucket == "short"]
    assert len(shorts) / len(requests) == pytest.approx(0.75, abs=0.02)
    assert all(100 <= r.input_tokens <= 200 for r in shorts)
    assert all(5000 <= r.input_tokens <= 6000 for r in requests if r.bucket == "long")


def test_trace_replay_sorts_and_scales(tmp_path):
    path = tmp_path / "t.csv"
    path.write_text("arrival_s,input_tokens,output_tokens\n0.5,100,10\n0.1,2000,20\n\n1.0,30000,5\n")
    workload = trace(path, time_scale=2.0)
    assert [(r.arrival_s, r.input_tokens, r.output_tokens) for r in workload.requests] == \
           [(0.2, 2000, 20), (1.0, 100, 10), (2.0, 30000, 5)]
    assert workload.requests[2].bucket == ">16K"
    assert len(trace(path, limit=2).requests) == 2


@pytest.mark.parametrize("text, message", [
    ("arrival,input_tokens,output_tokens\n0,1,1\n", "header must be"),
    ("arrival_s,input_tokens,output_tokens\n0,1\n", ":2: expected 3 fields"),
    ("arrival_s,input_tokens,output_tokens\n0,1,1\n0,x,1\n", ":3: expected a number"),
    ("arrival_s,input_tokens,output_tokens\n-1,1,1\n", "arrival_s >= 0"),
    ("arrival_s,input_tokens,output_tokens\n", "no requests"),
])
def test_bad_traces_name_the_line(tmp_path, text, message):
    path = tmp_path / "bad.csv"
    path.write_text(text)
    with pytest.raises(ValueError, match=message):
        trace(path)


@pytest.mark.parametrize("call, message", [
    (lambda: fixed(10, rate_per_s=0), "rate_per_s must be a number > 0"),
    (lambda: fixed(10, rate_per_s=-1.0), "rate_per_s must be a number > 0"),
    (lambda: fixed(10, rate_per_s=1, burstiness=0), "burstiness must be a number > 0"),
    (lambda: fixed(10, rate_per_s=1, concurrency=2), "not both"),
    (lambda: fixed(10, concurrency=0), "concurrency must be an integer >= 1"),
    (lambda: fixed(-1), "number of requests"),
    (lambda: fixed(10, input_tokens=0), "input_tokens must be an integer >= 1"),
    (lambda: fixed(10, seed=-3), "seed must be an integer >= 0"),
    (lambda: sharegpt(10, input_sigma=-1), "sigma must be >= 0"),
    (lambda: sharegpt(10, max_input_tokens=0), "min_tokens <= max_tokens"),
    (lambda: bucket_mix(10, buckets={"a": (0, 1, 2)}), "bucket 'a'"),
    (lambda: bucket_mix(10, buckets={"a": (1, 5, 2)}), "bucket 'a'"),
    (lambda: trace("/nonexistent/trace.csv"), "trace file not found"),
    (lambda: make_workload("nope"), "unknown workload 'nope'"),
    (lambda: make_workload("mixed_batch", rate_per_s=2), "does not take \\['rate_per_s'\\]"),
])
def test_bad_parameters_raise_clear_errors(call, message):
    with pytest.raises(ValueError, match=message):
        call()


def test_workload_rejects_mixed_open_and_closed_arrivals():
    with pytest.raises(ValueError, match="closed loop"):
        Workload("w", (RequestSpec("a", None, 1, 1),), concurrency=None)
    with pytest.raises(ValueError, match="closed loop"):
        Workload("w", (RequestSpec("a", 0.0, 1, 1),), concurrency=1)


def test_registry_builds_by_name_and_knows_which_take_a_rate():
    assert make_workload("fixed", num_requests=3, input_tokens=7).requests[0].input_tokens == 7
    assert takes_rate("sharegpt") and not takes_rate("mixed_batch") and not takes_rate("trace")


def test_arrival_times_with_neither_rate_nor_concurrency_is_a_batch():
    assert arrival_times(3, make_rng(0)) == [0.0, 0.0, 0.0]

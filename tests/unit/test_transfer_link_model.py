"""The link fit recovers alpha and beta from noisy timings; the online model follows a change."""
from __future__ import annotations

import random

import pytest

from transfer.link_model import (EngineExcess, LinkFit, LinkModelRegistry, OnlineLinkModel, engine_excess,
                                 fit_link)

ALPHA_S = 50e-6          # 50 us fixed cost per transfer
BETA_BYTES_PER_S = 3e9   # 3 GB/s
SIZES_BYTES = [64 << 10 << i for i in range(11)]  # 64 KiB .. 64 MiB


def _timings(alpha_s: float, beta: float, sizes: list[int], reps: int, noise: float,
             rng: random.Random) -> list[tuple[int, float]]:
    """Multiplicative noise, plus one 20x stall per size: what a loaded host produces."""
    samples = []
    for num_bytes in sizes:
        for _ in range(reps):
            samples.append((num_bytes, (alpha_s + num_bytes / beta) * rng.lognormvariate(0, noise)))
        samples.append((num_bytes, 20 * (alpha_s + num_bytes / beta)))
    return samples


def test_fit_recovers_alpha_and_beta_from_noisy_timings():
    rng = random.Random(0)
    fit = fit_link(_timings(ALPHA_S, BETA_BYTES_PER_S, SIZES_BYTES, reps=9, noise=0.05, rng=rng))
    assert fit.beta_bytes_per_s == pytest.approx(BETA_BYTES_PER_S, rel=0.05)
    assert fit.alpha_s == pytest.approx(ALPHA_S, rel=0.15)
    assert fit.r2 > 0.99
    assert fit.num_samples == len(SIZES_BYTES) * 10
    assert len(fit.residuals) == len(SIZES_BYTES)
    assert fit.max_relative_error < 0.1


def test_fit_clamps_alpha_at_zero_when_the_data_show_no_fixed_cost():
    # Pure bandwidth with a slightly faster smallest size: the free intercept would go negative.
    # 1 KiB at 3 GB/s takes 0.34 us; 0.3 us is 12% faster than the line through the origin.
    samples = [(b, b / BETA_BYTES_PER_S) for b in SIZES_BYTES] + [(1 << 10, 0.3e-6)]
    fit = fit_link(samples)
    assert fit.alpha_s == 0.0
    assert fit.beta_bytes_per_s == pytest.approx(BETA_BYTES_PER_S, rel=0.05)


def test_absolute_weighting_follows_the_large_sizes_of_a_two_regime_link():
    # A host link: 6 GB/s while copies stay in cache (<= 8 MiB), 2 GB/s beyond.
    samples = [(b, b / (6e9 if b <= 8 << 20 else 2e9)) for b in SIZES_BYTES]
    relative, absolute = fit_link(samples), fit_link(samples, weighting="absolute")
    largest = SIZES_BYTES[-1]
    assert abs(absolute.predict(largest) / (largest / 2e9) - 1) < 0.05
    assert absolute.predict(largest) > relative.predict(largest)
    with pytest.raises(ValueError, match="unknown weighting"):
        fit_link(samples, weighting="l1")


def test_fit_rejects_a_single_size_and_a_flat_line():
    with pytest.raises(ValueError, match="two distinct sizes"):
        fit_link([(1 << 20, 1e-3), (1 << 20, 1.1e-3)])
    with pytest.raises(ValueError, match="does not grow"):
        fit_link([(1 << 10, 2e-3), (1 << 20, 1e-3)])


def test_fit_round_trips_through_a_dict():
    fit = fit_link([(b, ALPHA_S + b / BETA_BYTES_PER_S) for b in SIZES_BYTES])
    again = LinkFit.from_dict(fit.to_dict())
    assert again == fit
    assert again.predict(1 << 20) == pytest.approx(ALPHA_S + (1 << 20) / BETA_BYTES_PER_S)


def test_online_model_tracks_a_halved_bandwidth():
    rng = random.Random(1)
    fit = fit_link(_timings(ALPHA_S, BETA_BYTES_PER_S, SIZES_BYTES, reps=5, noise=0.05, rng=rng))
    model = OnlineLinkModel.from_fit(fit)
    new_beta = BETA_BYTES_PER_S / 2  # another tenant starts sharing the link
    for _ in range(200):
        num_bytes = rng.choice(SIZES_BYTES[3:])  # real requests: 512 KiB .. 64 MiB
        model.update(num_bytes, (ALPHA_S + num_bytes / new_beta) * rng.lognormvariate(0, 0.05))
    assert model.beta_bytes_per_s == pytest.approx(new_beta, rel=0.1)
    assert model.predict(32 << 20) == pytest.approx(ALPHA_S + (32 << 20) / new_beta, rel=0.1)


def test_online_model_shrugs_off_one_stall_but_not_a_lasting_change():
    model = OnlineLinkModel.from_params(ALPHA_S, BETA_BYTES_PER_S)
    before_s = model.predict(8 << 20)
    model.update(8 << 20, 100 * before_s)  # one handshake-sized stall
    assert model.predict(8 << 20) < 1.5 * before_s
    for _ in range(100):
        model.update(8 << 20, 4 * before_s)
    assert model.predict(8 << 20) == pytest.approx(4 * before_s, rel=0.1)


def test_online_model_keeps_the_probe_shape_when_traffic_has_one_size():
    # 200 transfers all of 16 MiB at 1.5 GB/s: the probe's small-size end keeps alpha sane.
    model = OnlineLinkModel.from_params(ALPHA_S, BETA_BYTES_PER_S)
    for _ in range(200):
        model.update(16 << 20, ALPHA_S + (16 << 20) / 1.5e9)
    assert model.predict(16 << 20) == pytest.approx(ALPHA_S + (16 << 20) / 1.5e9, rel=0.05)
    assert 0.0 <= model.alpha_s < 1e-3


def test_online_model_round_trips_through_a_dict():
    model = OnlineLinkModel.from_params(ALPHA_S, BETA_BYTES_PER_S)
    model.update(1 << 20, 1e-3)
    again = OnlineLinkModel.from_dict(model.to_dict())
    assert again.predict(4 << 20) == pytest.approx(model.predict(4 << 20))
    again.update(1 << 20, 1e-3)
    model.update(1 << 20, 1e-3)
    assert again.predict(4 << 20) == pytest.approx(model.predict(4 << 20))


def test_registry_seeds_from_probe_json_and_observes_per_pair():
    probe_json = {"version": 1, "pairs": [
        {"prefill_id": "p0", "decode_id": "d0", "alpha_s": ALPHA_S,
         "beta_bytes_per_s": BETA_BYTES_PER_S, "samples": [], "memcpy_bytes_per_s": 6e9}]}
    registry = LinkModelRegistry()
    registry.load_probe_results(probe_json)
    assert registry.pairs() == [("p0", "d0")]
    assert registry.predict("p0", "d0", 3 << 20) == pytest.approx(ALPHA_S + (3 << 20) / 3e9)
    registry.observe("p0", "d0", 3 << 20, 2e-3)
    assert registry.get("p0", "d0").num_updates == 1
    with pytest.raises(KeyError, match="no link model"):
        registry.predict("p0", "d1", 1)
    again = LinkModelRegistry.from_dict(registry.to_dict())
    assert again.predict("p0", "d0", 3 << 20) == pytest.approx(registry.predict("p0", "d0", 3 << 20))


def test_engine_excess_is_the_median_excess_per_transfer_where_it_does_not_grow_with_size():
    fit = LinkFit(alpha_s=20e-6, beta_bytes_per_s=5e9)
    real = [(n, fit.predict(n) + 2e-3 + jitter) for n, jitter in
            [(1 << 20, 0.0), (4 << 20, 3e-4), (16 << 20, -2e-4), (8 << 20, 9e-3)]]  # one stall
    assert engine_excess(fit, real) == EngineExcess(pytest.approx(2e-3 + 1.5e-4), 0.0)
    assert engine_excess(fit, [(1 << 20, fit.predict(1 << 20) / 2)]) == EngineExcess(0.0, 0.0)
    # Two repeated sizes whose excess falls with size: noise, so the median per transfer.
    falling = [(2 << 20, fit.predict(2 << 20) + e) for e in (3e-3, 3e-3)] + \
              [(8 << 20, fit.predict(8 << 20) + e) for e in (1e-3, 1e-3)]
    assert engine_excess(fit, falling) == EngineExcess(pytest.approx(2e-3), 0.0)
    with pytest.raises(ValueError):
        engine_excess(fit, [])


def test_engine_excess_grows_with_size_where_the_engine_copies_slower_than_the_probe():
    """Run 33's host: ~1.9 ms over the probe at 2.1 MiB, ~4 ms at 8.1 MiB; the one transfer right
    after the handshake (a size seen once) is slow and must not tilt the line."""
    fit = LinkFit(alpha_s=88e-6, beta_bytes_per_s=1.75e9)
    per_byte = 2.1e-3 / (6 << 20)
    truth = EngineExcess(overhead_s=1.2e-3, s_per_byte=per_byte)
    real = [(400 << 10, fit.predict(400 << 10) + 5.2e-3)]  # once: the first after the handshake
    for jitter in (-3e-4, 1e-4, 2e-4, 5e-3):  # one stall per size
        for b in (2 << 20, 8 << 20):
            real.append((b, fit.predict(b) + truth.predict(b) + jitter))
    excess = engine_excess(fit, real)
    assert excess.overhead_s == pytest.approx(truth.overhead_s + 1.5e-4)
    assert excess.s_per_byte == pytest.approx(per_byte)
    # On the probe's line it is the link the engine's transfers see, at every size.
    for b in (1 << 20, int(15.6 * 2**20), 64 << 20):
        assert excess.on(fit).predict(b) == pytest.approx(fit.predict(b) + excess.predict(b))

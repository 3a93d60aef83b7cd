"""bench.host_load: a prefill's stretch beside streams, from probes on a deployment (here a fake one
whose requests slow down with the number streaming)."""
from __future__ import annotations

import threading
import time
from types import SimpleNamespace

import pytest

import bench.host_load as host_load
from bench.host_load import BackgroundStreams, measure_load_stretch, non_decreasing, stretch_points


def test_the_stretch_is_each_counts_median_over_the_median_alone():
    counts, factors = zip(*stretch_points({0: [0.10, 0.09, 0.30], 2: [0.15, 0.16, 0.14], 4: [0.20, 0.5, 0.19]}))
    assert counts == (2, 4) and factors == pytest.approx((1.5, 2.0))


def test_a_count_below_a_smaller_one_is_pooled_with_it():
    assert non_decreasing([2.8, 1.9, 1.9]) == pytest.approx([2.2] * 3)
    assert non_decreasing([1.3, 1.4, 1.7]) == [1.3, 1.4, 1.7]
    assert non_decreasing([1.0, 3.0, 2.0, 4.0]) == [1.0, 2.5, 2.5, 4.0]
    assert [f for _, f in stretch_points({0: [0.1], 2: [0.3], 4: [0.2]})] == pytest.approx([2.5, 2.5])


@pytest.mark.parametrize("samples,match", [({2: [0.1]}, "nothing else streaming"),
                                           ({0: [0.1], 2: []}, "positive"), ({0: [0.1], 2: [0.0]}, "positive")])
def test_probes_that_cannot_give_a_stretch_are_refused(samples, match):
    with pytest.raises(ValueError, match=match):
        stretch_points(samples)


class FakeDeployment:
    """Two decode-capable engines; a request's tokens come slower the more requests are open."""

    def __init__(self, fail_streams: bool = False) -> None:
        self.infos = {"both-0": SimpleNamespace(role="both"), "both-1": SimpleNamespace(role="both")}
        self.vocab_size = 100
        self.open = 0
        self.max_open = 0
        self.lock = threading.Lock()
        self.fail_streams = fail_streams
        self.probes: list[tuple[str, tuple[int, ...]]] = []  # (route, prompt) of each one-token request

    def stream(self, prompt_token_ids, max_tokens, ignore_eos, route="auto"):
        assert ignore_eos and all(0 <= t < self.vocab_size for t in prompt_token_ids)
        with self.lock:
            if max_tokens == 1:
                self.probes.append((route, tuple(prompt_token_ids)))
            self.open += 1
            self.max_open = max(self.max_open, self.open)
            others = self.open - 1
        try:
            if self.fail_streams and max_tokens > 1:
                raise RuntimeError("engine died")
            n = min(max_tokens, 3)
            for _ in range(n):
                time.sleep(0.01 * (1 + 0.25 * others))
                yield {"type": "token", "token_ids": [1]}
            yield {"type": "result", "result": SimpleNamespace(
                route=route, kv_transfer_bytes=0, kv_transfer_s=None, predicted_ttft_s=None,
                prefill_worker=None, decode_worker="both-0", token_ids=[1] * n)}
        finally:
            with self.lock:
                self.open -= 1


def test_background_streams_keep_their_count_running_until_stopped():
    dep = FakeDeployment()
    bg = BackgroundStreams(dep.stream, 3, dep.vocab_size, "t")
    deadline = time.monotonic() + 10
    while dep.max_open < 3 and time.monotonic() < deadline:
        time.sleep(0.01)
    bg.stop()
    assert dep.open == 0 and dep.max_open == 3


def test_a_failed_background_stream_is_raised_on_stop():
    dep = FakeDeployment(fail_streams=True)
    bg = BackgroundStreams(dep.stream, 1, dep.vocab_size, "t")
    with pytest.raises(RuntimeError, match="background stream failed"):
        bg.stop()


def test_the_probe_measures_one_count_per_level_per_engine(monkeypatch):
    monkeypatch.setattr(host_load, "SETTLE_S", 0.02)
    monkeypatch.setattr(host_load, "PAUSE_S", 0.0)
    dep = FakeDeployment()
    stretch = measure_load_stretch(dep, repeats=2, streams_per_engine=(1, 2))
    assert sorted(stretch.samples) == [0, 2, 4]  # 1 and 2 streams on each of the two engines
    assert all(len(v) == 2 for v in stretch.samples.values())
    counts, factors = zip(*stretch.points)
    assert counts == (2, 4)
    # The fake's probe beside n streams: 1 + n / 4 times as long (timer noise aside).
    assert factors == pytest.approx((1.5, 2.0), rel=0.25)
    assert factors[0] < factors[1]
    assert dep.open == 0  # every background stream ended


def test_a_probe_on_a_route_sends_every_prompt_there_and_none_the_engine_has_seen(monkeypatch):
    monkeypatch.setattr(host_load, "SETTLE_S", 0.0)
    monkeypatch.setattr(host_load, "PAUSE_S", 0.0)
    dep = FakeDeployment()
    measure_load_stretch(dep, repeats=2, streams_per_engine=(1,))
    first = list(dep.probes)
    measure_load_stretch(dep, repeats=2, streams_per_engine=(1,), route="disaggregated", salt_base=100)
    second = dep.probes[len(first):]
    assert {r for r, _ in first} == {"auto"} and {r for r, _ in second} == {"disaggregated"}
    assert len(second) == 5  # one uncounted, then two at each of the two levels
    # A prompt sent again would come from the prefix cache and time nothing.
    assert not {p for _, p in first} & {p for _, p in second}

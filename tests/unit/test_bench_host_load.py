"""bench.host_load: a prefill's stretch beside streams, from probes on a deployment (here a fake one
whose requests slow down with the number streaming)."""
from __future__ import annotations

import threading
import time
from types import SimpleNamespace

import pytest

import bench.host_load as host_load
from bench.host_load import (BackgroundStreams, beside_excess, measure_load_stretch, non_decreasing, path_points,
                             split_gaps, split_window, stretch_points)
from pd_serve.request import GenerateResult

from .results import generate_result


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
            yield {"type": "result", "result": generate_result(route=route, token_ids=[1] * n)}
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


# ---- the decode steps beside the probe's prefill --------------------------------------------------

def test_gaps_are_split_by_their_midpoint_and_those_at_a_windows_edge_are_left_out():
    times = [[0.0, 0.1, 0.2, 0.3, 0.4, 0.5]]  # midpoints 0.05, 0.15, ... 0.45
    inside, outside = split_gaps(times, [(0.12, 0.26)], margin_s=0.05)
    assert inside == pytest.approx([0.1, 0.1])  # 0.15, 0.25
    assert outside == pytest.approx([0.1, 0.1, 0.1])  # 0.05, 0.35, 0.45; none at the edge here
    inside, outside = split_gaps(times, [(0.12, 0.26)], margin_s=0.1)
    assert len(inside) == 2 and len(outside) == 1  # 0.05 and 0.35 lie within 0.1 of the window


def test_the_excess_is_the_median_inside_over_outside_and_needs_enough_gaps():
    assert beside_excess([0.01] * 9 + [0.5], [0.006] * 10) == pytest.approx(0.004)
    assert beside_excess([0.01] * 9, [0.006] * 10) is None
    assert beside_excess([0.01] * 10, [0.006] * 3) is None


class PrefillingFake(FakeDeployment):
    """A probe (one output token) prefills for PREFILL_S; meanwhile every other request's tokens
    come SLOWER_S later."""

    PREFILL_S, STEP_S, SLOWER_S = 0.15, 0.005, 0.005

    def __init__(self) -> None:
        super().__init__()
        self.prefilling = 0

    def stream(self, prompt_token_ids, max_tokens, ignore_eos, route="auto"):
        if max_tokens == 1:
            with self.lock:
                self.prefilling += 1
            try:
                time.sleep(self.PREFILL_S)
            finally:
                with self.lock:
                    self.prefilling -= 1
            result = self.after_prefill(route)
            yield {"type": "token", "token_ids": [1]}
            yield {"type": "result", "result": result}
            return
        for _ in range(min(max_tokens, 20)):
            time.sleep(self.STEP_S + self.slower_s())
            yield {"type": "token", "token_ids": [1]}
        yield {"type": "result", "result": generate_result(route=route, token_ids=[1] * min(max_tokens, 20))}

    def slower_s(self) -> float:
        return self.SLOWER_S if self.prefilling else 0.0

    def after_prefill(self, route: str) -> GenerateResult:
        """The probe's result, made once its prefill is done, before its token comes."""
        return generate_result(route=route)


def test_the_probe_measures_what_a_decode_step_loses_beside_its_prefill(monkeypatch):
    monkeypatch.setattr(host_load, "SETTLE_S", 0.05)
    monkeypatch.setattr(host_load, "PAUSE_S", 0.05)
    dep = PrefillingFake()
    stretch = measure_load_stretch(dep, repeats=3, streams_per_engine=(1,))
    (count, excess), = stretch.decode_beside
    assert count == 2  # one stream on each of the fake's two engines
    inside, outside = stretch.gap_counts[2]
    assert inside >= 10 and outside >= 10
    # Timer noise aside, the fake's gaps grow from 5 to 10 ms while a probe prefills.
    assert excess == pytest.approx(PrefillingFake.SLOWER_S, rel=0.4)
    assert stretch.to_dict()["decode_beside"] == [[2, excess]]


def test_a_probe_window_splits_where_its_prefill_ended():
    # 0.3 s outside both engines, a third of it before the prefill engine
    prefill, handover = split_window(10.0, 10.8, prefill_s=0.4, decode_s=0.1)
    assert prefill == pytest.approx((10.1, 10.5)) and handover == pytest.approx((10.5, 10.8))
    # parts longer than the TTFT (clocks apart): the prefill starts at once and ends by the token
    prefill, handover = split_window(10.0, 10.3, prefill_s=0.4, decode_s=0.1)
    assert prefill == pytest.approx((10.0, 10.3)) and handover == pytest.approx((10.3, 10.3))
    with pytest.raises(ValueError):
        split_window(10.0, 9.0, 0.1, 0.1)


class HandingOverFake(PrefillingFake):
    """As PrefillingFake, and after its prefill a probe is handed over for HANDOVER_S, while the
    other requests' tokens come HANDOVER_SLOWER_S later; `router_log` is the router's log."""

    HANDOVER_S, HANDOVER_SLOWER_S = 0.15, 0.015

    def __init__(self) -> None:
        super().__init__()
        self.handing_over = 0
        self.served: list[str] = []

    def slower_s(self) -> float:
        return super().slower_s() + (self.HANDOVER_SLOWER_S if self.handing_over else 0.0)

    def after_prefill(self, route: str) -> GenerateResult:
        with self.lock:
            self.handing_over += 1
        try:
            time.sleep(self.HANDOVER_S)
        finally:
            with self.lock:
                self.handing_over -= 1
        self.served.append(f"probe-{len(self.served)}")
        return generate_result(route=route, request_id=self.served[-1])

    def router_log(self):
        return [{"request_id": rid, "route": "disaggregated",
                 "engine_s": {"prefill": self.PREFILL_S, "decode": self.HANDOVER_S}} for rid in self.served]


def test_the_probe_measures_what_a_decode_step_loses_while_a_request_is_handed_over(monkeypatch):
    monkeypatch.setattr(host_load, "SETTLE_S", 0.05)
    monkeypatch.setattr(host_load, "PAUSE_S", 0.05)
    dep = HandingOverFake()
    stretch = measure_load_stretch(dep, repeats=3, streams_per_engine=(1,), router_log=dep.router_log)
    (count, beside), = stretch.decode_beside
    (_, handover), = stretch.decode_handover
    assert count == 2 and min(stretch.handover_gap_counts[2]) >= 10
    # Timer noise aside: 5 ms slower beside the prefill, 15 ms while handed over; neither window
    # takes the other's gaps.
    assert beside == pytest.approx(HandingOverFake.SLOWER_S, rel=0.5)
    assert handover == pytest.approx(HandingOverFake.HANDOVER_SLOWER_S, rel=0.4)
    assert stretch.to_dict()["decode_handover"] == [[2, handover]]
    # Without the parts the whole window is one, as before, and no hand-over is measured.
    plain = measure_load_stretch(dep, repeats=3, streams_per_engine=(1,), salt_base=100)
    assert plain.decode_handover == () and plain.decode_beside


# ---- the request path beside the streams -----------------------------------------------------------

def test_the_path_is_each_counts_median_from_none_up_and_needs_enough_probes():
    paths = {0: [0.010, 0.011, 0.030], 2: [0.020, 0.018, 0.019], 4: [0.015, 0.017, 0.016], 8: [0.05, 0.06]}
    # 4 streams below 2 is noise, pooled with it; 8 had too few probes whose engine part was known.
    counts, values = zip(*path_points(paths))
    assert counts == (0, 2, 4) and values == pytest.approx((0.011, 0.0175, 0.0175))
    assert path_points({2: [0.02] * 3}) == ()  # nothing to start the line from


class PathFake(PrefillingFake):
    """As PrefillingFake, and a probe's way outside its engine takes PATH_S more for each request
    streaming; `router_log` is the router's log of each probe's part in its engine."""

    PATH_S = 0.01

    def __init__(self) -> None:
        super().__init__()
        self.streaming = 0
        self.served: list[str] = []

    def stream(self, prompt_token_ids, max_tokens, ignore_eos, route="auto"):
        if max_tokens > 1:
            with self.lock:
                self.streaming += 1
            try:
                yield from super().stream(prompt_token_ids, max_tokens, ignore_eos, route)
            finally:
                with self.lock:
                    self.streaming -= 1
            return
        yield from super().stream(prompt_token_ids, max_tokens, ignore_eos, route)

    def after_prefill(self, route: str) -> GenerateResult:
        time.sleep(self.PATH_S * self.streaming)
        self.served.append(f"probe-{len(self.served)}")
        return generate_result(route=route, request_id=self.served[-1])

    def router_log(self):
        return [{"request_id": rid, "route": "colocated", "engine_s": {"decode": self.PREFILL_S},
                 "engines_s": self.PREFILL_S} for rid in self.served]


def test_the_probe_measures_the_request_path_beside_each_count_of_streams(monkeypatch):
    monkeypatch.setattr(host_load, "SETTLE_S", 0.05)
    monkeypatch.setattr(host_load, "PAUSE_S", 0.0)
    dep = PathFake()
    stretch = measure_load_stretch(dep, repeats=3, streams_per_engine=(1, 2), router_log=dep.router_log)
    counts, paths = zip(*stretch.path_points)
    assert counts == (0, 2, 4)
    # Timer noise aside: the fake's path grows 10 ms with each stream (one and two per engine).
    assert paths[1] - paths[0] == pytest.approx(0.02, abs=0.008)
    assert paths[2] - paths[0] == pytest.approx(0.04, abs=0.008)
    assert stretch.to_dict()["path_points"] == [list(p) for p in stretch.path_points]
    # Without the router's log, no path.
    assert measure_load_stretch(dep, repeats=3, streams_per_engine=(1,), salt_base=100).path_points == ()

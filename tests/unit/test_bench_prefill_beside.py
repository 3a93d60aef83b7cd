"""bench.prefill_beside: a prefill's stretch beside another engine's prefills, from probes on a
deployment (here a fake one of two engines whose prefills slow down while the other one's runs)."""
from __future__ import annotations

import itertools
import threading
import time
from types import SimpleNamespace

import pytest

import bench.prefill_beside as prefill_beside
from bench.prefill_beside import ProbeRoutes, measure_prefill_beside, probe_routes, shared_engine, stretch_factor
from schedulers.candidates import prefill_engines

from .results import generate_result

PART_S = 0.03  # the fake's prefill alone
SLOWER = 1.5  # and beside the other engine's


class FakeDeployment:
    """Two `both` engines; the least loaded takes a request (ties: both-0), or always both-0
    (`one_engine`). A prefill takes SLOWER times longer while the other engine has a request."""

    def __init__(self, one_engine: bool = False, served_route: str | None = None) -> None:
        self.infos = {"both-0": SimpleNamespace(role="both"), "both-1": SimpleNamespace(role="both")}
        self.vocab_size = 100
        self.one_engine = one_engine
        self.served_route = served_route  # set: every request is served there (a fallback)
        self.open = {"both-0": 0, "both-1": 0}
        self.lock = threading.Lock()
        self.ids = itertools.count()
        self.log: list[dict] = []  # the router's log (bench.router_log)
        self.prompts: list[tuple[int, ...]] = []
        self.routes: set[str] = set()

    def stream(self, prompt_token_ids, max_tokens, ignore_eos, route="auto"):
        with self.lock:
            engine = "both-0" if self.one_engine else min(self.open, key=lambda e: (self.open[e], e))
            other = next(e for e in self.open if e != engine)
            self.open[engine] += 1
            part = PART_S * (SLOWER if self.open[other] else 1.0)
            rid = f"r{next(self.ids)}"
            self.prompts.append(tuple(prompt_token_ids))
            self.routes.add(route)
        try:
            time.sleep(part)
            self.log.append({"request_id": rid, "route": route, "engine_s": {"decode": part}, "engines_s": part})
            yield {"type": "token", "token_ids": [1]}
            yield {"type": "result", "result": generate_result(
                route=self.served_route or route, decode_worker=engine, request_id=rid,
                fallback="prefilled locally" if self.served_route else None)}
        finally:
            with self.lock:
                self.open[engine] -= 1


@pytest.fixture(autouse=True)
def _quick(monkeypatch):
    monkeypatch.setattr(prefill_beside, "PAUSE_S", 0.0)


def test_the_probe_measures_a_prefill_beside_the_other_engines_prefills():
    dep = FakeDeployment()
    routes = probe_routes({"both": 2})
    measured = measure_prefill_beside(dep, routes, lambda: dep.log, repeats=3, rounds=2)
    assert measured.factor == pytest.approx(SLOWER)
    assert len(measured.alone_s) == 6 and len(measured.beside_s) == 6 and measured.dropped == 0
    assert measured.background >= 6
    assert dep.open == {"both-0": 0, "both-1": 0}  # the background stopped, nothing left running
    assert dep.routes == {"colocated"}
    # No prompt sent twice: one sent again would come from the prefix cache and time nothing.
    assert len(set(dep.prompts)) == len(dep.prompts)
    assert measured.to_dict()["routes"] == {"probe": "colocated", "background": "colocated", "part": "decode"}


def test_probes_that_shared_their_engine_are_dropped_and_none_left_is_an_error():
    dep = FakeDeployment(one_engine=True)
    with pytest.raises(RuntimeError, match="shared its engine"):
        measure_prefill_beside(dep, probe_routes({"both": 2}), lambda: dep.log, repeats=2, rounds=1)
    assert dep.open == {"both-0": 0, "both-1": 0}


def test_a_probe_served_on_another_route_than_it_was_sent_on_is_an_error():
    dep = FakeDeployment(served_route="disaggregated")
    with pytest.raises(RuntimeError, match="served on 'disaggregated'"):
        measure_prefill_beside(dep, probe_routes({"both": 2}), lambda: dep.log, repeats=1, rounds=1)


def test_a_probe_without_its_engine_part_in_the_log_is_an_error():
    dep = FakeDeployment()
    with pytest.raises(RuntimeError, match="calibrated"):
        measure_prefill_beside(dep, probe_routes({"both": 2}), lambda: [], repeats=1, rounds=1)


@pytest.mark.parametrize("roles,expected", [
    ({"both": 2}, ProbeRoutes("colocated", "colocated", "decode")),
    ({"prefill": 1, "both": 1}, ProbeRoutes("disaggregated", "colocated", "prefill")),
    ({"prefill": 2, "decode": 1}, ProbeRoutes("disaggregated", "disaggregated", "prefill")),
    ({"prefill": 1, "decode": 1}, None), ({"both": 1}, None)])
def test_the_probe_goes_where_two_engines_prefill(roles, expected):
    assert probe_routes(roles) == expected
    assert (prefill_engines(roles) > 1) == (expected is not None)


def test_the_stretch_is_the_median_beside_over_the_median_alone():
    assert stretch_factor([0.10, 0.12, 0.50], [0.15, 0.18, 0.16]) == pytest.approx(0.16 / 0.12)
    with pytest.raises(ValueError, match="alone and beside"):
        stretch_factor([0.1], [])
    with pytest.raises(ValueError, match="positive"):
        stretch_factor([0.1], [0.0])


def test_a_background_prompt_shares_the_probes_engine_only_if_it_overlapped_the_probe_there():
    routes = ProbeRoutes("disaggregated", "colocated", "prefill")
    probe = SimpleNamespace(prefill_worker="prefill-0", decode_worker="both-0", arrival_s=1.0, first_token_s=1.2,
                            finish_s=1.2)

    def bg(engine, start, end):
        return SimpleNamespace(prefill_worker=None, decode_worker=engine, arrival_s=start, finish_s=end)
    assert not shared_engine(probe, [bg("both-0", 0.9, 1.3)], routes)  # the probe prefilled on prefill-0
    assert shared_engine(probe, [bg("prefill-0", 1.1, 1.4)], routes)
    assert not shared_engine(probe, [bg("prefill-0", 1.3, 1.4), bg("prefill-0", 0.5, 0.9)], routes)

"""`pd-serve diagnose` against a live deployment: configs/colocated.yaml with chunked prefill
turned off. A uniform short workload is diagnosed as none; long prompts mixed into the same
short ones are diagnosed as prefill interference, with chunk size the first thing to change.

One deployment, two workloads one after the other, each its own window of metric snapshots.
"""
from __future__ import annotations

import os
import threading
import time

os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")

import pytest  # noqa: E402
import yaml  # noqa: E402

from pd_serve import deploy  # noqa: E402
from pd_serve.diagnose import PREFILL_INTERFERENCE, diagnose, format_report, window_stats  # noqa: E402
from pd_serve.metrics_window import parse_snapshot  # noqa: E402

from .conftest import distinct_prompt  # noqa: E402

pytestmark = pytest.mark.integration

SHORT_TOKENS = 128
LONG_TOKENS = 7000
NUM_SHORT_CLIENTS = 4
SCRAPE_INTERVAL_S = 1.0


def _unchunked_colocated() -> dict:
    with open("configs/colocated.yaml") as f:
        cfg = yaml.safe_load(f)
    # The seeds' failure case: no chunking, so one long prefill holds the engine for its whole
    # forward pass. (Without chunking the step budget must cover the longest prompt.)
    cfg["workers"]["both"]["engine"].update(enable_chunked_prefill=False, max_num_batched_tokens=8192)
    cfg["scheduler"] = {"policy": "colocated", "calibrate": False}
    # Every request stays local: no P->D link to probe or warm.
    cfg["transfer"].update(probe_at_start=False, handshake_warmup=False)
    return cfg


@pytest.fixture(scope="module")
def dep():
    d = deploy(_unchunked_colocated())
    yield d
    d.shutdown()


class Window:
    """Scrapes the deployment's metrics every second while a workload runs."""

    def __init__(self, dep):
        self.dep = dep
        self.snapshots = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _scrape(self) -> None:
        self.snapshots.append(parse_snapshot(self.dep.metrics_text(), time.time()))

    def _run(self) -> None:
        while not self._stop.wait(SCRAPE_INTERVAL_S):
            self._scrape()

    def __enter__(self) -> "Window":
        self._scrape()
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()
        self._scrape()


def _run_clients(dep, min_short_each: int, long_prompts: int, salt: int) -> list[BaseException]:
    """NUM_SHORT_CLIENTS clients send short prompts back to back (at least `min_short_each`
    each, and for as long as long prompts are still coming); one client sends `long_prompts`."""
    errors: list[BaseException] = []
    longs_done = threading.Event()
    if not long_prompts:
        longs_done.set()

    def shorts(client: int) -> None:
        try:
            i = 0
            while i < min_short_each or not longs_done.is_set():
                dep.generate(prompt_token_ids=distinct_prompt(SHORT_TOKENS, salt + 1000 * client + i),
                             max_tokens=8, ignore_eos=True)
                i += 1
        except BaseException as err:  # collected: a failure must fail the test
            errors.append(err)
            longs_done.set()

    def longs() -> None:
        try:
            for i in range(long_prompts):
                time.sleep(0.5)  # short requests keep flowing between long ones
                dep.generate(prompt_token_ids=distinct_prompt(LONG_TOKENS, salt + 90000 + i),
                             max_tokens=2, ignore_eos=True)
        except BaseException as err:
            errors.append(err)
        finally:
            longs_done.set()

    threads = [threading.Thread(target=shorts, args=(c,)) for c in range(NUM_SHORT_CLIENTS)]
    if long_prompts:
        threads.append(threading.Thread(target=longs))
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=600)
    return errors


def test_a_uniform_short_workload_is_not_prefill_interference(dep):
    with Window(dep) as w:
        errors = _run_clients(dep, min_short_each=15, long_prompts=0, salt=1)
    assert not errors, errors
    stats = window_stats(w.snapshots)
    d = diagnose(stats)
    print(format_report(stats, d))
    assert stats.num_requests == 4 * 15
    assert PREFILL_INTERFERENCE not in d.verdict


def test_long_prompts_mixed_into_short_ones_are_prefill_interference(dep):
    with Window(dep) as w:
        errors = _run_clients(dep, min_short_each=10, long_prompts=6, salt=500000)
    assert not errors, errors
    stats = window_stats(w.snapshots)
    d = diagnose(stats)
    print(format_report(stats, d))
    assert d.active and d.active[0].path == PREFILL_INTERFERENCE, format_report(stats, d)
    assert d.advice[0].startswith("chunk size")

"""The router's count of calls a worker began late (pd_serve.router.LATE_START_S)."""
import collections
import logging
from types import SimpleNamespace

from pd_serve.router import LATE_START_S, Router


def _router():
    return SimpleNamespace(counters=collections.Counter())


def test_a_call_begun_late_is_counted_and_logged(caplog):
    r = _router()
    with caplog.at_level(logging.WARNING, logger="pd_serve.router"):
        Router._note_start(r, "req-1", "decode-0", 100.0, {"t_start": 100.0 + LATE_START_S + 0.5})
    assert r.counters["late_worker_starts"] == 1
    assert "decode-0 began it 0.600 s after the router called" in caplog.text


def test_a_call_begun_in_time_or_without_its_start_time_is_not():
    r = _router()
    Router._note_start(r, "req-1", "prefill-0", 100.0, {"t_start": 100.0 + LATE_START_S / 2})
    Router._note_start(r, "req-2", "prefill-0", 100.0, {"token_ids": [1]})  # an older worker
    assert r.counters["late_worker_starts"] == 0

"""pd_serve.gc_pauses: every collection of the process timed, the long ones kept."""
from __future__ import annotations

import gc

from bench.compare import gc_line
from pd_serve.gc_pauses import GcPauses


def test_collections_are_counted_by_generation_and_the_long_ones_kept():
    pauses = GcPauses(long_s=0.0).install()  # every pause counts as long
    try:
        gc.collect(0)
        gc.collect(2)
    finally:
        pauses.uninstall()
    gc.collect(2)  # after uninstall: not seen
    summary = pauses.summary()
    assert summary["collections"]["0"]["count"] >= 1 and summary["collections"]["2"]["count"] == 1
    assert summary["max_pause_s"] > 0 and summary["collections"]["2"]["seconds"] > 0
    assert [p["generation"] for p in summary["long"]].count(2) == 1
    assert all(p["pause_s"] >= 0 and p["t_start"] > 0 for p in summary["long"])


def test_short_pauses_are_counted_but_not_kept_and_install_is_idempotent():
    pauses = GcPauses(long_s=10.0).install().install()
    try:
        gc.collect(1)
    finally:
        pauses.uninstall()
    assert pauses.summary()["collections"]["1"]["count"] == 1  # one callback, not two
    assert pauses.summary()["long"] == []
    assert gc_line({"client": pauses.summary()}) == f"client {pauses.max_s * 1e3:.0f} ms (0 full)"

"""bench.ray_stream_cost end to end on a small local Ray instance of its own."""
from __future__ import annotations

import json

import pytest

from bench.ray_stream_cost import SHAPES, main

pytestmark = pytest.mark.integration


@pytest.mark.timeout(180)
def test_every_shape_streams_its_tokens_and_reports_both_sides(tmp_path, capsys):
    out = tmp_path / "cost.json"
    assert main(["--tokens", "200", "--period-ms", "1", "--json", str(out)]) == 0
    rows = json.loads(out.read_text())["rows"]
    assert [(r["streams"], r["tokens_per_item"]) for r in rows] == list(SHAPES)
    assert all(r["tokens"] == 200 for r in rows)  # every token arrived
    # Each side spent CPU on them (the OS counts CPU time in 10 ms ticks: summed over the shapes).
    for side in ("sender", "reader"):
        assert all(r[f"{side}_ms_per_token"] >= 0 for r in rows)
        assert sum(r[f"{side}_ms_per_token"] * r["tokens"] for r in rows) > 0
    assert "sender CPU ms/token" in capsys.readouterr().out


def test_bad_arguments_are_refused():
    with pytest.raises(SystemExit):
        main(["--tokens", "0"])

"""bench.decode_growth: a decode step's excess by batch, from closed loops of the workload's mix."""
from __future__ import annotations

from types import SimpleNamespace

import pytest

import bench.decode_growth as dg
import bench.run
from bench.metrics import RequestRecord

STEP_MODEL_S = 0.005


def stream(rid, times, arrival=None, prompt=100, decode="w0", ok=True):
    return RequestRecord(rid, prompt, len(times), times[0] - 0.05 if arrival is None else arrival,
                         first_token_s=times[0], finish_s=times[-1], token_times=list(times), ok=ok,
                         decode_worker=decode)


def loop(streams, gap_s, start=0.0, tokens=30, tag="r"):
    """`streams` requests decoding side by side on one engine, a token every `gap_s`."""
    times = [start + 0.1 + i * gap_s for i in range(tokens)]
    return [stream(f"{tag}{streams}-{k}", times) for k in range(streams)]


def test_each_loop_gives_the_median_excess_at_its_own_batch():
    records = {1: loop(1, 0.006), 2: loop(2, 0.009, start=10), 4: loop(4, 0.012, start=20)}
    points, counts = dg.loop_points(records, lambda contexts: STEP_MODEL_S)
    assert [n for n, _ in points] == [1, 2, 4]
    assert [e for _, e in points] == pytest.approx([0.001, 0.004, 0.007])
    assert counts == ((1, 29), (2, 58), (4, 116))


def test_gaps_beside_a_request_on_its_way_to_its_first_token_do_not_count():
    # Another request arrives at 0.1 and has its first token at 0.4: every gap of the stream
    # overlapping that span is left out, and with it the loop falls under min_gaps.
    records = loop(1, 0.006)
    newcomer = stream("new", [0.4, 0.45], arrival=0.1, decode="w1")
    points, counts = dg.loop_points({1: records + [newcomer]}, lambda contexts: STEP_MODEL_S, min_gaps=20)
    assert points == ()
    assert counts[0][0] == 1 and counts[0][1] < 20


def test_growth_needs_the_one_stream_point_and_another():
    assert dg.DecodeGrowth(((1, 0.001), (4, 0.003)), (), 500.0, 1.0).usable
    assert not dg.DecodeGrowth(((1, 0.001),), (), 500.0, 1.0).usable
    assert not dg.DecodeGrowth(((2, 0.001), (4, 0.003)), (), 500.0, 1.0).usable


class FakeModel:
    def predict(self, prefill_tokens, prefill_context, contexts):
        return STEP_MODEL_S


def fake_dep(calibrated=True):
    return SimpleNamespace(stream=None, vocab_size=100,
                           calibration=SimpleNamespace(model=FakeModel()) if calibrated else None)


def test_the_probe_runs_every_loop_each_repeat_and_reads_its_batch(monkeypatch):
    calls = []

    def fake_run(stream_fn, workload, vocab, progress=True, salt=0):
        streams = workload.concurrency
        calls.append((streams, workload.num_requests, salt))
        # every loop steps at 8 + streams ms a token: its excess over the 5 ms model, 3 + streams
        return loop(streams, (8 + streams) / 1e3, start=100.0 * len(calls), tag=f"c{len(calls)}-")

    monkeypatch.setattr(bench.run, "run_workload", fake_run)
    monkeypatch.setattr(dg, "PAUSE_S", 0.0)
    growth = dg.measure_decode_growth(fake_dep(), {"short": (1.0, 64, 512)}, loop_streams=(1, 2, 4), repeats=2)
    assert [c[0] for c in calls] == [1, 2, 4, 4, 2, 1]  # the second pass reversed
    assert [c[1] for c in calls] == [dg.REQUESTS_PER_STREAM * c[0] for c in calls]
    assert len({c[2] for c in calls}) == len(calls)  # no prompt sent twice
    assert [n for n, _ in growth.points] == [1, 2, 4]
    assert [e for _, e in growth.points] == pytest.approx([0.004, 0.005, 0.007])
    assert growth.usable and growth.context_tokens == pytest.approx(100 + 30 / 2)


def test_a_failed_request_or_no_calibration_is_an_error(monkeypatch):
    def failing(stream_fn, workload, vocab, progress=True, salt=0):
        return [stream("x", [0.1, 0.2], ok=False)]

    monkeypatch.setattr(bench.run, "run_workload", failing)
    with pytest.raises(RuntimeError, match="loop of 1 streams failed"):
        dg.measure_decode_growth(fake_dep(), {"short": (1.0, 64, 512)}, loop_streams=(1,), repeats=1)
    with pytest.raises(ValueError, match="calibration"):
        dg.measure_decode_growth(fake_dep(calibrated=False), {"short": (1.0, 64, 512)})

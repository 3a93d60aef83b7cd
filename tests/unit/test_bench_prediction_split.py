"""bench.prediction_split: a logged request's TTFT split into predicted and measured parts."""
import json

import pytest

from bench.prediction_split import load_system, parts, split_rows


def _disagg(ttft_s=0.5, on_p=0.1, on_d=0.3, n=300):
    return {"request_id": "r1", "route": "disaggregated", "num_prompt_tokens": n,
            "predicted_ttft_s": 0.2, "ttft_s": ttft_s,
            "predicted": {"disaggregated.queue_s": 0.01, "disaggregated.prefill_s": 0.09,
                          "disaggregated.transfer_s": 0.005, "disaggregated.decode_wait_s": 0.0,
                          "disaggregated.first_step_s": 0.08, "disaggregated.path_s": 0.015,
                          "colocated.queue_s": 9.0, "colocated.prefill_s": 9.0, "colocated.path_s": 9.0},
            "engine_s": {"prefill": on_p, "decode": on_d}}


def test_disaggregated_parts_put_the_kv_read_on_the_decode_side():
    split = parts(_disagg())
    assert split["P"] == pytest.approx((0.10, 0.1))
    assert split["D"] == pytest.approx((0.085, 0.3))
    assert split["path"] == pytest.approx((0.015, 0.1))  # 0.5 - (0.1 + 0.3)
    assert split["ttft"] == (0.2, 0.5)


def test_colocated_parts_and_missing_engine_times():
    e = {"request_id": "c", "route": "colocated", "num_prompt_tokens": 2000, "predicted_ttft_s": 1.0,
         "ttft_s": 1.2, "predicted": {"colocated.queue_s": 0.3, "colocated.prefill_s": 0.65,
                                      "colocated.path_s": 0.05},
         "engine_s": {"decode": 1.1}}
    split = parts(e)
    assert split["engine"] == pytest.approx((0.95, 1.1))
    assert split["path"] == pytest.approx((0.05, 0.1))
    assert parts({**e, "engine_s": {"decode": None}}) is None
    assert parts({**_disagg(), "engine_s": {"prefill": 0.1}}) is None


def test_rows_group_by_route_and_bucket_with_median_differences():
    rows = split_rows([_disagg(on_d=0.3), _disagg(on_d=0.5, ttft_s=0.7), _disagg(n=2000)], "hybrid rate_1")
    assert [r[:4] for r in rows] == [["hybrid rate_1", "disaggregated", "long", 1],
                                     ["hybrid rate_1", "disaggregated", "short", 2]]
    assert rows[1][7] == "85 / 400 (+315)"  # D: predicted 85 ms, measured 300 and 500 ms


def test_load_system_joins_records_on_the_served_id(tmp_path):
    system = tmp_path / "hybrid adaptive"
    (system / "rate_1").mkdir(parents=True)
    (system / "predictions.json").write_text(json.dumps([_disagg()]))
    (system / "rate_1" / "records.json").write_text(json.dumps([{"served_id": "r1"}, {"served_id": "x"}]))
    assert load_system(system) == [("rate_1", [_disagg()])]
    (system / "rate_1" / "records.json").write_text(json.dumps([{"request_id": "old"}]))
    with pytest.raises(ValueError, match="served_id"):
        load_system(system)

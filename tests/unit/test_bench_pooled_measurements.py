"""One system's measurements over a sweep's rounds, pooled figure by figure."""
from __future__ import annotations

import pytest

from bench.pooled_measurements import (flat_stretch, hardware_measurements, pooled_length_probe, pooled_measurements,
                                       pooled_record, stretch_ratios)
from tests.unit.test_bench_sim_fidelity import cal  # noqa: F401  (shared fixture)


def record(overhead_s: float, stretch: list, batch: list, cores: int = 2, name: str = "colocated") -> dict:
    return {"overhead_s": overhead_s, "config": name, "block_size": 16,
            "link": {"alpha_s": overhead_s / 10, "beta_bytes_per_s": 1e9},
            "calibration": {"step_gap_s": overhead_s},
            "host": {"num_cores": cores, "load_stretch": stretch, "step_excess_batch": batch,
                     "samples": [{"window": overhead_s}]}}


def test_numbers_and_points_at_the_same_counts_take_the_median():
    rounds = [record(0.010, [[1, 1.2], [2, 1.5]], [[4, 0.003]]),
              record(0.030, [[1, 1.1], [2, 2.5]], [[4, 0.001]]),
              record(0.012, [[1, 1.3], [2, 1.6]], [[4, 0.002]])]
    pooled = pooled_record(rounds)
    assert pooled["overhead_s"] == pytest.approx(0.012)
    assert pooled["link"] == {"alpha_s": pytest.approx(0.0012), "beta_bytes_per_s": 1e9}
    assert pooled["host"]["load_stretch"] == [[1, pytest.approx(1.2)], [2, pytest.approx(1.6)]]
    assert pooled["host"]["step_excess_batch"] == [[4, pytest.approx(0.002)]]
    # Counts stay integers; texts, raw samples and probe detail stay the first round's.
    assert pooled["host"]["num_cores"] == 2 and isinstance(pooled["host"]["num_cores"], int)
    assert pooled["block_size"] == 16 and pooled["config"] == "colocated"
    assert pooled["host"]["samples"] == [{"window": 0.010}] and pooled["calibration"] == {"step_gap_s": 0.010}
    # The records given are left as they were.
    assert rounds[1]["overhead_s"] == 0.030


def test_points_at_different_counts_and_keys_missing_somewhere_stay_the_first_rounds():
    a = record(0.010, [[1, 1.2], [2, 1.5]], [[4, 0.003]])
    b = record(0.020, [[1, 1.1], [4, 2.5]], [[4, 0.001]])
    a["host"]["decode_beside_prefill"] = [[1, 0.004]]
    pooled = pooled_record([a, b])
    assert pooled["host"]["load_stretch"] == [[1, 1.2], [2, 1.5]]
    assert pooled["host"]["decode_beside_prefill"] == [[1, 0.004]]
    assert pooled["overhead_s"] == pytest.approx(0.015)


def test_per_system_over_the_rounds_that_measured_it():
    rounds = [{"colocated": record(0.010, [], []), "hybrid": record(0.050, [], [])},
              {"colocated": record(0.020, [], [])}]
    pooled = pooled_measurements(rounds)
    assert set(pooled) == {"colocated", "hybrid"}
    assert pooled["colocated"]["overhead_s"] == pytest.approx(0.015)
    assert pooled["hybrid"]["overhead_s"] == 0.050
    with pytest.raises(ValueError):
        pooled_record([])


def coefficients(scale: float) -> dict:
    return {"overhead_s": 0.005 * scale, "s_per_linear_flop": 1e-11 * scale,
            "s_per_attention_flop": 2e-11 * scale, "s_per_kv_byte": 1e-10 * scale}


def test_hardware_pools_the_step_model_over_every_system_and_the_rest_over_alike_deployments():
    shapes = {"colocated": "two both", "adaptive": "two both", "disaggregated": "prefill + decode"}

    def rec(scale: float, path_s: float) -> dict:
        return {**coefficients(scale), "model_spec": {"layers": 2}, "request_path": {"colocated_s": path_s}}

    rounds = [{"colocated": rec(1.0, 0.010), "adaptive": rec(1.5, 0.030), "disaggregated": rec(0.9, 0.100)},
              {"colocated": rec(1.1, 0.012), "adaptive": rec(1.2, 0.014), "disaggregated": rec(5.0, 0.200)}]
    out = hardware_measurements(rounds, shapes)
    assert len(out) == 2 and all(set(r) == set(shapes) for r in out)
    # The step model: the median of all six records (1.1 and 1.2 in the middle), in every record.
    for r in out:
        for label in shapes:
            assert r[label]["s_per_linear_flop"] == pytest.approx(1.15e-11)
            assert r[label]["overhead_s"] == pytest.approx(0.00575)
    # The request path: colocated and adaptive share theirs (median of 10, 30, 12, 14 ms), the
    # disaggregated deployment keeps its own rounds' (median of 100 and 200 ms).
    assert out[0]["adaptive"]["request_path"]["colocated_s"] == pytest.approx(0.013)
    assert out[1]["colocated"]["request_path"]["colocated_s"] == pytest.approx(0.013)
    assert out[0]["disaggregated"]["request_path"]["colocated_s"] == pytest.approx(0.150)
    assert rounds[0]["adaptive"]["overhead_s"] == pytest.approx(0.0075)  # the inputs are left as they were


def length_probe(points: list, alone_s: float, route: str = "colocated") -> dict:
    return {"streams": 2, "route": route, "points": points,
            "engine_s": {str(n): {"0": [alone_s], "2": [alone_s * f]} for n, f in points},
            "ttft_s": {str(n): {"0": [alone_s + 0.01]} for n, _ in points}}


def test_hardware_pools_the_length_probes_of_alike_deployments(cal):  # noqa: F811
    # run 114's colocated and adaptive engines, round 0 and round 1
    probes = [length_probe([[256, 1.60], [1536, 1.80], [3584, 1.40]], 0.1),
              length_probe([[256, 1.53], [1536, 1.77], [3584, 1.60]], 0.2),
              length_probe([[256, 1.85], [1536, 1.41], [3584, 1.53]], 0.3),
              length_probe([[256, 1.73], [1536, 1.72]], 0.4)]  # one length short: left out
    pooled = pooled_length_probe(probes)
    assert pooled["points"] == [[256, pytest.approx(1.665)], [1536, pytest.approx(1.745)]]
    assert pooled["engine_s"]["256"]["0"] == [0.1, 0.2, 0.3, 0.4]
    assert pooled["engine_s"]["1536"]["2"] == pytest.approx([0.18, 0.354, 0.423, 0.688])
    assert set(pooled["engine_s"]) == set(pooled["ttft_s"]) == {"256", "1536"}
    assert pooled_length_probe([None, {}]) is None
    other_route = length_probe([[256, 1.2]], 0.1, route="disaggregated")
    assert pooled_length_probe([probes[0], other_route]) == probes[0]  # not one engine's: the first, as it was
    shapes = {"colocated": "two both", "adaptive": "two both"}

    def rec(probe: dict) -> dict:
        return {**cal, "host": {"num_cores": 2, "length_probe": probe}}
    rounds = [{"colocated": rec(probes[0]), "adaptive": rec(probes[2])},
              {"colocated": rec(probes[1]), "adaptive": rec(probes[3])}]
    out = hardware_measurements(rounds, shapes)
    in_sweep_order = pooled_length_probe([probes[0], probes[2], probes[1], probes[3]])
    assert in_sweep_order["points"] == pooled["points"]
    assert all(r[label]["host"]["length_probe"] == in_sweep_order for r in out for label in shapes)
    assert pooled_record([r["colocated"] for r in rounds])["host"]["length_probe"] == probes[0]  # own rounds: the first


def test_hardware_refuses_records_of_other_models_or_systems_of_no_shape():
    a = {**coefficients(1.0), "model_spec": {"layers": 2}}
    b = {**coefficients(1.0), "model_spec": {"layers": 4}}
    with pytest.raises(ValueError, match="different models"):
        hardware_measurements([{"colocated": a}, {"colocated": b}], {"colocated": "x"})
    with pytest.raises(ValueError, match="no deployment shape for hybrid"):
        hardware_measurements([{"colocated": a, "hybrid": a}], {"colocated": "x"})
    with pytest.raises(ValueError, match="at least one record"):
        hardware_measurements([], {})


def test_hardware_keeps_each_measured_decode_step_as_measured_over_the_pooled_model(cal):
    # Three deployments: two calibrated at the true overhead, one 3 ms high. The pool takes the
    # true one; the high one's probes had measured its decode steps 1 ms over its own (high)
    # model, so 4 ms over the pooled one, which is what it must carry.
    from schedulers.step_time import COEFFICIENTS

    def rec(extra_overhead_s: float) -> dict:
        return {**cal, "overhead_s": cal["overhead_s"] + extra_overhead_s,
                "host": {"step_excess_1_s": 0.001, "step_excess_2_s": 0.002, "step_excess_alone_s": None,
                         "step_excess_quiet_s": 0.0005, "step_excess_spin_s": 0.002,
                         "step_excess_batch": [[4, 0.003]], "decode_beside_prefill": [[1, 0.005]]}}

    shapes = {"a": "one", "b": "two", "c": "three"}
    out = hardware_measurements([{"a": rec(0.0), "b": rec(0.0), "c": rec(0.003)}], shapes)[0]
    assert out["c"]["overhead_s"] == pytest.approx(cal["overhead_s"])
    assert all(out["c"][k] == pytest.approx(cal[k]) for k in COEFFICIENTS)
    host = out["c"]["host"]
    assert host["step_excess_1_s"] == pytest.approx(0.004) and host["step_excess_2_s"] == pytest.approx(0.005)
    assert host["step_excess_batch"] == [[4, pytest.approx(0.006)]]
    assert host["step_excess_alone_s"] is None
    assert host["step_excess_quiet_s"] == pytest.approx(0.0035)  # lone streams: one stream's shift
    assert host["step_excess_spin_s"] == pytest.approx(0.005)
    assert host["decode_beside_prefill"] == [[1, 0.005]]  # a difference of two measured steps: as it was
    assert out["a"]["host"]["step_excess_1_s"] == pytest.approx(0.001)


def probed(alone: list, beside: dict, base: dict | None = None) -> dict:
    """A record (on `base`'s step model) whose load probe took `alone` and `beside` (count ->
    TTFTs), with its points per count."""
    samples = {"0": alone, **{str(n): ts for n, ts in beside.items()}}
    first = sorted(alone)[len(alone) // 2]
    points = [[n, sorted(ts)[len(ts) // 2] / first] for n, ts in beside.items()]
    return {**(base or {}), "host": {"load_stretch": points, "load_probe": {"samples": samples}}}


def test_a_flat_stretch_pools_every_probe_beside_streams_over_its_own_records_alone(cal):  # noqa: F811
    # Record a: 0.1 s alone, x2.2 / x1.3 / x1.8 at 2 / 4 / 8 streams (run 60's colocated had such
    # a dip); record b: 0.2 s alone, x1.5 everywhere. Each probe over its own record's alone.
    a = probed([0.1, 0.1, 0.1], {2: [0.22, 0.22, 0.22], 4: [0.13, 0.13, 0.13], 8: [0.18, 0.18, 0.18]}, cal)
    b = probed([0.2, 0.2, 0.2], {2: [0.3, 0.3, 0.3], 4: [0.3, 0.3, 0.3], 8: [0.3, 0.3, 0.3]}, cal)
    assert flat_stretch([a, b]) == pytest.approx(1.5)  # 18 ratios: nine at 1.5, three each at 1.3, 1.8, 2.2
    assert flat_stretch([a]) == pytest.approx(1.8)
    assert flat_stretch([probed([0.2], {2: [0.1]})]) == 1.0  # a load never makes a prefill faster
    assert flat_stretch([{"host": {}}]) is None and flat_stretch([a], "load_probe_beside") is None
    shapes = {"colocated": "two both", "adaptive": "two both"}
    out = hardware_measurements([{"colocated": a, "adaptive": b}], shapes, stretch="flat")[0]
    assert out["colocated"]["host"]["load_stretch"] == [[2, pytest.approx(1.5)], [4, pytest.approx(1.5)],
                                                         [8, pytest.approx(1.5)]]
    assert out["adaptive"]["host"]["load_stretch"] == out["colocated"]["host"]["load_stretch"]
    # By counts, as before: the median of the two records' points at each count.
    counts = hardware_measurements([{"colocated": a, "adaptive": b}], shapes, stretch="counts")[0]
    assert counts["colocated"]["host"]["load_stretch"] == [[2, pytest.approx(1.85)], [4, pytest.approx(1.4)],
                                                           [8, pytest.approx(1.65)]]
    with pytest.raises(ValueError, match="stretch must be one of"):
        hardware_measurements([{"colocated": a}], shapes, stretch="mean")


def test_the_draws_are_every_probe_beside_streams_over_its_own_records_alone_sorted(cal):  # noqa: F811
    a = probed([0.1, 0.1, 0.1], {2: [0.22], 4: [0.13], 8: [0.18]}, cal)
    b = probed([0.2, 0.2, 0.2], {2: [0.3], 4: [0.36]}, cal)
    assert stretch_ratios([a, b]) == pytest.approx([1.3, 1.5, 1.8, 1.8, 2.2])
    assert flat_stretch([a, b]) == pytest.approx(1.8)  # their median
    assert stretch_ratios([{"host": {}}]) == [] and stretch_ratios([a], "load_probe_beside") == []
    # The hardware form keeps them beside the points (either stretch form), for the form that draws.
    for stretch in ("flat", "counts"):
        out = hardware_measurements([{"colocated": a, "adaptive": b}], {"colocated": "x", "adaptive": "x"},
                                    stretch=stretch)[0]
        assert out["colocated"]["host"]["load_stretch_draws"] == pytest.approx([1.3, 1.5, 1.8, 1.8, 2.2])
        assert "load_stretch_beside_draws" not in out["colocated"]["host"]  # no probe on a prefill-only engine


def test_hardware_shifts_the_mix_loops_points_at_their_own_context(cal):  # noqa: F811
    # One deployment calibrated with KV reads twice as dear as the pool's: its loops' points,
    # measured against that model, gain what the two models differ by at the loops' mean context
    # (1,000 tokens a stream), not at the short bursts' context.
    from bench.pooled_measurements import EXCESS_CONTEXT_TOKENS
    from bench.sim_fidelity import step_model_from_calibration

    def rec(kv_factor: float) -> dict:
        return {**cal, "s_per_kv_byte": cal["s_per_kv_byte"] * kv_factor,
                "host": {"step_excess_mix": [[1, 0.001], [4, 0.002]], "step_excess_mix_context_tokens": 1000.0}}

    out = hardware_measurements([{"a": rec(1.0), "b": rec(1.0), "c": rec(2.0)}], {"a": "1", "b": "2", "c": "3"})[0]
    own, pooled = step_model_from_calibration(rec(2.0)), step_model_from_calibration(cal)
    shift = [own.predict(0, 0, [1000] * n) - pooled.predict(0, 0, [1000] * n) for n in (1, 4)]
    assert shift[1] > 3 * shift[0] > 0
    assert out["c"]["host"]["step_excess_mix"] == [[1, pytest.approx(0.001 + shift[0])],
                                                    [4, pytest.approx(0.002 + shift[1])]]
    at_burst = own.predict(0, 0, [EXCESS_CONTEXT_TOKENS] * 4) - pooled.predict(0, 0, [EXCESS_CONTEXT_TOKENS] * 4)
    assert shift[1] > 2 * at_burst
    assert out["a"]["host"]["step_excess_mix"] == [[1, pytest.approx(0.001)], [4, pytest.approx(0.002)]]


def test_hardware_gives_a_deployment_without_loops_of_the_mix_the_others_decode_growth(cal):  # noqa: F811
    # hybrid ran the loops (one engine decodes), colocated only the bursts: under the default growth
    # colocated takes hybrid's points, marked shared; under "own" it keeps none and prices its bursts'
    def rec(mix: list | None) -> dict:
        host = {"num_cores": 2, "step_excess_batch": [[4, 0.001]]}
        if mix is not None:
            host["step_excess_mix"] = mix
        return {**cal, "host": host}

    shapes = {"colocated": "two both", "hybrid": "prefill + both"}
    rounds = [{"colocated": rec(None), "hybrid": rec([[1, 0.001], [6, 0.004]])},
              {"colocated": rec(None), "hybrid": rec([[1, 0.002], [6, 0.006]])}]
    shared = hardware_measurements(rounds, shapes)
    for r in shared:
        assert r["colocated"]["host"]["step_excess_mix"] == r["hybrid"]["host"]["step_excess_mix"] == [
            [1, pytest.approx(0.0015)], [6, pytest.approx(0.005)]]
        assert r["colocated"]["host"]["step_excess_mix_shared"] is True
        assert "step_excess_mix_shared" not in r["hybrid"]["host"]
        assert r["colocated"]["host"]["step_excess_batch"] == [[4, pytest.approx(0.001)]]  # kept, unread then
    own = hardware_measurements(rounds, shapes, growth="own")
    assert all("step_excess_mix" not in r["colocated"]["host"] for r in own)
    # nothing to share where no deployment ran the loops
    alone = hardware_measurements([{"colocated": rec(None)}], {"colocated": "two both"})
    assert "step_excess_mix" not in alone[0]["colocated"]["host"]
    with pytest.raises(ValueError, match="growth must be one of"):
        hardware_measurements(rounds, shapes, growth="mine")

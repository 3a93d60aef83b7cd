"""The adaptive router's choices where both routes were predicted to miss, and how its predictions
held up by how late they said a request would be: read off a live rates sweep.

    python -m bench.route_choices DIR [--system "hybrid adaptive"]

DIR is what `bench.compare --experiment rates` wrote (its summary.json's rounds, or one round's
folder). Each adaptive system's router logged every request's predictions on both routes
(`<system>/predictions.json`, joined to `rate_<r>/records.json` as `bench.prediction_split`
joins them). Two tables, every rate and round pooled:

- by route and predicted TTFT on it: how many, and the medians of actual over predicted TTFT
  and, on the colocated route, of the engine part (queue + prefill, by vLLM's own timestamps)
  over its prediction. A prediction that errs more the later it says a request will be biases
  exactly the choices below.
- the requests both routes were predicted to miss, by prompt bucket, by the policy's rule that
  chose between them (`schedulers.policies.adaptive.miss_rule`, with the deployment's own
  tolerance and lost ratio) and by the route taken: how many met their TTFT SLO, the median
  actual TTFT, and each route's median predicted TTFT.

Measured on runs 104-106 (hybrid, stop 58): short prompts predicted to miss both ways by about as
much went disaggregated, by the rule, and met their TTFT SLO 22-39% of the time (130-137 of them
per sweep); those predicted to miss less colocated went there and met it 51-58% of the time,
taking 0.69-0.76 of the colocated prediction. Predicted at 0.3-0.5 s, the colocated route took
0.79-0.82 of it (its engine part 0.77-0.80); the disaggregated route at 0.3-1 s 1.01-1.13.
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

from bench.prediction_split import load_system
from pd_serve.report import format_table
from schedulers.policies.adaptive import MISS_RULES, AdaptivePolicy, lost_to_goodput, miss_rule
from schedulers.slo import SloTable
from schedulers.types import ROUTE_COLOCATED, ROUTE_DISAGGREGATED

ROUTES = (ROUTE_COLOCATED, ROUTE_DISAGGREGATED)
# The rates mix's buckets (bench.compare.RATES_BUCKETS): short prompts up to 512 tokens, medium to 2,048
BUCKETS = (("short", 512), ("medium", 2048), ("long", None))
PREDICTED_EDGES_S = (0.0, 0.1, 0.2, 0.3, 0.5, 1.0)


@dataclass(frozen=True)
class Rules:
    """What the deployment's adaptive policy decides with: its SLOs, tolerance and lost ratio."""

    slo: SloTable
    tolerance: float = AdaptivePolicy.violation_tolerance
    lost_ratio: float = AdaptivePolicy.lost_ttft_ratio

    @classmethod
    def of_deployment(cls, deployment: Mapping[str, Any]) -> Rules:
        scheduler = deployment.get("scheduler") or {}
        if scheduler.get("policy") != "adaptive":
            raise ValueError(f"{deployment.get('name')!r} routes with {scheduler.get('policy')!r}, not adaptive")
        slo = scheduler.get("slo") or {}
        table = SloTable(tuple(tuple(b) for b in slo["ttft_buckets"]), slo["tpot_s"]) if slo else SloTable()
        params = scheduler.get("params") or {}
        return cls(table, params.get("violation_tolerance", cls.tolerance),
                   params.get("lost_ttft_ratio", cls.lost_ratio))

    def rule(self, entry: Mapping[str, Any]) -> str | None:
        """The rule that chose `entry`'s route (MISS_RULES), or None unless both routes missed."""
        p = entry["predicted"]
        if any(f"{r}.violation" not in p for r in ROUTES):
            return None
        violations = tuple(p[f"{r}.violation"] for r in ROUTES)
        if min(violations) <= 1.0:
            return None
        slo_s = self.slo.ttft_slo_s(entry["num_prompt_tokens"])
        lost = tuple(lost_to_goodput(p[f"{r}.ttft_s"], slo_s, self.lost_ratio) for r in ROUTES)
        return miss_rule(violations, lost, self.tolerance)  # type: ignore[arg-type]


def bucket(num_prompt_tokens: int) -> str:
    return next(name for name, top in BUCKETS if top is None or num_prompt_tokens <= top)


def _band(seconds: float) -> int:
    """The index in PREDICTED_EDGES_S of the band's lower edge holding `seconds` (below 0: the first)."""
    return max(0, sum(seconds >= edge for edge in PREDICTED_EDGES_S) - 1)


def _band_label(band: int) -> str:
    lower = PREDICTED_EDGES_S[band]
    if band + 1 == len(PREDICTED_EDGES_S):
        return f"{lower:g}+ s"
    return f"{lower:g}-{PREDICTED_EDGES_S[band + 1]:g} s"


def predicted_band(seconds: float) -> str:
    """The band of PREDICTED_EDGES_S holding `seconds` ("0.2-0.3 s", "1+ s")."""
    return _band_label(_band(seconds))


def _median(values: Sequence[float], fmt: str) -> str:
    return format(statistics.median(values), fmt) if values else "-"


def calibration_rows(entries: Iterable[Mapping[str, Any]]) -> list[list[Any]]:
    """Per (route taken, predicted TTFT band): n, median predicted and actual TTFT (ms), median
    actual / predicted, and on the colocated route the engine part's measured / predicted."""
    groups: dict[tuple[str, int], list[Mapping[str, Any]]] = {}
    for e in entries:
        predicted = e["predicted"].get(f"{e['route']}.ttft_s")
        if predicted and predicted > 0 and e["ttft_s"] > 0:
            groups.setdefault((e["route"], _band(predicted)), []).append(e)
    rows = []
    for (route, band), group in sorted(groups.items()):
        pred = [e["predicted"][f"{route}.ttft_s"] for e in group]
        actual = [e["ttft_s"] for e in group]
        engine = [e["engine_s"]["decode"] / (e["predicted"][f"{route}.queue_s"] + e["predicted"][f"{route}.prefill_s"])
                  for e in group if route == ROUTE_COLOCATED and (e.get("engine_s") or {}).get("decode") is not None]
        rows.append([route, _band_label(band), len(group),
                     _median([p * 1e3 for p in pred], ".0f"), _median([a * 1e3 for a in actual], ".0f"),
                     _median([a / p for a, p in zip(actual, pred)], ".2f"), _median(engine, ".2f")])
    return rows


def choice_rows(entries: Iterable[Mapping[str, Any]], rules: Rules) -> list[list[Any]]:
    """Per (prompt bucket, rule, route taken) of the requests both routes were predicted to miss:
    n, how many met their TTFT SLO, median actual TTFT, each route's median predicted TTFT (ms)
    and the route taken's median actual / predicted."""
    groups: dict[tuple[int, int, str], list[Mapping[str, Any]]] = {}
    names = [name for name, _ in BUCKETS]
    for e in entries:
        rule = rules.rule(e)
        if rule is not None and e["ttft_s"] > 0:
            groups.setdefault((names.index(bucket(e["num_prompt_tokens"])), MISS_RULES.index(rule), e["route"]),
                              []).append(e)
    rows = []
    for (b, rule, route), group in sorted(groups.items()):
        met = sum(e["ttft_s"] <= rules.slo.ttft_slo_s(e["num_prompt_tokens"]) for e in group)
        rows.append([names[b], MISS_RULES[rule], route, len(group), f"{met} ({met / len(group):.0%})",
                     _median([e["ttft_s"] * 1e3 for e in group], ".0f"),
                     *(_median([e["predicted"][f"{r}.ttft_s"] * 1e3 for e in group], ".0f") for r in ROUTES),
                     _median([e["ttft_s"] / e["predicted"][f"{route}.ttft_s"] for e in group], ".2f")])
    return rows


def system_entries(root: Path, system: str) -> tuple[list[dict[str, Any]], Rules]:
    """Every logged request of `system` under `root` (a sweep's summary.json, or one round's
    folder), every rate and round, and its deployment's rules (from the first round's summary)."""
    summary_path = root / "summary.json"
    summary = json.loads(summary_path.read_text()) if summary_path.is_file() else {}
    round_dirs = [root / name for name in summary.get("round_dirs") or []] or [root]
    entries: list[dict[str, Any]] = []
    rules = None
    for round_dir in round_dirs:
        system_dir = round_dir / system
        if not (system_dir / "predictions.json").is_file():
            raise FileNotFoundError(f"{system_dir}/predictions.json: no router log for {system!r} there")
        if rules is None:
            deployments = json.loads((round_dir / "summary.json").read_text()).get("deployments") or {}
            if system not in deployments:
                raise ValueError(f"{round_dir}/summary.json records no deployment for {system!r}")
            rules = Rules.of_deployment(deployments[system])
        entries += [e for _, rate_entries in load_system(system_dir) for e in rate_entries]
    assert rules is not None
    return entries, rules


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("dir", help="a bench.compare rates output folder (or one of its round_<k>)")
    ap.add_argument("--system", default="hybrid adaptive", help="an adaptive system of the sweep")
    args = ap.parse_args(argv)
    try:
        entries, rules = system_entries(Path(args.dir), args.system)
    except (FileNotFoundError, ValueError) as e:
        print(f"bench.route_choices: {e}", file=sys.stderr)
        return 2
    print(f"{args.system}: {len(entries)} requests logged, every rate and round pooled\n")
    print("Predicted TTFT on the route taken against the actual (medians; engine: the colocated route's "
          "queue + prefill, measured over predicted)\n")
    print(format_table(["route", "predicted", "n", "predicted ms", "actual ms", "actual / predicted", "engine"],
                       calibration_rows(entries)))
    print(f"\nBoth routes predicted to miss (tolerance {rules.tolerance:g}, lost past {rules.lost_ratio:g}x "
          f"the TTFT SLO): the rule that chose, and how they fared\n")
    print(format_table(["prompt", "rule", "route", "n", "met TTFT SLO", "actual ms", "predicted colocated ms",
                        "predicted disaggregated ms", "actual / predicted"], choice_rows(entries, rules)))
    return 0


if __name__ == "__main__":
    sys.exit(main())

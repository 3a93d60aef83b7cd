"""`pd-serve cost`: FLOPs split and predicted TTFT of fresh prompts, per length.

    pd-serve cost --model llama-3-8b --hardware a100 --lengths 1K,10K,100K [--json out.json]

Per length: linear FLOPs, attention FLOPs, attention share, and the compute-bound TTFT at peak x
the hardware's prefill efficiency. `--attention causal` (default) counts what causal
FlashAttention computes; `--attention full` is the seed articles' convention (their tables).
A "K" suffix on a length means x1024.
"""
from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from schedulers.flops import prefill_flops
from schedulers.hardware import HARDWARE_SPECS, get_hardware
from schedulers.model_spec import load_model_spec
from schedulers.roofline import prefill_time_s


def parse_lengths(text: str) -> list[int]:
    """"512,1K,4k" -> [512, 1024, 4096]; ValueError on anything else."""
    lengths = []
    for item in text.split(","):
        item = item.strip()
        multiplier = 1024 if item[-1:].lower() == "k" else 1
        digits = item[:-1] if multiplier > 1 else item
        if not digits.isdigit() or int(digits) <= 0:
            raise ValueError(f"bad length {item!r}: expected a positive integer, optionally with a K suffix")
        lengths.append(int(digits) * multiplier)
    return lengths


def cost_rows(model: str, hardware: str, lengths: list[int], causal: bool = True) -> list[dict[str, Any]]:
    """One dict per length: tokens, linear/attention/total FLOPs, attention share, TTFT seconds."""
    spec, hw = load_model_spec(model), get_hardware(hardware)
    rows = []
    for num_tokens in lengths:
        count = prefill_flops(spec, num_tokens, causal=causal)
        rows.append({"num_tokens": num_tokens, "linear_flops": count.linear_flops,
                     "attention_flops": count.attention_flops, "total_flops": count.total_flops,
                     "attention_share": count.attention_share,
                     "predicted_ttft_s": prefill_time_s(spec, hw, num_tokens, causal=causal)})
    return rows


def format_table(rows: list[dict[str, Any]]) -> str:
    header = f"{'tokens':>8} {'linear TFLOPs':>14} {'attn TFLOPs':>12} {'attn share':>10} {'TTFT ms':>10}"
    lines = [header]
    for r in rows:
        lines.append(f"{r['num_tokens']:>8} {r['linear_flops'] / 1e12:>14.2f} "
                     f"{r['attention_flops'] / 1e12:>12.2f} {100 * r['attention_share']:>9.1f}% "
                     f"{1e3 * r['predicted_ttft_s']:>10.1f}")
    return "\n".join(lines)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="pd-serve cost", description=__doc__.splitlines()[0])
    parser.add_argument("--model", required=True, help="built-in name (llama-2-7b, llama-3-8b, "
                        "llama-3-70b) or a directory with config.json")
    parser.add_argument("--hardware", required=True, choices=sorted(HARDWARE_SPECS))
    parser.add_argument("--lengths", required=True, help="comma-separated prompt lengths, e.g. 512,1K,32K")
    parser.add_argument("--attention", choices=("causal", "full"), default="causal",
                        help="causal: FlashAttention's lower triangle (default); full: the seed's n^2")
    parser.add_argument("--json", dest="json_path", help="also write the rows as JSON to this path")
    return parser


def main(argv: list[str] | None = None) -> int:
    """Print the cost table; 0 on success, 2 on bad input."""
    args = _parser().parse_args(argv)
    try:
        rows = cost_rows(args.model, args.hardware, parse_lengths(args.lengths), args.attention == "causal")
    except ValueError as error:
        print(f"pd-serve cost: {error}", file=sys.stderr)
        return 2
    print(f"model {args.model}, hardware {args.hardware}, attention {args.attention}")
    print(format_table(rows))
    if args.json_path:
        payload = {"model": args.model, "hardware": args.hardware, "attention": args.attention, "rows": rows}
        with open(args.json_path, "w") as f:
            json.dump(payload, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())

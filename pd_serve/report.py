"""Plain-text tables for results: what the CLI, the demo and the benchmarks print."""
from __future__ import annotations

from statistics import mean
from typing import Any, Iterable, Sequence


def format_table(headers: Sequence[str], rows: Iterable[Sequence[Any]]) -> str:
    rows = [[_fmt(v) for v in r] for r in rows]
    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(headers)]
    line = "| " + " | ".join(h.ljust(w) for h, w in zip(headers, widths)) + " |"
    sep = "|" + "|".join("-" * (w + 2) for w in widths) + "|"
    body = ["| " + " | ".join(c.rjust(w) for c, w in zip(r, widths)) + " |" for r in rows]
    return "\n".join([line, sep, *body])


def _fmt(v: Any) -> str:
    if v is None:
        return "-"
    if isinstance(v, float):
        return f"{v:.3f}"
    return str(v)


RESULT_HEADERS = ("request", "asked", "route", "prompt tok", "out tok", "TTFT ms", "mean ITL ms",
                  "KV MiB", "KV ms", "prefill", "decode", "fallback")


def result_row(label: str, asked: str, r: Any) -> list[Any]:
    itl_ms = mean(r.itl_s) * 1e3 if r.itl_s else None
    kv_ms = r.kv_transfer_s * 1e3 if r.kv_transfer_s is not None else None
    return [label, asked, r.route, r.num_prompt_tokens, len(r.token_ids), r.ttft_s * 1e3, itl_ms,
            r.kv_transfer_bytes / 2**20, kv_ms, r.prefill_worker, r.decode_worker, r.fallback]

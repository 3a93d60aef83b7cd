"""What a Ray stream costs in CPU per item and per token, by how many tokens an item carries.

    python -m bench.ray_stream_cost [--tokens 2000] [--period-ms 5] [--json PATH]

One actor streams small token dicts (as a worker's outputs) to another actor that reads them
(as the router), with a stream per request or one stream for all. This prints each side's CPU
per token, from the processes' own CPU times. It is why a worker sends every request's outputs
on one stream (pd_serve/output_streams.py): Ray's cost is per item, so a batch of one engine
step's outputs pays it once for all the requests in the step.
"""
from __future__ import annotations

import argparse
import asyncio
import os
import sys
import time
from pathlib import Path
from typing import Any

from bench.metrics import write_json
from pd_serve.report import format_table

# (requests streaming at once, tokens per item): a stream per request with one token per item,
# against one stream whose items hold a token of each request.
SHAPES = ((1, 1), (4, 1), (1, 4), (8, 1), (1, 8))


def _actors() -> tuple[Any, Any]:
    import ray

    @ray.remote(num_cpus=0)
    class Producer:
        """Every stream waits for the same ticks (an engine step), as a worker's requests wait
        for their engine's outputs: the shapes differ only in what Ray carries."""

        def __init__(self) -> None:
            self.tick = asyncio.Condition()
            self.ticking = False

        async def ticks(self, period_s: float) -> None:
            """Until `stop`: a stream busy sending at a tick waits for the next one."""
            self.ticking = True
            while self.ticking:
                await asyncio.sleep(period_s)
                async with self.tick:
                    self.tick.notify_all()

        def stop(self) -> None:
            self.ticking = False

        async def tokens(self, num_items: int, per_item: int):
            for i in range(num_items):
                async with self.tick:
                    await self.tick.wait()
                yield [{"token_ids": [i], "t": time.time(), "finished": False}] * per_item

        def pid(self) -> int:
            return os.getpid()

    @ray.remote(num_cpus=0)
    class Consumer:
        async def read(self, producer: Any, num_streams: int, num_items: int, per_item: int,
                       period_s: float) -> int:
            async def one() -> int:
                n = 0
                async for ref in producer.tokens.options(num_returns="streaming").remote(num_items, per_item):
                    n += len(await ref)
                return n
            streams = [asyncio.ensure_future(one()) for _ in range(num_streams)]
            await asyncio.sleep(0.5)  # every stream waiting for the first tick
            ticker = producer.ticks.remote(period_s)
            n = sum(await asyncio.gather(*streams))
            await producer.stop.remote()
            await ticker
            return n

        def pid(self) -> int:
            return os.getpid()

    return Producer.remote(), Consumer.remote()


def measure(num_tokens: int, period_s: float) -> list[dict]:
    """Each SHAPE's CPU per token on both sides, for `num_tokens` tokens a stream-of-one's worth."""
    import psutil
    import ray

    producer, consumer = _actors()
    procs = {name: psutil.Process(ray.get(a.pid.remote())) for name, a in
             (("sender", producer), ("reader", consumer))}

    def cpu() -> dict[str, float]:
        return {n: p.cpu_times().user + p.cpu_times().system for n, p in procs.items()}

    ray.get(consumer.read.remote(producer, 1, 50, 1, 0.001))  # warm both up
    rows = []
    for num_streams, per_item in SHAPES:
        num_items = max(1, num_tokens // max(per_item, num_streams))
        before, t0 = cpu(), time.time()
        tokens = ray.get(consumer.read.remote(producer, num_streams, num_items, per_item, period_s))
        wall, after = time.time() - t0, cpu()
        rows.append({"streams": num_streams, "tokens_per_item": per_item, "tokens": tokens, "wall_s": wall,
                     **{f"{n}_ms_per_token": (after[n] - before[n]) / tokens * 1e3 for n in procs}})
        print(f"  {num_streams} stream(s), {per_item} token(s) per item: {tokens} tokens in {wall:.1f} s",
              file=sys.stderr, flush=True)
    return rows


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.ray_stream_cost", description=__doc__.splitlines()[0])
    ap.add_argument("--tokens", type=int, default=2000, help="tokens per stream-of-one run (default 2000)")
    ap.add_argument("--period-ms", type=float, default=5.0, help="between two items of a stream (default 5)")
    ap.add_argument("--json", default=None, help="also write the figures here")
    args = ap.parse_args(argv)
    if args.tokens < 1 or args.period_ms < 0:
        ap.error("--tokens must be >= 1 and --period-ms >= 0")
    import ray

    ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False)  # a fresh instance of its own
    try:
        rows = measure(args.tokens, args.period_ms / 1e3)
    finally:
        ray.shutdown()
    print(format_table(["streams", "tokens per item", "tokens", "sender CPU ms/token", "reader CPU ms/token"],
                       [[r["streams"], r["tokens_per_item"], r["tokens"], f"{r['sender_ms_per_token']:.3f}",
                         f"{r['reader_ms_per_token']:.3f}"] for r in rows]))
    if args.json:
        write_json(Path(args.json), {"period_ms": args.period_ms, "rows": rows})
    return 0


if __name__ == "__main__":
    sys.exit(main())

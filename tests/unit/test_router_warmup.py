"""The warm-up transfers' sizes: a small one and a long prompt's, each fitting the engines."""
from __future__ import annotations

from pd_serve.router import WARMUP_TRANSFER_BLOCKS, warmup_blocks
from transfer.link_model import LinkFit, engine_excess


def test_warmups_repeat_two_sizes_so_that_engine_excess_fits_a_line():
    blocks = warmup_blocks(8192, 32)
    assert blocks == list(WARMUP_TRANSFER_BLOCKS)
    repeated = {n for n in blocks[1:] if blocks[1:].count(n) >= 2}  # the first pays the handshake
    assert len(repeated) >= 2 and max(repeated) * 32 >= 4000  # spans a 4,000-token prompt
    # What engine_excess makes of transfers of those sizes whose excess grows with size.
    fit = LinkFit(alpha_s=50e-6, beta_bytes_per_s=2e9)
    real = [(n * 131072, fit.predict(n * 131072) + 1e-3 + n * 5e-5) for n in blocks[1:]]
    excess = engine_excess(fit, real)
    assert excess.s_per_byte > 0 and excess.predict(125 * 131072) > excess.predict(16 * 131072)


def test_warmups_fit_a_short_max_model_len():
    for max_len, block in [(2048, 32), (512, 16), (40, 32), (16, 16)]:
        blocks = warmup_blocks(max_len, block)
        assert len(blocks) == len(WARMUP_TRANSFER_BLOCKS) and min(blocks) >= 1
        assert all(n * block + 2 <= max_len for n in blocks) or max_len < block + 2, (max_len, blocks)
    assert max(warmup_blocks(2048, 32)) == 63


def test_a_warm_up_transfer_is_never_taken_back_from_its_prefill_worker():
    """The handshake warm-up goes through the same prefill path as a request, but on a forced
    route: the adaptive policy's take-back (a prefill worker silent past its longest wait) would
    otherwise fire on the handshake itself, which no prediction prices, and fail the deploy."""
    import asyncio
    import collections
    from types import SimpleNamespace

    from pd_serve.request import GenerateResult
    from pd_serve.router import Router
    from schedulers.prefill_queues import PrefillQueues

    given_up = []

    async def stream(wid, rid, submit, give_up=None):
        given_up.append(give_up)
        yield {"kv_transfer_params": {"remote_block_ids": [1]}}

    async def decode(rid, ids, req, d, kv, res: GenerateResult, engine_s=None):
        res.kv_transfer_bytes, res.kv_transfer_s = 4096, 0.01
        yield {}

    router = SimpleNamespace(
        vocab_size=1000, inflight=collections.Counter(), prefill_queues=PrefillQueues(),
        auto_policy=SimpleNamespace(name="adaptive"), worker_streams=SimpleNamespace(stream=stream),
        workers={}, counters=collections.Counter(), last_output_s={}, _note_start=lambda *a: None,
        _slos_s=lambda *a: (0.0, 0.1), _prefill_stalled=lambda *a: "stalled", _decode=decode)
    router._remote_prefill = lambda *a: Router._remote_prefill(router, *a)
    assert asyncio.run(Router._warm_transfer(router, "prefill-0", "both-0", 33, 0)) == (4096, 0.01)
    assert given_up == [None] and router.counters["prefills_taken_back"] == 0

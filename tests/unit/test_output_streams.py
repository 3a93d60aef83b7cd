"""One stream per worker carries every request's outputs (pd_serve/output_streams.py)."""
from __future__ import annotations

import asyncio
import contextvars

import pytest

from pd_serve.output_streams import GaveUp, Outbox, OutputStreams, Running, WorkerRequestError


class FakeWorker:
    """A worker's submit, abort and outputs, with an Outbox, run in the test's loop."""

    def __init__(self) -> None:
        self.outbox = Outbox()
        self.aborted: list[str] = []
        self.submitted: list[str] = []
        self.fail_stream: BaseException | None = None

    async def submit(self, rid: str) -> None:
        self.submitted.append(rid)

    async def outputs(self):
        async for batch in self.outbox.batches():
            if self.fail_stream is not None:
                raise self.fail_stream
            yield batch


def streams_for(workers: dict[str, FakeWorker]) -> OutputStreams:
    return OutputStreams(lambda wid: workers[wid].outputs(),
                         lambda wid, rid: workers[wid].aborted.append(rid))


async def collect(streams: OutputStreams, wid: str, rid: str, worker: FakeWorker) -> list[dict]:
    return [item async for item in streams.stream(wid, rid, lambda: worker.submit(rid))]


async def one_waiting(rid: str = "a") -> tuple[FakeWorker, OutputStreams, asyncio.Future]:
    """A worker "w0" and a request on it, submitted and waiting for its first item."""
    w = FakeWorker()
    streams = streams_for({"w0": w})
    task = asyncio.ensure_future(collect(streams, "w0", rid, w))
    await asyncio.sleep(0.01)
    return w, streams, task


def test_one_step_of_many_requests_goes_out_as_one_batch():
    async def main():
        box = Outbox()
        batches = box.batches()
        for rid in ("a", "b", "c"):
            box.put(rid, {"token_ids": [1]})
        first = await batches.__anext__()
        box.put("a", {"token_ids": [2]})
        second = await batches.__anext__()
        return first, second

    first, second = asyncio.run(main())
    assert [rid for rid, _ in first] == ["a", "b", "c"]
    assert second == [("a", {"token_ids": [2]})]


def test_a_new_reader_takes_the_stream_over():
    async def main():
        box = Outbox()
        old, new = box.batches(), box.batches()
        old_next = asyncio.ensure_future(old.__anext__())
        await asyncio.sleep(0)
        new_next = asyncio.ensure_future(new.__anext__())  # the newer reader
        await asyncio.sleep(0)
        box.put("a", {"n": 1})
        got = await new_next
        with pytest.raises(StopAsyncIteration):
            await old_next
        return got

    assert asyncio.run(main()) == [("a", {"n": 1})]


def test_each_request_gets_its_own_outputs_in_order_up_to_its_last():
    async def main():
        w = FakeWorker()
        streams = streams_for({"w0": w})
        tasks = [asyncio.ensure_future(collect(streams, "w0", rid, w)) for rid in ("a", "b")]
        await asyncio.sleep(0.01)
        for n in range(3):
            w.outbox.put("a", {"n": n, "finished": n == 2})
            w.outbox.put("b", {"n": 10 + n, "finished": n == 2})
            w.outbox.put("gone", {"n": -1})  # a request nobody waits for any more: dropped
            await asyncio.sleep(0.01)
        a, b = await asyncio.gather(*tasks)
        return a, b, w, streams

    a, b, w, streams = asyncio.run(main())
    assert [i["n"] for i in a] == [0, 1, 2] and [i["n"] for i in b] == [10, 11, 12]
    assert w.submitted == ["a", "b"] and w.aborted == []  # both finished: nothing to abort
    assert streams.num_streaming() == 0


def test_a_request_left_before_its_end_is_aborted_on_its_worker():
    async def main():
        w = FakeWorker()
        streams = streams_for({"w0": w})
        gen = streams.stream("w0", "a", lambda: w.submit("a"))
        nxt = asyncio.ensure_future(gen.__anext__())
        await asyncio.sleep(0.01)
        w.outbox.put("a", {"n": 0, "finished": False})
        assert (await nxt)["n"] == 0
        await gen.aclose()  # the client left
        return w, streams

    w, streams = asyncio.run(main())
    assert w.aborted == ["a"] and streams.num_streaming("w0") == 0


def test_a_request_cancelled_while_it_is_submitted_is_aborted_too():
    async def main():
        w = FakeWorker()
        streams = streams_for({"w0": w})
        reached = asyncio.Event()

        async def slow_submit():  # the call reached the worker; its reply has not come back
            w.submitted.append("a")
            reached.set()
            await asyncio.sleep(10)

        task = asyncio.ensure_future(collect_with(streams, "a", slow_submit))
        await reached.wait()
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        return w

    assert asyncio.run(main()).aborted == ["a"]


async def collect_with(streams: OutputStreams, rid: str, submit) -> list[dict]:
    return [item async for item in streams.stream("w0", rid, submit)]


# Ray keeps the actor call an asyncio task serves in a context variable, and a recursive
# ray.cancel cancels the remote calls made in that call's context (output_streams.py).
CALL = contextvars.ContextVar("call", default=None)


def test_the_pump_and_the_abort_run_in_no_requests_context():
    async def main():
        w = FakeWorker()
        seen: dict[str, object] = {}

        async def outputs():
            seen["pump"] = CALL.get()
            async for batch in w.outbox.batches():
                yield batch

        def abort(wid, rid):
            seen["abort"] = CALL.get()
            w.aborted.append(rid)

        streams = OutputStreams(lambda wid: outputs(), abort)

        async def one_call():  # a request served by a Ray call: its context says which
            CALL.set("generate#1")
            gen = streams.stream("w0", "a", lambda: w.submit("a"))
            nxt = asyncio.ensure_future(gen.__anext__())
            await asyncio.sleep(0.01)
            w.outbox.put("a", {"n": 0, "finished": False})
            await nxt
            await gen.aclose()

        await asyncio.ensure_future(one_call())
        running = Running(lambda rid, err: {"error": err})

        async def items():
            seen["submitted"] = CALL.get()
            yield {"n": 0}

        CALL.set("submit#2")
        running.start("b", items(), Outbox())
        await asyncio.sleep(0.01)
        await streams.aclose()
        return seen, w

    seen, w = asyncio.run(main())
    assert w.aborted == ["a"]
    assert seen == {"pump": None, "abort": None, "submitted": None}


def test_a_request_given_up_on_is_aborted_and_its_items_before_are_kept():
    async def main():
        w = FakeWorker()
        streams = streams_for({"w0": w})
        asked = []

        def give_up():  # a reason on its third time of asking
            asked.append(1)
            return "worker w0 stalled" if len(asked) >= 3 else None

        async def read():
            got = []
            try:
                async for item in streams.stream("w0", "a", lambda: w.submit("a"), give_up=give_up, check_s=0.01):
                    got.append(item)
            except GaveUp as why:
                return got, str(why)

        task = asyncio.ensure_future(read())
        await asyncio.sleep(0.005)
        w.outbox.put("a", {"n": 0})
        return await task, w, streams, len(asked)

    (got, why), w, streams, asked = asyncio.run(main())
    assert got == [{"n": 0}] and "stalled" in why  # the item before it was kept
    assert w.aborted == ["a"] and streams.num_streaming("w0") == 0  # nothing left behind
    assert asked == 3


def test_an_item_that_comes_while_give_up_is_asked_is_not_lost():
    async def main():
        w = FakeWorker()
        streams = streams_for({"w0": w})
        task = asyncio.ensure_future(collect_given(streams, w))
        for n in range(5):  # items between the checks, and one the last check waits on
            await asyncio.sleep(0.013)
            w.outbox.put("a", {"n": n, "finished": n == 4})
        return await task

    async def collect_given(streams, w):
        return [item async for item in streams.stream("w0", "a", lambda: w.submit("a"),
                                                      give_up=lambda: None, check_s=0.005)]

    assert [item["n"] for item in asyncio.run(main())] == [0, 1, 2, 3, 4]


def test_a_failed_stream_raises_in_each_of_its_workers_requests_only():
    async def main():
        bad, good = FakeWorker(), FakeWorker()
        streams = streams_for({"bad": bad, "good": good})
        on_bad = [asyncio.ensure_future(collect(streams, "bad", rid, bad)) for rid in ("a", "b")]
        on_good = asyncio.ensure_future(collect(streams, "good", "c", good))
        await asyncio.sleep(0.01)
        bad.fail_stream = RuntimeError("actor died")
        bad.outbox.put("a", {"n": 0})
        good.outbox.put("c", {"n": 0, "finished": True})
        results = await asyncio.gather(*on_bad, return_exceptions=True)
        return results, await on_good, bad

    results, good_items, bad = asyncio.run(main())
    assert all(isinstance(r, RuntimeError) and "actor died" in str(r) for r in results)
    assert bad.aborted == []  # its stream failed: nothing to abort there
    assert good_items == [{"n": 0, "finished": True}]


def test_a_request_that_failed_on_its_worker_raises_its_error():
    async def main():
        w, _, task = await one_waiting()
        w.outbox.put("a", {"error": "ValueError: too long"})
        return await asyncio.gather(task, return_exceptions=True), w

    (err,), w = asyncio.run(main())
    assert isinstance(err, WorkerRequestError) and "too long" in str(err) and "w0" in str(err)
    assert w.aborted == []


def test_the_same_request_twice_on_one_worker_is_refused():
    async def main():
        w, streams, first = await one_waiting()
        with pytest.raises(ValueError, match="already running"):
            await collect(streams, "w0", "a", w)
        w.outbox.put("a", {"finished": True})
        await first

    asyncio.run(main())


def test_a_caller_stream_ends_each_request_at_its_result_and_raises_its_exception():
    # The router's stream to a caller: a request ends at its result; a failed one sends its
    # exception, which its reader raises as itself.
    async def main():
        w = FakeWorker()
        streams = OutputStreams(lambda wid: w.outputs(), lambda wid, rid: w.aborted.append(rid),
                                is_last=lambda item: item.get("type") == "result")
        ok = asyncio.ensure_future(collect(streams, "router", "a", w))
        bad = asyncio.ensure_future(collect(streams, "router", "b", w))
        await asyncio.sleep(0.01)
        w.outbox.put("a", {"type": "token", "finished": True})  # not the end on this stream
        w.outbox.put("b", {"error": KeyError("no such worker")})
        await asyncio.sleep(0.01)
        assert not ok.done()
        w.outbox.put("a", {"type": "result"})
        return await ok, (await asyncio.gather(bad, return_exceptions=True))[0], w

    items, err, w = asyncio.run(main())
    assert [i["type"] for i in items] == ["token", "result"]
    assert isinstance(err, KeyError) and w.aborted == []


def test_the_outbox_says_whether_a_reader_takes_its_batches():
    async def main():
        box = Outbox()
        assert not box.is_read
        batches = box.batches()
        box.put("a", {})
        await batches.__anext__()
        assert box.is_read
        await batches.aclose()
        return box.is_read

    assert asyncio.run(main()) is False


def test_closing_stops_every_reader_and_fails_its_waiting_requests():
    async def main():
        _, streams, waiting = await one_waiting()
        await streams.aclose()
        return (await asyncio.gather(waiting, return_exceptions=True))[0], streams

    err, streams = asyncio.run(main())
    assert isinstance(err, ConnectionError) and "cancelled" in str(err)
    assert streams.num_streaming() == 0


def test_running_requests_put_their_items_and_a_failure_last_and_cancel_puts_nothing():
    async def items(n: int, fail: bool = False):
        for k in range(n):
            yield {"n": k}
            await asyncio.sleep(0.01)
        if fail:
            raise ValueError("engine said no")

    async def main():
        box = Outbox()
        running = Running(lambda rid, err: {"error": f"{rid}: {err}"})
        running.start("ok", items(2), box, owner="c1")
        running.start("bad", items(1, fail=True), box, owner="c1")
        running.start("long", items(100), box, owner="c2")
        running.start("left", items(100), box, owner="c1")
        assert len(running) == 4 and "ok" in running
        await asyncio.sleep(0.05)
        assert running.cancel("long") and not running.cancel("ok")  # "ok" has finished
        running.cancel_owned_by("c1")
        await asyncio.sleep(0.01)
        return box._items, len(running)

    put, left = asyncio.run(main())
    by_request: dict[str, list] = {}
    for rid, item in put:
        by_request.setdefault(rid, []).append(item)
    assert by_request["ok"] == [{"n": 0}, {"n": 1}]
    assert by_request["bad"] == [{"n": 0}, {"error": "bad: engine said no"}]
    assert all("error" not in i for i in by_request["long"] + by_request["left"])  # cancelled: no failure
    assert left == 0

"""An actor's log lines are written by a thread of their own: a write that blocks on the disk
must not block the caller (the router's event loop)."""
from __future__ import annotations

import io
import logging
import os
import sys
import threading

import pytest

from pd_serve.logs import BackgroundStream, write_in_background


class GatedStream(io.StringIO):
    """A stream whose writes wait until `gate` is set, as a write to a file waiting on the disk."""

    def __init__(self) -> None:
        super().__init__()
        self.gate = threading.Event()

    def write(self, data: str) -> int:
        self.gate.wait()
        return super().write(data)


def test_writes_return_while_the_target_blocks_and_arrive_in_order():
    target = GatedStream()
    release = threading.Timer(10.0, target.gate.set)  # if write() blocked, it would return after this
    release.start()
    stream = BackgroundStream(target)
    for k in range(100):
        stream.write(f"line {k}\n")
    stream.flush()
    returned_before_release = not target.gate.is_set()
    target.gate.set()
    release.cancel()
    stream.close()
    assert returned_before_release
    assert target.getvalue() == "".join(f"line {k}\n" for k in range(100))


def test_close_writes_out_what_is_queued_and_later_closes_do_nothing():
    target = io.StringIO()
    stream = BackgroundStream(target)
    stream.writelines(["a\n", "b\n"])
    stream.close()
    stream.close()
    assert target.getvalue() == "a\nb\n"
    assert stream.getvalue() == "a\nb\n"  # anything else is the target's


@pytest.fixture
def fake_std(monkeypatch):
    """Fake process streams, a handler on stderr; set in the test's body through `install`
    (pytest sets its own sys.stdout / sys.stderr between a fixture's set-up and the test)."""
    out, err = io.StringIO(), io.StringIO()
    handler = logging.StreamHandler(err)
    logger = logging.getLogger("pd_serve.test_logs_background")
    logger.addHandler(handler)
    logger.propagate = False

    def install():
        monkeypatch.setattr(sys, "stdout", out)
        monkeypatch.setattr(sys, "stderr", err)
    yield out, err, handler, logger, install
    logger.removeHandler(handler)
    for s in (sys.stdout, sys.stderr):
        if isinstance(s, BackgroundStream):
            s.close()


def test_the_process_streams_and_the_handlers_on_them_go_through_the_thread(fake_std):
    out, err, handler, logger, install = fake_std
    install()
    write_in_background()
    write_in_background()  # idempotent: one thread per stream
    assert isinstance(sys.stderr, BackgroundStream) and sys.stderr.target is err
    assert isinstance(sys.stdout, BackgroundStream) and sys.stdout.target is out
    assert handler.stream is sys.stderr
    logger.warning("decided")
    print("printed")
    sys.stderr.close()
    sys.stdout.close()
    assert err.getvalue() == "decided\n" and out.getvalue() == "printed\n"


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_a_forked_child_writes_directly(fake_std):
    out, err, handler, logger, install = fake_std
    install()
    write_in_background()
    pid = os.fork()
    if pid == 0:  # the writer threads did not come along
        ok = sys.stderr is err and sys.stdout is out and handler.stream is err
        os._exit(0 if ok else 1)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    assert isinstance(sys.stderr, BackgroundStream)  # the parent keeps its thread

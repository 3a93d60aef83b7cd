"""Logging inside pd-serve's Ray actors, written by a thread of its own.

Ray's worker processes leave the root logger at WARNING with no handler of their own, so the
router's per-request decision lines (INFO) would vanish. Each actor calls `log_to_stderr()`:
pd-serve's loggers then write to the actor's stderr, which Ray keeps in the session's
`logs/worker-*.err` and, with `log_to_driver` (PD_SERVE_RAY_LOGS=1), shows on the driver.

Ray's stderr in an actor writes to that file and flushes on every write, and on this project's
VM (ext4) such a write sometimes blocked for about a second: run 40 (2026-12-02) caught the
router's event loop asleep 1.19 s inside a warning's write (its stack sampled 50 times there,
`pd_serve/loop_stalls.py`), and worker actors asleep 0.98 and 1.28 s the same way. A stalled
router holds every request: 16 prompts arriving in the next 1.2 s waited 0.5-2.2 s for a first
token. So every write to the actor's stdout and stderr (pd-serve's loggers, vLLM's front-end,
`print`) goes to a queue, and a daemon thread writes the queue out in order (`BackgroundStream`);
the event loop never waits for the disk. Lines still queued when the process exits are written
at exit (atexit); a process killed hard loses them.
"""
from __future__ import annotations

import atexit
import logging
import os
import queue
import sys
import threading
from typing import Any, TextIO

LEVEL_ENV = "PD_SERVE_LOG_LEVEL"
PACKAGES = ("pd_serve", "transfer")  # schedulers/ is pure and logs nothing


class BackgroundStream:
    """A text stream whose writes are queued and written to `target` by a daemon thread."""

    def __init__(self, target: TextIO) -> None:
        self.target = target
        self._queue: queue.SimpleQueue[str | None] = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._drain, name="pd-serve-log-writer", daemon=True)
        self._thread.start()
        atexit.register(self.close)

    def write(self, data: str) -> int:
        if data:
            self._queue.put(data)
        return len(data)

    def writelines(self, lines: Any) -> None:
        for line in lines:
            self.write(line)

    def flush(self) -> None:
        """Nothing to wait for here: the writer thread flushes after each burst of lines."""

    def close(self, timeout_s: float = 5.0) -> None:
        """Write out what is queued (up to `timeout_s`) and stop the thread; idempotent."""
        if self._thread.is_alive():
            self._queue.put(None)
            self._thread.join(timeout_s)

    def isatty(self) -> bool:
        return False

    def __getattr__(self, name: str) -> Any:  # encoding, fileno, ...: the target's
        return getattr(self.target, name)

    def _drain(self) -> None:
        while True:
            data = self._queue.get()
            if data is None:
                break
            chunks = [data]
            try:  # whatever queued meanwhile goes in one write and one flush
                while (more := self._queue.get_nowait()) is not None:
                    chunks.append(more)
            except queue.Empty:
                more = ""
            try:
                self.target.write("".join(chunks))
                self.target.flush()
            except (OSError, ValueError):  # the file is gone (shutdown): nothing to tell it to
                pass
            if more is None:
                break


def _swap_streams(swaps: dict[int, TextIO]) -> None:
    """Point every logging handler writing to a stream in `swaps` (by id) at its replacement."""
    loggers = [logging.getLogger()] + [lg for lg in logging.Logger.manager.loggerDict.values()
                                       if isinstance(lg, logging.Logger)]
    for lg in loggers:
        for h in lg.handlers:
            if isinstance(h, logging.StreamHandler) and id(h.stream) in swaps:
                h.setStream(swaps[id(h.stream)])


def _direct_in_child() -> None:
    """After a fork: the writer threads did not come along, so the child writes directly."""
    swaps = {}
    for name in ("stdout", "stderr"):
        current = getattr(sys, name)
        if isinstance(current, BackgroundStream):
            setattr(sys, name, current.target)
            swaps[id(current)] = current.target
    _swap_streams(swaps)


def write_in_background() -> None:
    """Route this process's stdout and stderr, and every logging handler already writing to
    them, through a `BackgroundStream` each; a child forked later writes directly again.
    Idempotent."""
    swaps = {}
    for name in ("stdout", "stderr"):
        current = getattr(sys, name)
        if isinstance(current, BackgroundStream):
            continue
        stream = BackgroundStream(current)
        setattr(sys, name, stream)
        swaps[id(current)] = stream
    if swaps:
        _swap_streams(swaps)
        os.register_at_fork(after_in_child=_direct_in_child)


def log_to_stderr() -> None:
    """pd-serve's loggers at $PD_SERVE_LOG_LEVEL (default INFO) to stderr, every write to
    stdout and stderr off the caller's thread (`write_in_background`); idempotent."""
    write_in_background()
    for name in PACKAGES:
        logger = logging.getLogger(name)
        logger.setLevel(os.environ.get(LEVEL_ENV, "INFO").upper())
        if not any(getattr(h, "_pd_serve", False) for h in logger.handlers):
            handler = logging.StreamHandler(sys.stderr)
            handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
            handler._pd_serve = True
            logger.addHandler(handler)
        logger.propagate = False  # no second copy through a root handler Ray may add

"""Shared memory that an engine leaves in /dev/shm when it is killed, found and removed.

vLLM's processes talk through POSIX shared memory (`multiprocessing.shared_memory`:
/dev/shm/psm_*, 160 and 240 MiB each here) and named semaphores (/dev/shm/sem.mp-*). The process
that made one unlinks it when it stops cleanly; a killed engine (its worker died, or a hard
stop) leaves them. Each run of the serving-core tests left three, and this machine held 120 by
the evening of 2026-12-01. A deployment therefore notes the segments its engines' processes have
mapped, and unlinks the ones still there once every such process is gone. Only these two name
patterns are touched: nothing of Ray's or another program's.
"""
from __future__ import annotations

import logging
import os
from typing import Iterable

logger = logging.getLogger(__name__)

SHM_DIR = "/dev/shm/"
PREFIXES = ("psm_", "sem.mp-")


def is_engine_segment(path: str) -> bool:
    """A file directly in /dev/shm named as vLLM's segments and semaphores are."""
    return (os.path.dirname(os.path.normpath(path)) == SHM_DIR.rstrip("/")
            and os.path.basename(path).startswith(PREFIXES))


def mapped_segments(pids: Iterable[int]) -> list[str]:
    """The /dev/shm segments of vLLM's kinds that `pids` have mapped (processes gone: skipped)."""
    found = set()
    for pid in pids:
        try:
            with open(f"/proc/{pid}/maps") as maps:
                lines = maps.read().splitlines()
        except OSError:  # gone, or not ours to read
            continue
        for line in lines:
            fields = line.split(maxsplit=5)
            path = fields[5].removesuffix(" (deleted)") if len(fields) == 6 else ""
            if path and is_engine_segment(path):
                found.add(path)
    return sorted(found)


def unlink_leftovers(paths: Iterable[str]) -> list[str]:
    """Unlink the segments in `paths` still present; call it only once the processes that
    mapped them are gone. Returns those removed."""
    removed = []
    for path in sorted(set(paths)):
        if not is_engine_segment(path):
            raise ValueError(f"not an engine's shared-memory segment: {path!r}")
        try:
            os.unlink(path)
            removed.append(path)
        except FileNotFoundError:  # its owner stopped cleanly and removed it
            pass
    if removed:
        logger.info("removed %d shared-memory segments left by killed engines: %s", len(removed),
                    ", ".join(os.path.basename(p) for p in removed))
    return removed

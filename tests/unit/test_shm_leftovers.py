"""A killed engine's shared memory is found in its processes' maps and removed; nothing else is."""
from __future__ import annotations

import os
from multiprocessing import shared_memory

import pytest

from pd_serve.shm_leftovers import mapped_segments, unlink_leftovers


def test_a_segment_a_process_maps_is_found_and_removed_once():
    seg = shared_memory.SharedMemory(create=True, size=4096)  # named psm_*, as vLLM's are
    try:
        path = f"/dev/shm/{seg.name}"
        assert path in mapped_segments([os.getpid()])
        assert mapped_segments([2 ** 22 + 12345]) == []  # no such process: nothing, no error
        assert unlink_leftovers([path, path]) == [path]
        assert not os.path.exists(path)
        assert unlink_leftovers([path]) == []  # already gone (its owner stopped cleanly)
    finally:
        seg.close()
        try:
            seg.unlink()
        except FileNotFoundError:
            pass


def test_anything_but_an_engines_segment_is_refused(tmp_path):
    other = tmp_path / "psm_not_in_dev_shm"
    other.write_text("x")
    for path in (str(other), "/dev/shm/plasma_store", "/dev/shm/../etc/psm_x"):
        with pytest.raises(ValueError, match="not an engine's shared-memory segment"):
            unlink_leftovers([path])
    assert other.exists()

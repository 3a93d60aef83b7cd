"""The memory a probe reads from and into: host DRAM (numpy) or GPU VRAM (torch CUDA tensor).

Same memory kind as the KV cache the link will carry; a host-memory probe says nothing about a
GPU link and the other way round. The buffer also fills a per-descriptor pattern and checks it,
so a READ that "finished" but moved nothing is caught.
"""
from __future__ import annotations

import logging
import time
from typing import Any

import numpy as np

from transfer.probe_layout import BlockLayout

logger = logging.getLogger(__name__)


def pattern_table(layout: BlockLayout, seed: int) -> np.ndarray:
    """One nonzero byte per (region, block): cheap to fill, distinct between neighbours."""
    regions = np.arange(layout.num_regions, dtype=np.int64)[:, None]
    blocks = np.arange(layout.num_blocks, dtype=np.int64)[None, :]
    return ((regions * 131 + blocks * 31 + seed) % 251 + 1).astype(np.uint8)


class ProbeBuffer:
    """A `BlockLayout`-shaped byte buffer on `device` ("cpu", "cuda" or "cuda:N")."""

    def __init__(self, layout: BlockLayout, device: str = "cpu") -> None:
        self.layout = layout
        self.device = device
        self.is_cuda = device.startswith("cuda")
        shape = (layout.num_regions, layout.num_blocks, layout.desc_bytes)
        if self.is_cuda:
            import torch  # only GPU probes pay for torch

            if not torch.cuda.is_available():
                raise RuntimeError(f"device {device!r} asked for, but torch sees no CUDA device")
            self._tensor = torch.zeros(shape, dtype=torch.uint8, device=device)
            self.mem_type = "VRAM"
            self.device_id = self._tensor.get_device()
            self.base_addr = int(self._tensor.data_ptr())
        else:
            self._array = np.zeros(shape, dtype=np.uint8)
            self.mem_type = "DRAM"
            self.device_id = 0
            self.base_addr = int(self._array.ctypes.data)

    @property
    def nbytes(self) -> int:
        return self.layout.total_bytes

    def fill_pattern(self, seed: int) -> None:
        table = pattern_table(self.layout, seed)
        if self.is_cuda:
            import torch

            # Broadcast on the device: the table is tiny, the buffer may be gigabytes.
            table_gpu = torch.from_numpy(table).to(self.device)
            self._tensor.copy_(table_gpu[:, :, None].expand_as(self._tensor))
            torch.cuda.synchronize(self.device)
        else:
            self._array[:] = table[:, :, None]

    def zero_blocks(self, block_ids: list[int]) -> None:
        if self.is_cuda:
            import torch

            self._tensor[:, torch.as_tensor(block_ids, device=self.device)] = 0
            torch.cuda.synchronize(self.device)
        else:
            self._array[:, block_ids] = 0

    def blocks_match(self, local_ids: list[int], remote_ids: list[int], remote_layout: BlockLayout,
                     remote_seed: int) -> bool:
        """Whether local blocks hold the remote pattern of the blocks they were read from."""
        expected = pattern_table(remote_layout, remote_seed)[:, remote_ids]  # [regions, n]
        if self.is_cuda:
            import torch

            got = self._tensor.index_select(1, torch.as_tensor(local_ids, device=self.device))
            want = torch.from_numpy(np.ascontiguousarray(expected)).to(self.device)
            return bool((got == want[:, :, None]).all().item())
        return bool(np.all(self._array[:, local_ids] == expected[:, :, None]))

    def time_copies(self, sizes_bytes: list[int], num_reps: int, max_seconds: float
                    ) -> list[tuple[int, float]]:
        """(bytes, seconds) of plain copies from this buffer into a scratch one of the same kind.

        The ceiling a transfer in this memory can reach. The scratch buffer lives for this call
        only; sizes above the buffer are skipped.
        """
        sizes = [s for s in sizes_bytes if s <= self.nbytes]
        if not sizes:
            return []
        scratch = self.make_scratch(max(sizes))
        deadline = time.perf_counter() + max_seconds
        samples: list[tuple[int, float]] = []
        for pass_index in range(num_reps + 1):  # pass 0 warms page tables and caches, dropped
            for num_bytes in sizes:
                if time.perf_counter() > deadline:
                    return samples
                seconds = self.time_copy(num_bytes, scratch)
                if pass_index > 0:
                    samples.append((num_bytes, seconds))
        return samples

    def make_scratch(self, num_bytes: int) -> Any:
        """A flat destination of the same memory kind for `time_copy`."""
        if self.is_cuda:
            import torch

            return torch.empty(num_bytes, dtype=torch.uint8, device=self.device)
        return np.empty(num_bytes, dtype=np.uint8)

    def time_copy(self, num_bytes: int, scratch: Any) -> float:
        """Seconds to copy the first `num_bytes` of this buffer into `scratch`."""
        src = (self._tensor.view(-1) if self.is_cuda else self._array.reshape(-1))[:num_bytes]
        dst = scratch[:num_bytes]
        if self.is_cuda:
            import torch

            torch.cuda.synchronize(self.device)
            start = time.perf_counter()
            dst.copy_(src)
            torch.cuda.synchronize(self.device)
            return time.perf_counter() - start
        start = time.perf_counter()
        np.copyto(dst, src)
        return time.perf_counter() - start

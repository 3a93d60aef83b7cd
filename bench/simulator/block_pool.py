"""A worker's KV block pool: counts only, since the simulator never needs block ids.

Question/action pairs as in nano-vllm's BlockManager: `can_admit` / `can_grow` say whether an
allocation fits, `allocate` and `free` do it. Admission of a new request must leave the
watermark free, so that running requests can still grow a block before anything is preempted.
"""
from __future__ import annotations


class BlockPool:
    def __init__(self, num_blocks: int, watermark_blocks: int = 0) -> None:
        if num_blocks < 1 or not 0 <= watermark_blocks < num_blocks:
            raise ValueError(f"need num_blocks >= 1 and 0 <= watermark_blocks < num_blocks, "
                             f"got {num_blocks}, {watermark_blocks}")
        self.num_blocks = num_blocks
        self.watermark_blocks = watermark_blocks
        self.num_free = num_blocks

    @property
    def num_used(self) -> int:
        return self.num_blocks - self.num_free

    @property
    def usage(self) -> float:
        """Used fraction 0..1, as vLLM's kv_cache_usage."""
        return self.num_used / self.num_blocks

    def can_admit(self, num_blocks: int) -> bool:
        """A waiting request may take `num_blocks` and still leave the watermark free."""
        return self.num_free - num_blocks >= self.watermark_blocks

    def can_grow(self, num_blocks: int) -> bool:
        """A running request may take `num_blocks` down to the last free block."""
        return num_blocks <= self.num_free

    def allocate(self, num_blocks: int) -> None:
        assert 0 <= num_blocks <= self.num_free, (num_blocks, self.num_free)
        self.num_free -= num_blocks

    def free(self, num_blocks: int) -> None:
        assert 0 <= num_blocks and self.num_free + num_blocks <= self.num_blocks, (num_blocks, self.num_free)
        self.num_free += num_blocks

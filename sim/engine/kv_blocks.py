"""The paged KV-cache block pool of one instance.

Capacity is counted in blocks of `block_size` tokens. Blocks are either private to a request
(`private`) or held by prefix-cache entries (`cache.blocks`, pinned or evictable). Allocation evicts
unpinned cache entries, LRU first, when the free blocks do not suffice.
"""

from __future__ import annotations

from infralab.sim.engine.prefix_cache import PrefixCache


class BlockPool:
    """Block accounting; every change asserts 0 <= used <= capacity."""

    def __init__(self, capacity_blocks: int, cache: PrefixCache) -> None:
        self.capacity = capacity_blocks
        self.cache = cache
        self.private = 0

    @property
    def free(self) -> int:
        return self.capacity - self.private - self.cache.blocks

    @property
    def used(self) -> int:
        """Blocks that cannot be reclaimed now: private plus pinned cache entries."""
        return self.private + self.cache.pinned_blocks

    def allocate(self, n: int) -> bool:
        """Take `n` private blocks, evicting unpinned cache entries (LRU first) if needed; False
        when even evicting all of them would not free enough, and then nothing changes (a failed
        attempt must not throw cached prefixes away)."""
        if n <= 0:
            return True
        short = n - self.free
        if short > 0:
            if short > self.cache.blocks - self.cache.pinned_blocks:
                return False
            self.cache.evict(short)
        self.private += n
        assert self.private + self.cache.blocks <= self.capacity
        return True

    def release(self, n: int) -> None:
        """Return `n` private blocks."""
        self.private -= n
        assert self.private >= 0, "released more KV blocks than were allocated"

    def move_to_cache(self, n: int) -> None:
        """`n` private blocks now belong to a prefix-cache entry (the caller inserted it)."""
        self.private -= n
        assert self.private >= 0

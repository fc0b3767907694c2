"""The paged KV-cache block pool of one instance.

Capacity is counted in blocks of `block_size` tokens. Blocks are either private to a request
(`private`) or held by prefix-cache entries (`cache.blocks`, pinned or evictable). Allocation evicts
unpinned cache entries, LRU first, when the free blocks do not suffice.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from infralab.sim.engine.prefix_cache import PrefixCache

if TYPE_CHECKING:
    from infralab.sim.engine.request_state import Seq


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
        cache = self.cache
        short = self.private + n + cache.blocks - self.capacity  # n - free
        if short > 0:
            if short > cache.blocks - cache.pinned_blocks:
                return False
            cache.evict(short)
        self.private += n
        assert self.private + cache.blocks <= self.capacity
        return True

    def release(self, n: int) -> None:
        """Return `n` private blocks."""
        self.private -= n
        assert self.private >= 0, "released more KV blocks than were allocated"

    def move_to_cache(self, n: int) -> None:
        """`n` private blocks now belong to a prefix-cache entry (the caller inserted it)."""
        self.private -= n
        assert self.private >= 0

    # ---- a request's blocks (every scheduler policy frees and caches them the same way) ---------

    def free_seq(self, seq: Seq) -> None:
        """Return all of `seq`'s private blocks and unpin the prefix-cache entries it uses."""
        self.release(seq.blocks)
        seq.blocks = 0
        self.cache.unpin(seq.pinned)
        seq.pinned = []

    def cache_full_prompt_blocks(self, seq: Seq) -> None:
        """Turn `seq`'s freshly computed whole prompt blocks into (pinned) prefix-cache entries, in
        order (stopping, for a hybrid model, at the first whose state snapshot finds no blocks);
        their blocks move from the request to the cache (a snapshot's are allocated) and
        `seq.base` advances past them. A block someone else cached meanwhile (or one a hybrid
        model's hit could not use, the hit ending at a snapshot) is deduplicated as vLLM's block
        pool does: the request frees its copy and pins the cached entry, and goes on caching the
        blocks after it."""
        cache = self.cache
        if not cache.enabled:
            return
        size = cache.block_tokens
        limit = min(seq.computed, seq.prompt)
        while seq.base + size <= limit:
            index = seq.base // size
            if index >= len(seq.hashes):
                return
            if seq.hashes[index] in cache:
                cache.pin([seq.hashes[index]])
                seq.pinned.append(seq.hashes[index])
                seq.blocks -= cache.entry_blocks
                self.release(cache.entry_blocks)
                seq.base += size
                continue
            # A hybrid model's entry at a snapshot boundary also keeps the recurrent state: its
            # blocks come from the pool (evicting as any allocation does); without them the block
            # stays private.
            snapshot = cache.snapshot_blocks_at(index)
            if not self.allocate(snapshot):
                return
            cache.insert_pinned(seq.hashes[index], snapshot)
            seq.pinned.append(seq.hashes[index])
            seq.blocks -= cache.entry_blocks
            self.move_to_cache(cache.entry_blocks + snapshot)
            seq.base += size


def state_snapshot_blocks(state_bytes: int, kv_bytes_per_token: int, block_size: int) -> int:
    """KV blocks that one recurrent-state snapshot of `state_bytes` bytes takes (rounded up), with
    blocks of `block_size` tokens of `kv_bytes_per_token` bytes (the instance's, all ranks): 0 for
    a model without linear-attention state, or without full-attention KV (whose pool never limits)."""
    if state_bytes <= 0 or kv_bytes_per_token <= 0:
        return 0
    return -(-state_bytes // (kv_bytes_per_token * block_size))

"""A prefix cache over prompt-block hashes (Mooncake `hash_ids`), with LRU eviction.

Each entry is one `block_tokens`-token prompt block (512 by default) identified by its hash, and
holds `entry_blocks` paged KV blocks of the instance's pool, plus, for hybrid (linear-attention)
models, `snapshot_blocks` more: a snapshot of the request's recurrent state at the entry's end, so
that a hit on it can resume the linear-attention layers there (the state's bytes charged in KV
blocks; see docs/sim.md, "Hybrid models"). Hashes chain (equal hash at index i
means an equal prefix up to block i), so a request's hit is the longest run of its leading hashes
present here. An entry is pinned while running requests use it (a reference count) and is
evictable, least recently released first, once no request does.
"""

from __future__ import annotations

from collections import OrderedDict


class PrefixCache:
    """Entries keyed by block hash; sizes in KV blocks. `enabled=False` makes every call a no-op
    (no hits, nothing stored), so the engine needs no special cases."""

    def __init__(self, block_tokens: int, entry_blocks: int, enabled: bool = True, snapshot_blocks: int = 0) -> None:
        self.block_tokens = block_tokens
        self.entry_blocks = entry_blocks  # KV blocks of the entry's tokens
        self.snapshot_blocks = snapshot_blocks  # blocks of its recurrent-state snapshot (hybrid models)
        self.held_blocks = entry_blocks + snapshot_blocks  # what one entry takes from the pool
        self.enabled = enabled
        self._refs: dict[int, int] = {}  # hash -> number of running requests using it
        self._lru: OrderedDict[int, None] = OrderedDict()  # unpinned hashes, oldest first

    @property
    def blocks(self) -> int:
        """KV blocks held by all entries, pinned or not."""
        return len(self._refs) * self.held_blocks

    @property
    def pinned_blocks(self) -> int:
        return (len(self._refs) - len(self._lru)) * self.held_blocks

    def __contains__(self, block_hash: int) -> bool:
        return block_hash in self._refs

    def match(self, hashes: tuple[int, ...], max_entries: int) -> int:
        """Number of leading `hashes` (at most `max_entries`) present; touches nothing."""
        if not self.enabled:
            return 0
        n = 0
        refs = self._refs
        for h in hashes[:max_entries]:
            if h not in refs:
                break
            n += 1
        return n

    def max_hit_entries(self, prompt: int, target: int) -> int:
        """Most entries a request with a `prompt`-token prompt and `target` tokens to compute may
        hit: whole prompt blocks only, and at least one token left to compute (for the logits)."""
        return min(prompt // self.block_tokens, (target - 1) // self.block_tokens)

    def pin(self, hashes: list[int]) -> None:
        """Mark entries as used by one more running request (they must be present)."""
        for h in hashes:
            if self._refs[h] == 0:
                del self._lru[h]
            self._refs[h] += 1

    def unpin(self, hashes: list[int]) -> None:
        """One request stopped using these entries. Released deepest block first, so that a
        prefix's tail is evicted before its head (a head is worth more: more prompts share it)."""
        for h in reversed(hashes):
            refs = self._refs[h] - 1
            assert refs >= 0, f"prefix-cache entry {h} unpinned more often than pinned"
            self._refs[h] = refs
            if refs == 0:
                self._lru[h] = None

    def insert_pinned(self, block_hash: int) -> None:
        """Add a freshly computed block, pinned by the request that computed it."""
        assert block_hash not in self._refs
        self._refs[block_hash] = 1

    def evict(self, blocks_wanted: int) -> int:
        """Drop least recently released unpinned entries until at least `blocks_wanted` KV blocks
        are freed or none is left; returns the blocks freed."""
        freed = 0
        while freed < blocks_wanted and self._lru:
            h, _ = self._lru.popitem(last=False)
            del self._refs[h]
            freed += self.held_blocks
        return freed

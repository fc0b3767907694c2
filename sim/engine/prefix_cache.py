"""A prefix cache over prompt-block hashes (Mooncake `hash_ids`), with LRU eviction.

Each entry is one `block_tokens`-token prompt block (512 by default) identified by its hash, and
holds `entry_blocks` paged KV blocks of the instance's pool. Hashes chain (equal hash at index i
means an equal prefix up to block i), so a request's hit is the longest run of its leading hashes
present here. An entry is pinned while running requests use it (a reference count) and is
evictable, least recently released first, once no request does.

Hybrid (linear-attention) models: a hit must resume the recurrent state where it ends, so the cache
keeps state snapshots (`snapshot_blocks` KV blocks each, the state's bytes charged to the pool) at
every `stride`-th entry, with stride = ceil(snapshot_blocks / entry_blocks): snapshots then take
about as much memory as the KV they follow, as vLLM arranges by sizing a hybrid model's KV page to
its state. A hit ends at the last snapshot it reaches (whole strides). See docs/sim.md.
"""

from __future__ import annotations

from collections import OrderedDict


class PrefixCache:
    """Entries keyed by block hash; sizes in KV blocks. `enabled=False` makes every call a no-op
    (no hits, nothing stored), so the engine needs no special cases."""

    def __init__(self, block_tokens: int, entry_blocks: int, enabled: bool = True, snapshot_blocks: int = 0) -> None:
        self.block_tokens = block_tokens
        self.entry_blocks = entry_blocks  # KV blocks of the entry's tokens
        self.snapshot_blocks = snapshot_blocks  # blocks of one recurrent-state snapshot (hybrid models)
        self.stride = -(-snapshot_blocks // entry_blocks) if snapshot_blocks else 1  # entries per snapshot
        self.enabled = enabled
        self._refs: dict[int, int] = {}  # hash -> number of running requests using it
        self._held: dict[int, int] = {}  # hash -> blocks it takes (its KV, and a snapshot if it has one)
        self._lru: OrderedDict[int, None] = OrderedDict()  # unpinned hashes, oldest first
        # Plain attributes, not properties: the engine reads them at nearly every step.
        self.blocks = 0  # KV blocks held by all entries, pinned or not (sum of _held)
        self.pinned_blocks = 0  # of those, held by pinned entries (sum of _held outside _lru)
        self._unpinned_blocks = 0  # sum of _held over _lru

    def __contains__(self, block_hash: int) -> bool:
        return block_hash in self._refs

    def snapshot_blocks_at(self, index: int) -> int:
        """Blocks of the state snapshot that the entry at prompt-block `index` keeps (0 if none)."""
        return self.snapshot_blocks if (index + 1) % self.stride == 0 else 0

    def match(self, hashes: tuple[int, ...], max_entries: int) -> int:
        """Number of leading `hashes` (at most `max_entries`) present, down to a whole number of
        strides (a hybrid model's hit ends at a snapshot); touches nothing."""
        if not self.enabled:
            return 0
        n = 0
        refs = self._refs
        for h in hashes[:max_entries]:
            if h not in refs:
                break
            n += 1
        return n - n % self.stride

    def max_hit_entries(self, prompt: int, target: int) -> int:
        """Most entries a request with a `prompt`-token prompt and `target` tokens to compute may
        hit: whole prompt blocks only, and at least one token left to compute (for the logits)."""
        return min(prompt // self.block_tokens, (target - 1) // self.block_tokens)

    def pin(self, hashes: list[int]) -> None:
        """Mark entries as used by one more running request (they must be present)."""
        for h in hashes:
            if self._refs[h] == 0:
                del self._lru[h]
                held = self._held[h]
                self._unpinned_blocks -= held
                self.pinned_blocks += held
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
                held = self._held[h]
                self._unpinned_blocks += held
                self.pinned_blocks -= held

    def insert_pinned(self, block_hash: int, snapshot_blocks: int = 0) -> None:
        """Add a freshly computed block (with a state snapshot of `snapshot_blocks` blocks, if
        any), pinned by the request that computed it."""
        assert block_hash not in self._refs
        self._refs[block_hash] = 1
        held = self._held[block_hash] = self.entry_blocks + snapshot_blocks
        self.blocks += held
        self.pinned_blocks += held

    def evict(self, blocks_wanted: int) -> int:
        """Drop least recently released unpinned entries until at least `blocks_wanted` KV blocks
        are freed or none is left; returns the blocks freed."""
        freed = 0
        while freed < blocks_wanted and self._lru:
            h, _ = self._lru.popitem(last=False)
            del self._refs[h]
            held = self._held.pop(h)
            self.blocks -= held  # an unpinned entry: pinned_blocks stays
            self._unpinned_blocks -= held
            freed += held
        return freed

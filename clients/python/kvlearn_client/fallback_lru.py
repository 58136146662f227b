"""The retention client's local answer to RankEviction when the sidecar is slow
or down: least recently used first, leaves only.

The same rule as the C++ client's (clients/fallback_lru.h): it mirrors what the
engine reported (blocks stored with their parent, hits, removals); a block with
a stored child is never chosen (evicting it would orphan the child), nor a
block of the current request (stored or hit since the last begin_request).
Memory is bounded by `capacity_blocks`: past it the least recently used
evictable block is forgotten (counted in `forgotten`).

Thread-safety: none; RetentionClient guards it with its lock.
"""

from collections import OrderedDict
from dataclasses import dataclass
from typing import Dict, Iterable, List, Optional


@dataclass
class FallbackVictim:
    block_id: int
    bytes: int


@dataclass
class FallbackBlock:
    """A tracked block, for resending the engine's state to the sidecar."""
    block_id: int
    parent_id: Optional[int]
    tokens: int
    bytes: int


@dataclass
class _Entry:
    parent: Optional[int]
    bytes: int
    tokens: int = 0
    stored_children: int = 0
    pinned: bool = False
    last_use: int = 0


class FallbackLru:
    def __init__(self, capacity_blocks: int):
        self._capacity = max(1, capacity_blocks)
        self._entries: Dict[int, _Entry] = {}
        self._recency: "OrderedDict[int, None]" = OrderedDict()  # oldest first
        self._pinned: List[int] = []
        self._clock = 0
        self.forgotten = 0

    def __len__(self) -> int:
        return len(self._entries)

    def begin_request(self) -> None:
        """A new request: the previous one's blocks may be evicted again."""
        for block_id in self._pinned:
            entry = self._entries.get(block_id)
            if entry is not None:
                entry.pinned = False
        self._pinned.clear()

    def _touch(self, block_id: int, entry: _Entry) -> None:
        self._clock += 1
        entry.last_use = self._clock
        self._recency[block_id] = None
        self._recency.move_to_end(block_id)

    def _pin(self, block_id: int, entry: _Entry) -> None:
        if not entry.pinned:
            entry.pinned = True
            self._pinned.append(block_id)

    def stored(self, block_id: int, parent_id: Optional[int], nbytes: int,
               tokens: int = 0) -> None:
        entry = self._entries.get(block_id)
        if entry is None:
            entry = _Entry(parent=parent_id, bytes=nbytes, tokens=tokens)
            self._entries[block_id] = entry
            parent = self._entries.get(parent_id) if parent_id is not None else None
            if parent is not None:
                parent.stored_children += 1
        self._touch(block_id, entry)
        self._pin(block_id, entry)
        self._forget_one_if_over_capacity()

    def hit(self, block_id: int) -> None:
        entry = self._entries.get(block_id)
        if entry is not None:
            self._touch(block_id, entry)
            self._pin(block_id, entry)

    def removed(self, block_id: int) -> None:
        if block_id in self._entries:
            self._erase(block_id)

    def _erase(self, block_id: int) -> None:
        entry = self._entries.pop(block_id)
        del self._recency[block_id]
        if entry.parent is not None:
            parent = self._entries.get(entry.parent)
            if parent is not None and parent.stored_children > 0:
                parent.stored_children -= 1

    def _forget_one_if_over_capacity(self) -> None:
        if len(self._entries) <= self._capacity:
            return
        for block_id in self._recency:
            entry = self._entries[block_id]
            if entry.stored_children == 0 and not entry.pinned:
                self._erase(block_id)
                self.forgotten += 1
                return

    def blocks(self) -> List[FallbackBlock]:
        """Every tracked block, each after its parent (when tracked)."""
        out: List[FallbackBlock] = []
        emitted = set()
        for block_id in self._entries:
            ancestry = []
            at: Optional[int] = block_id
            while at is not None and at not in emitted and at in self._entries:
                ancestry.append(at)
                at = self._entries[at].parent
            for a in reversed(ancestry):
                e = self._entries[a]
                out.append(FallbackBlock(a, e.parent, e.tokens, e.bytes))
                emitted.add(a)
        return out

    def evict(self, bytes_to_free: int, candidates: Iterable[int] = ()) -> List[FallbackVictim]:
        """Victims, least recently used first, until `bytes_to_free` are freed or
        nothing else is evictable; forgotten at once. Non-empty `candidates`
        limit the choice to those ids."""
        allowed = set(candidates)

        def evictable(block_id: int, entry: _Entry) -> bool:
            return (entry.stored_children == 0 and not entry.pinned
                    and (not allowed or block_id in allowed))

        victims: List[FallbackVictim] = []
        freed = 0
        order = list(self._recency)  # a snapshot: erasing does not disturb the scan
        scan = 0
        # Evicting a leaf can make its parent a leaf. Every block older than the
        # scan's frontier (the last block it took) was not evictable, so a
        # parent older than the frontier is now the oldest evictable block and
        # goes next; a younger one is met by the scan.
        frontier_use = 0
        parent_next: Optional[int] = None
        while freed < bytes_to_free:
            if parent_next is not None:
                block_id, parent_next = parent_next, None
            else:
                while scan < len(order) and not (
                        order[scan] in self._entries
                        and evictable(order[scan], self._entries[order[scan]])):
                    scan += 1
                if scan == len(order):
                    break
                block_id = order[scan]
                scan += 1
                frontier_use = self._entries[block_id].last_use
            victim = self._entries[block_id]
            victims.append(FallbackVictim(block_id, victim.bytes))
            freed += victim.bytes
            self._erase(block_id)
            if victim.parent is not None:
                parent = self._entries.get(victim.parent)
                if (parent is not None and evictable(victim.parent, parent)
                        and parent.last_use < frontier_use):
                    parent_next = victim.parent
        return victims

"""A dict with O(1) snapshots: 64 shards, each copied on its first write after a snapshot.

``freeze()`` hands out a read-only view that shares every shard and marks them all as shared;
the next write to a shared shard copies that shard (about 1/64 of the map) before changing it.
So a snapshot costs 64 pointer copies however large the map is, a write costs a dict store, and
the copying after a snapshot is bounded by the size of the map, spread over the next writes.
Which shard a key lives in depends on Python's hash, which varies between processes; nothing
that leaves this module depends on it (iteration is sorted where order matters).

A ``CowMap`` also remembers which keys were written or removed since someone last took them
(``changed``): the state digest (``statedigest``) rehashes those alone, so it costs what changed.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from itertools import chain
from typing import Generic, TypeVar

K = TypeVar("K")
V = TypeVar("V")
SHARDS = 64
SHARD_MASK = SHARDS - 1  # a key's shard: hash(key) & SHARD_MASK


class FrozenMap(Generic[K, V]):
    """The read side, and what a snapshot holds: shards that nobody writes to any more."""

    __slots__ = ("_shards",)

    def __init__(self, shards: list[dict[K, V]]) -> None:
        self._shards = shards

    def get(self, key: K, default: V | None = None) -> V | None:
        return self._shards[hash(key) & SHARD_MASK].get(key, default)

    def __contains__(self, key: K) -> bool:
        return key in self._shards[hash(key) & SHARD_MASK]

    def __getitem__(self, key: K) -> V:
        return self._shards[hash(key) & SHARD_MASK][key]

    def __len__(self) -> int:
        return sum(map(len, self._shards))

    # chained in C: a generator's frame per item cost a checkpoint 0.4 s at 150,000 pods
    def items(self) -> Iterator[tuple[K, V]]:
        return chain.from_iterable([shard.items() for shard in self._shards])

    def values(self) -> Iterator[V]:
        return chain.from_iterable([shard.values() for shard in self._shards])

    def keys(self) -> Iterator[K]:
        return chain.from_iterable(self._shards)

    def shards(self) -> list[dict[K, V]]:
        """The shards themselves, to compare with another view's: one not written since is the
        same dict in both (read them, never write)."""
        return self._shards


class CowMap(FrozenMap[K, V]):
    """The write side: copies a shard on its first write after ``freeze``."""

    __slots__ = ("_owned", "changed")

    def __init__(self) -> None:
        super().__init__([{} for _ in range(SHARDS)])
        self._owned = [True] * SHARDS
        self.changed: set[K] = set()  # keys set or popped since their last hashing

    def __setitem__(self, key: K, value: V) -> None:
        i = hash(key) & SHARD_MASK
        if not self._owned[i]:
            self._shards[i] = dict(self._shards[i])
            self._owned[i] = True
        self._shards[i][key] = value
        self.changed.add(key)

    def load(self, pairs: Iterable[tuple[K, V]]) -> None:
        """Store many pairs at once (a restore): ``self[k] = v`` for each, without its per-call cost."""
        assert all(self._owned), "load() fills a map no snapshot shares"
        shards = self._shards
        for key, value in pairs:
            shards[hash(key) & SHARD_MASK][key] = value
        self.changed.update(k for shard in shards for k in shard)

    def pop(self, key: K, default: V | None = None) -> V | None:
        i = hash(key) & SHARD_MASK
        shard = self._shards[i]
        if key not in shard:
            return default
        if not self._owned[i]:
            shard = self._shards[i] = dict(shard)
            self._owned[i] = True
        self.changed.add(key)
        return shard.pop(key)

    def write(self, changes: dict[K, V], gone: object) -> None:
        """``self[k] = v`` for each pair, ``pop(k)`` where v is ``gone``: a delta written at once."""
        shards, owned = self._shards, self._owned
        for key, value in changes.items():
            i = hash(key) & SHARD_MASK
            if not owned[i]:
                shards[i] = dict(shards[i])
                owned[i] = True
            if value is gone:
                shards[i].pop(key, None)
            else:
                shards[i][key] = value
        self.changed.update(changes)

    def freeze(self) -> FrozenMap[K, V]:
        """A read-only view of the map as it is now; later writes do not reach it."""
        self._owned = [False] * SHARDS
        return FrozenMap(list(self._shards))

    def fork(self) -> CowMap[K, V]:
        """A map that goes on from this one's content independently: both share every shard,
        and whichever writes a shard first copies it. O(shards), not O(size)."""
        twin: CowMap[K, V] = CowMap()
        twin._shards = list(self.freeze().shards())
        twin._owned = [False] * SHARDS
        return twin

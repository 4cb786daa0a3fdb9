"""A dict made of a base that nobody writes any more and the writes since: cheap to fork.

The fold keeps a few plain dicts outside its copy-on-write maps (pods by name, their uids), each
written on most pod records. A state forked every few thousand records (a reader's anchors for
past versions) copied them whole: 17 MB at 150,000 pods, for a few thousand changed keys. A
``Layered`` dict shares its base between the forks and copies only the writes since, and folds
its writes into a new base when they grow past a fraction of it, so a fork costs what changed.

Only forks use it: the fold's own state keeps plain dicts, which are faster to write.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, Generic, TypeVar

K = TypeVar("K")
V = TypeVar("V")
FLATTEN_AT = 8  # the writes are merged into a new base once they pass 1/FLATTEN_AT of it
_MISSING: Any = object()


class Layered(Generic[K, V]):
    __slots__ = ("_gone", "_top", "base")

    def __init__(self, base: dict[K, V], top: dict[K, V] | None = None, gone: set[K] | None = None) -> None:
        self.base = base  # never written: shared with other forks
        self._top: dict[K, V] = {} if top is None else top  # keys written since
        self._gone: set[K] = set() if gone is None else gone  # keys of the base removed since

    @classmethod
    def fork_of(cls, value: dict[K, V] | Layered[K, V]) -> tuple[Layered[K, V], Layered[K, V]]:
        """Two dicts equal to ``value`` that go on independently: (the one to keep writing in
        place of ``value``, the fork). A plain dict becomes the base of both."""
        if isinstance(value, Layered):
            value.compact()
            return value, Layered(value.base, dict(value._top), set(value._gone))
        return Layered(value), Layered(value)

    def compact(self) -> None:
        """Merge the writes into a new base if they have grown past a fraction of it."""
        if len(self._top) + len(self._gone) > len(self.base) // FLATTEN_AT:
            merged = dict(self.base)  # a new base: the old one may be shared
            for key in self._gone:
                del merged[key]
            merged.update(self._top)
            self.base, self._top, self._gone = merged, {}, set()

    def write(self, changes: dict[K, V], gone: object) -> None:
        """``self[k] = v`` for each pair, ``pop(k)`` where v is ``gone``: a delta written at once."""
        self._top.update(changes)
        self._gone.difference_update(changes)
        for key in [k for k, v in changes.items() if v is gone]:
            del self._top[key]
            if key in self.base:
                self._gone.add(key)

    def writes(self) -> tuple[dict[K, V], set[K]]:
        """The writes since the base (to charge what a fork holds of its own)."""
        return self._top, self._gone

    def get(self, key: K, default: V | None = None) -> V | None:
        value: V = self._top.get(key, _MISSING)
        if value is not _MISSING:
            return value
        if key in self._gone:
            return default
        return self.base.get(key, default)

    def __getitem__(self, key: K) -> V:
        value = self.get(key, _MISSING)
        if value is _MISSING:
            raise KeyError(key)
        return value  # type: ignore[return-value]

    def __contains__(self, key: object) -> bool:
        return self.get(key, _MISSING) is not _MISSING  # type: ignore[arg-type]

    def __setitem__(self, key: K, value: V) -> None:
        self._top[key] = value
        if key in self.base:
            self._gone.discard(key)

    def pop(self, key: K, default: V | None = None) -> V | None:
        value = self.get(key, _MISSING)
        if value is _MISSING:
            return default
        self._top.pop(key, None)
        if key in self.base:
            self._gone.add(key)
        return value

    def __delitem__(self, key: K) -> None:
        if self.pop(key, _MISSING) is _MISSING:
            raise KeyError(key)

    def __iter__(self) -> Iterator[K]:
        top, gone = self._top, self._gone
        yield from (k for k in self.base if k not in gone and k not in top)
        yield from top

    def __len__(self) -> int:
        return sum(1 for _ in self)

    def items(self) -> Iterator[tuple[K, V]]:
        return ((k, self[k]) for k in self)

    def values(self) -> Iterator[V]:
        return (self[k] for k in self)

    def keys(self) -> Iterator[K]:
        return iter(self)

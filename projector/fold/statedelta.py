"""What a fold's state changed between two of its versions, kept to rebuild the later one.

A reader of past versions (the UI's survey of the history) wants a starting point every few
thousand records; a fork there costs the shards the fold copies after it (64 task shards, about
5 MB at 150,000 pods, for the 2,600 tasks 8,192 records change). A ``StateDelta`` holds only
what changed: for each map the keys written or removed since the last delta, with their values
then. A state at a later version is a fork of an earlier one with the deltas between them
written into it (``apply``), a dict store per key instead of the fold's parsing per record.

The fold's copy-on-write maps already know which keys changed (``CowMap.changed``, for the state
digest); its plain dicts learn it by being ``Tracked`` in a state whose deltas are taken
(``track``), so the fold itself pays nothing where nobody takes them.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from strata.projector.fold.cowmap import CowMap
from strata.projector.fold.layered import Layered
from strata.projector.fold.state import CacheState
from strata.projector.fold.statedigest import StateDigest

K = TypeVar("K")
V = TypeVar("V")
GONE: Any = type("Gone", (), {"__repr__": lambda _self: "GONE"})()  # a key removed since the last delta
_TRACKED = ("pods", "pod_uids", "overlays")  # the state's plain dicts the fold writes per record
_SKIPPED = ("hashes", "rendered", "last_object")  # a reader's, not the fold's: a rebuilt state starts without


class Tracked(dict[K, V]):
    """A dict that remembers the keys written or removed since ``changed`` was last cleared."""

    __slots__ = ("changed",)

    def __init__(self, pairs: Iterable[tuple[K, V]] = ()) -> None:
        super().__init__(pairs)
        self.changed: set[K] = set()

    def __setitem__(self, key: K, value: V) -> None:
        super().__setitem__(key, value)
        self.changed.add(key)

    def __delitem__(self, key: K) -> None:
        super().__delitem__(key)
        self.changed.add(key)

    def pop(self, key: K, *default: Any) -> Any:
        self.changed.add(key)
        return super().pop(key, *default)


@dataclass(frozen=True)
class StateDelta:
    """The change from one version of a fold's state to ``version``: ``writes`` per map (a key's
    value then, or ``GONE``), ``values`` every other attribute as it was (containers copied)."""

    version: int
    writes: dict[str, dict[Any, Any]]
    values: dict[str, Any]

    def then(self, later: StateDelta) -> StateDelta:
        """This delta followed by ``later``, as one (``later``'s value of a key written in both)."""
        writes = {name: {**self.writes.get(name, {}), **changes} for name, changes in later.writes.items()}
        return StateDelta(later.version, writes, later.values)

    def nbytes(self) -> int:
        """The bytes of its dicts' structure (the values are the fold's own objects)."""
        return sum(sys.getsizeof(changes) for changes in self.writes.values())


def track(state: CacheState) -> None:
    """Make the state's plain dicts remember what the fold writes (``take`` reads and clears it)."""
    for name in _TRACKED:
        value = getattr(state, name)
        if not isinstance(value, Tracked):
            setattr(state, name, Tracked(value.items()))


def take(state: CacheState) -> StateDelta:
    """What ``state`` changed since the last ``take`` (since ``track``, the first time)."""
    writes: dict[str, dict[Any, Any]] = {}
    values: dict[str, Any] = {}
    for name, value in vars(state).items():
        if isinstance(value, (CowMap, Tracked)):
            writes[name] = {key: value.get(key, GONE) for key in value.changed}
            value.changed.clear()
        elif isinstance(value, Layered):
            raise TypeError(f"{name} is a fork's layered dict: track() the state before taking deltas")
        elif name not in _SKIPPED:
            values[name] = value.copy() if isinstance(value, (dict, set)) else value
    return StateDelta(state.version, writes, values)


def apply(state: CacheState, deltas: Sequence[StateDelta]) -> None:
    """Bring ``state``, at the version the first delta starts from, through every one of
    ``deltas`` (consecutive, oldest first) to the last one's version: each key written once,
    with its last value (the deltas are merged first, by dict updates in C)."""
    if not deltas:
        return
    merged: dict[str, dict[Any, Any]] = {}
    for delta in deltas:
        for name, changes in delta.writes.items():
            merged.setdefault(name, {}).update(changes)
    last = deltas[-1]
    for name, changes in merged.items():
        target = getattr(state, name)
        if isinstance(target, (CowMap, Layered)):
            target.write(changes, GONE)
            continue
        for key, value in changes.items():
            if value is GONE:
                target.pop(key, None)
            else:
                target[key] = value
    for name, value in last.values.items():
        setattr(state, name, value.copy() if isinstance(value, (dict, set)) else value)
    state.hashes = StateDigest()  # hashed anew if the state ever reports one

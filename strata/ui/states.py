"""Working states the UI keeps besides the live one: cheap forks, and what they cost in memory.

A past version is computed by folding forward from a state at or below it. Restoring a
checkpoint costs seconds at 150,000 pods, so the UI keeps *anchors*: forks of a past state laid
every few thousand records while it folds, from which a nearby version is one short fold away.
A fork shares every shard of the fold's copy-on-write maps (the next write to a shard copies
it, in whichever of the two writes first) and the base of the pods' dicts (``layered``: each
side keeps its own writes since); only the fold's small plain dicts are copied. A restore
costs 450 MB and 2 s at 150,000 pods.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable
from typing import Any

from strata.projector.fold.cowmap import FrozenMap
from strata.projector.fold.layered import Layered
from strata.projector.fold.snapshot import Snapshot
from strata.projector.fold.state import CacheState
from strata.projector.fold.statedigest import MAPS


def fork(state: CacheState) -> CacheState:
    """A state that continues the fold independently of ``state`` from its version on."""
    return state.fork()


def forget_changes(state: CacheState) -> None:
    """Drop the maps' record of changed keys, which only the state digest consumes: a state the
    UI folds never reports one, and the sets would otherwise grow with every key written."""
    for name in MAPS:
        getattr(state, name).changed.clear()


def _maps(item: Snapshot | CacheState) -> Iterable[FrozenMap[Any, Any]]:
    return (getattr(item, name) for name in MAPS)


def shard_ids(item: Snapshot | CacheState) -> set[int]:
    return {id(shard) for m in _maps(item) for shard in m.shards()}


def parts(item: Snapshot | CacheState) -> tuple[list[tuple[int, int]], int]:
    """What ``own_bytes`` looks at, taken once: (id, bytes) of every part that states may share
    (the maps' shards, the bases of a fork's layered dicts), and the bytes of a state's own
    plain dicts. Valid while the item is not written to (snapshots, and anchors, which are
    only ever forked)."""
    shared = [(id(shard), sys.getsizeof(shard)) for m in _maps(item) for shard in m.shards()]
    own = 0
    if isinstance(item, CacheState):
        for value in (item.pods, item.pod_uids, item.overlays):
            if isinstance(value, Layered):
                shared.append((id(value.base), sys.getsizeof(value.base)))
                top, gone = value.writes()
                own += sys.getsizeof(top) + sys.getsizeof(gone)
            else:
                own += sys.getsizeof(value)
    return shared, own


def charge(item_parts: tuple[list[tuple[int, int]], int], shared: set[int]) -> int:
    """``own_bytes`` from ``parts``."""
    pieces, total = item_parts
    for key, size in pieces:
        if key not in shared:
            shared.add(key)
            total += size
    return total


def own_bytes(item: Snapshot | CacheState, shared: set[int]) -> int:
    """The bytes of ``item``'s dict structure that no state or snapshot in ``shared`` (ids of
    its parts) holds too: what keeping it costs beyond them. The objects in the dicts are
    shared along a lineage (a fork or a snapshot refers to the same task views) and not counted."""
    return charge(parts(item), shared)

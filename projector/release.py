"""What a follower of the log lets go of, freed a few parts at a time between records.

A snapshot shares its maps' shards with the state until the fold writes past it; from then on it
is the last holder of every object the fold has replaced since. Dropping it frees them all at
once: when a checkpoint's writer is collected, the previous checkpoint's snapshot (the writer's
rendering base) went that way, and under a steady churn of pods it paused the fold 50-100 ms.
So a follower hands such a snapshot to a ``Release``, which keeps its shards (and a rendering
base's fragments) as separate parts and drops ``PARTS_PER_TEND`` of them in each of the
follower's pauses. The audit index's feed hands over its frames the same way once the writer
has stored them (a transaction's acknowledgement lets go of up to 32 frames of 1,024 messages).
What is freed, and when, never reaches the state.
"""

from __future__ import annotations

from collections import deque

from strata.projector.fold.snapshot import Fragments, Snapshot
from strata.projector.fold.statedigest import MAPS

# A part is one of a map's 64 shards (at 150,000 pods a task shard holds about 2,300 entries,
# a few ms to free when it is their last holder), one dict of fragments, or one audit frame.
PARTS_PER_TEND = 4


def parts_of(item: Snapshot | Fragments) -> list[object]:
    """The pieces ``item`` holds that free much: its maps' shards, a rendering base's dicts."""
    if isinstance(item, Fragments):
        return [item.nodes, item.jobs, item.hypernodes, *parts_of(item.snapshot)]
    parts: list[object] = [shard for name in MAPS for shard in getattr(item, name).shards()]
    if item.base is not None:
        parts.extend(parts_of(item.base))
    return parts


class Release:
    """Parts waiting to be let go of, oldest first."""

    __slots__ = ("_parts",)

    def __init__(self) -> None:
        self._parts: deque[object] = deque()

    def hand(self, item: Snapshot | Fragments | None) -> None:
        """Take over ``item``'s parts; the caller then drops its own reference at no cost."""
        if item is not None:
            self._parts.extend(parts_of(item))

    def keep(self, part: object) -> None:
        """Take over one part (an audit frame's buffers)."""
        self._parts.append(part)

    def tend(self, count: int = PARTS_PER_TEND) -> None:
        """Let go of up to ``count`` parts."""
        parts = self._parts
        for _ in range(min(count, len(parts))):
            parts.popleft()

    def __len__(self) -> int:
        return len(self._parts)

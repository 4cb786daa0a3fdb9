"""The state digest: what readers of the cache log compare to find divergence, at O(changed).

The canonical snapshot's SHA-256 (``Snapshot.digest``, cache-semantics.md section 8) renders the
whole cache: seconds at 150k tasks. Readers compare digests every ``STRATA_DIGEST_EVERY`` records
while they fold, so they compare this one: a multiset hash over every object the snapshot is
rendered from, the sum modulo 2**256 of one SHA-256 per stored object, of the canonical JSON of
``[map, key, value]``. A sum does not depend on the order in which objects were written, nor on
Python's hash seed; an object that changes is rehashed alone (its old hash out, its new one in),
so a report costs what changed since the last one. Equal stores give equal digests; any single
differing object gives another (barring a SHA-256 collision). docs/projector.md defines it for
other implementations of the fold.
"""

from __future__ import annotations

import hashlib
from typing import TYPE_CHECKING, Any

from strata.schemas.objectjson import SortedJson, number_text

if TYPE_CHECKING:
    from strata.projector.fold.state import CacheState

# The maps a snapshot is rendered from (CacheState attributes, each a CowMap), in digest order.
MAPS = (
    "tasks",
    "node_used",
    "nodes",
    "node_seq",
    "csinodes",
    "podgroups",
    "queues",
    "priority_classes",
    "hypernodes",
)
MODULUS = 1 << 256
# Followers settle the digest a slice at a time (``tend``), so that a report rehashes little and
# no slice pauses the fold for long (about 6 us an object, three times that while a checkpoint's
# forked writer makes the fold's first touch of each page a copy): every SETTLE_EVERY versions,
# at most SETTLE_BUDGET objects, four a record, more than a record changes. An object changed
# twice within a slice is hashed once. (1,024 and 4,096 made slices of 30-41 ms under load; 512
# and 2,048 slices of 58-101 ms, and 256 and 1,024 of 50-68 ms, in loads on a machine in a slow
# phase, a fork's child alive: up to 60 us an object. At 64, every pause of a follower settles a
# slice; over 600,000 records of the 5k/150k history it hashes 23 % more objects than at 256,
# about 0.3 s, since fewer change twice within a slice.)
SETTLE_EVERY = 64
SETTLE_BUDGET = 256
# A follower that reports defers its slices while the changed objects waiting are no more than
# DEFER_PER_VERSION per version left before the next report: an object changed again meanwhile
# is then hashed once, not once per slice it changed in. Over the 5k/150k history (reports every
# 50,000 versions) that hashes 640,694 objects instead of 1,549,582; at most 18,251 wait at once,
# and no report found more than a slice to hash. Slices then clear SETTLE_BUDGET / SETTLE_EVERY
# objects a version, so any steady rate of change below that less this one still reaches each
# report settled.
DEFER_PER_VERSION = 1
_GONE: Any = object()  # what a map's ``get`` gives for a key it no longer holds (None is a value)


# An object's JSON: NamedTuples as arrays, a StrEnum as its string, a NumberLiteral as its text
# in a string. tests/fold/test_statedigest_fastjson.py compares the fast bytes with the stdlib's over
# every object of a folded history.
_OBJECT_JSON = SortedJson(number_text)
_ENCODE = _OBJECT_JSON.stdlib


def object_hash(name: str, key: Any, value: Any) -> int:
    """One stored object's share of the digest."""
    data = _OBJECT_JSON.bytes([name, key, value])
    return int.from_bytes(hashlib.sha256(data).digest(), "big")


class StateDigest:
    """Each stored object's hash and their sums per map, brought up to date by ``settle``."""

    __slots__ = ("_hashes", "_sums")

    def __init__(self) -> None:
        self._hashes: dict[str, dict[Any, int]] = {name: {} for name in MAPS}
        self._sums = dict.fromkeys(MAPS, 0)

    @staticmethod
    def pending(state: CacheState) -> int:
        """Objects changed since they were last hashed."""
        return sum(len(getattr(state, name).changed) for name in MAPS)

    def settle(self, state: CacheState, budget: int | None = None) -> int:
        """Rehash up to ``budget`` changed objects (all of them without one); returns how many.

        The order in which changed keys are taken does not matter: a sum commutes.
        """
        done = 0
        for name in MAPS:
            store = getattr(state, name)
            changed: set[Any] = store.changed
            hashes = self._hashes[name]
            total = self._sums[name]
            while changed and (budget is None or done < budget):
                key = changed.pop()
                total -= hashes.pop(key, 0)
                value = store.get(key, _GONE)  # one lookup, not a test and a read: once per object
                if value is not _GONE:
                    hashes[key] = h = object_hash(name, key, value)
                    total += h
                done += 1
            self._sums[name] = total % MODULUS
            if budget is not None and done >= budget:
                break
        return done

    def ready(self, state: CacheState) -> bool:
        """Whether a report now would rehash no more than a slice. Not so right after a restore,
        when every restored object waits for its first hashing (which ``tend`` spreads over the
        next records): a follower skips a report then rather than pause the fold for it."""
        return self.pending(state) <= SETTLE_BUDGET

    def tend(self, state: CacheState, report_in: int | None = None) -> None:
        """Call after each record a follower applies: settles a slice every SETTLE_EVERY
        versions (with a report ``report_in`` versions away, only once more objects wait than
        DEFER_PER_VERSION allows), and each time while the next report is no farther than a
        slice's versions, so that the report finds only the last few records' changes to hash."""
        report_near = report_in is not None and report_in <= SETTLE_EVERY
        slice_due = state.version % SETTLE_EVERY == 0 and (
            report_in is None or self.pending(state) > report_in * DEFER_PER_VERSION
        )
        if report_near or slice_due:
            self.settle(state, SETTLE_BUDGET)

    def hexdigest(self, state: CacheState) -> str:
        """The digest of the state as it is now (settles every change first)."""
        self.settle(state)
        head = [state.version, state.default_priority, state.next_node_seq, [f"{self._sums[n]:064x}" for n in MAPS]]
        return hashlib.sha256(_ENCODE(head).encode()).hexdigest()

"""The cache at every version the UI shows: the live state, following the log, and past versions.

The live state is kept as a scheduler replica keeps its cache (``scheduler.cache.LogCache``):
the newest checkpoint at or below the audit index's position is restored, then every record of
the log is folded as it arrives; a snapshot of it is O(1) and taken only when a page asks. The
records it folds also go into the audit index when nothing else has put them there yet (a
`strata project` running beside it writes the same entries; the index skips what it has), so a
history never stops at the moment the UI started.

A past version is computed, never by refolding the log from its start: from the nearest state
at or below it, an anchor (``states.fork``, laid every ``anchor_every`` records over a window
before the versions the user browses, with the answer, and by the survey over the whole
history: ``survey``) or a checkpoint, whichever costs less to fold forward from. The
snapshots and anchors are kept in one LRU bounded by the bytes of their own dict structure
(``states.own_bytes``); restored lineages other than the newest are dropped whole, since their
objects (a restore's 450 MB at 150,000 pods) are not shared with anything else.
"""

from __future__ import annotations

import gc
import logging
import threading
import time
from collections import OrderedDict, deque
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import cast

from strata.errors import StrataError
from strata.log.cachelog import CacheLogReader, FoldItem, LogEntry, item_offset
from strata.projector.auditindex.store import AuditIndex, Records
from strata.projector.auditindex.writer import value_of
from strata.projector.fold import auditentries
from strata.projector.fold.snapshot import Snapshot
from strata.projector.fold.state import CacheState
from strata.projector.gctune import freeze_kept
from strata.projector.runner import LogRunner
from strata.ui.states import charge, forget_changes, fork, own_bytes, parts, shard_ids
from strata.ui.survey import SURVEY_EVERY, Stopped, Survey, SurveyStats

LOG = logging.getLogger("strata.ui")
ANCHOR_EVERY = 1024  # records between anchors: a nearby version is at most this many records' fold away
ANCHOR_WINDOW = 16  # anchors laid over the last ANCHOR_WINDOW * ANCHOR_EVERY records before a version asked for
COARSE = 8  # every COARSE-th point of the grid gets an anchor over a whole fold (the window: every one)
ASKED_KEPT = 4  # past versions asked for lately: BROWSED near a new one mean the user is browsing there
# A window costs 0.7-2 s at 150,000 pods (a survey point rebuilt from its key, 16 deltas written
# into forks), several times a version reached without one, and the answer that lays it pays it.
# With two of the last four near, versions drawn 20,000 to
# 120,000 records apart laid one about one request in four (the bench's far versions: p99 600-740
# ms); with all four near, none in 60 (at most 148 ms), while a user who stays in one stretch has
# it from the fourth version asked there on.
BROWSED = 4
CURSORS_KEPT = 2  # states left where a past fold stopped (off the anchor grid), to fold on from
CHUNK = 1024  # records read from the broker at once for a past fold, and kept (decoded) for the next one
CHUNKS_KEPT = 48  # about 1 MB each at 5,000 nodes / 150,000 pods: versions near each other reread nothing
CHECKPOINTS_TTL_S = 10.0  # how long the list of checkpoints is trusted (new ones come every 100,000 records)
FOLD_RATE = 40_000.0  # records/s the fold reads from the broker (docs/projector.md), to choose where to start
INDEX_BATCH = 5000  # audit entries written at once, or every INDEX_SECONDS when fewer
INDEX_SECONDS = 1.0
INDEX_BACKLOG = 200_000  # entries kept while the index refuses writes, before giving up on it
LIVE = 0  # the lineage of the live state
SURVEY = -1  # the lineage of the survey's anchors (``survey``), folded from the log's first record
STEPS_KEPT = 1024  # stretches of the grid (and versions' tails) whose written task uids are kept
_NOTHING: frozenset[str] = frozenset()
# The collector's full passes walk every tracked object not frozen: after a few past folds (each
# new task view, every anchor's copied dicts) that is millions of objects, and such a pass held
# the interpreter for 3-4 s in the middle of a request. What the UI keeps lives on until the LRU
# drops it (reference counting frees it then, frozen or not; the fold makes almost no cycles),
# so it is frozen where it is made: after each fold toward a past version, and every
# ``gctune.FREEZE_EVERY`` records of the live fold.


def _ms(since: float) -> int:
    return round((time.perf_counter() - since) * 1000)


class NotReady(StrataError):
    """The live state is not restored yet."""


@dataclass
class _Item:
    lineage: int
    value: Snapshot | CacheState
    _parts: tuple[list[tuple[int, int]], int] | None = None

    def charge(self, shared: set[int]) -> int:
        """``own_bytes`` of the value, from its shards' sizes taken once (an item is not written)."""
        if self._parts is None:
            self._parts = parts(self.value)
        return charge(self._parts, shared)


@dataclass
class TimelineStats:
    snapshots: int
    anchors: int
    bytes: int
    restores: int
    survey: SurveyStats
    lineages: list[int] = field(default_factory=list)


def browsing(version: int, asked: Iterable[int], window: int) -> bool:
    """Whether the versions asked next are likely near ``version``, given the past versions
    ``asked`` lately: it is the first one (where the user lands with the slider), or BROWSED of
    them are within ``window`` of it (a pattern, not one version that happens to fall near
    another). Only then is a window of anchors worth its forks; a version drawn anywhere pays
    none."""
    asked = list(asked)
    return not asked or sum(abs(version - a) <= window for a in asked) >= BROWSED


class Timeline:
    def __init__(
        self,
        runner: LogRunner,
        index: AuditIndex | None = None,
        *,
        budget_bytes: int = 512 << 20,
        anchor_every: int = ANCHOR_EVERY,
        chunk: int = CHUNK,
        survey_every: int = SURVEY_EVERY,
    ) -> None:
        self.runner = runner
        self.index = index  # None: the UI does not write the audit index
        self.budget_bytes = budget_bytes
        self.survey = Survey(budget_bytes // 2, survey_every)  # half the budget at most, the rest the LRU's
        self._quiet = threading.Condition()  # the survey waits on it while requests are answered
        self._serving = 0
        self._stop = threading.Event()
        self.anchor_every = max(1, anchor_every)
        self.chunk = max(1, chunk)
        self._changed = threading.Condition()
        self._live: CacheState | None = None
        self._live_snapshot: Snapshot | None = None
        self._live_time_ms: int | None = None
        self._failure: BaseException | None = None
        self._past_lock = threading.Lock()
        self._items: OrderedDict[tuple[str, int], _Item] = OrderedDict()  # ("s"|"a", version), LRU first
        self._lineage = LIVE
        self._restores = 0
        self._restore_seconds = 2.0  # the last restore's duration, to weigh a checkpoint against an anchor
        self._thread: threading.Thread | None = None
        self._chunks: OrderedDict[int, list[FoldItem]] = OrderedDict()  # first offset -> its records
        self._checkpoints: tuple[float, list[int]] = (0.0, [])  # (when listed, versions)
        # grid point -> the task uids written up to the next one; version -> those since its grid point
        self._steps: OrderedDict[int, frozenset[str]] = OrderedDict()
        self._tails: OrderedDict[int, frozenset[str]] = OrderedDict()
        self._live_from_grid = False  # whether the live fold has passed a grid point since its restore
        self._asked: deque[int] = deque(maxlen=ASKED_KEPT)  # the past versions asked for lately
        self._told = threading.local()  # how the calling thread's last ``snapshot`` came (``how``)
        # one reader for every past fold: it asks the brokers whether the log exists once (55 ms)
        self._reader = CacheLogReader(runner.settings, keep_consumer=True)  # used under the past lock

    # ------------------------------------------------------------------------------- live
    def start(self, stop: threading.Event) -> None:
        self._stop = stop
        self._thread = threading.Thread(target=self._follow, args=(stop,), name="ui-follow", daemon=True)
        self._thread.start()
        threading.Thread(target=self._survey, name="ui-survey", daemon=True).start()

    def wait_ready(self, timeout_s: float = 60.0) -> None:
        with self._changed:
            self._changed.wait_for(lambda: self._live is not None or self._failure is not None, timeout_s)
        self._raise_failure()
        if self._live is None:
            raise NotReady("the UI's cache is still restoring the newest checkpoint")

    def _raise_failure(self) -> None:
        if self._failure is not None:
            raise StrataError(f"the UI stopped following the cache log: {self._failure}")

    def _follow(self, stop: threading.Event) -> None:
        try:
            writes = _IndexWrites(self.runner, self.index) if self.index is not None else None
            start = self.index.indexed_to(self.runner.identity) if self.index is not None else None
            state = self.runner.restore(at_or_below=start)
            state.rendered = None  # pages render no canonical JSON of the live state: pin no old shards for it
            forget_changes(state)
            gc.freeze()  # the restored state lives on: the collector's full passes need not walk it
            with self._changed:
                self._live_from_grid = state.version % self.anchor_every == 0
                self._live = state
                self._changed.notify_all()
            for entry in self.runner.reader.follow(state.version, stop):
                if entry is not None:
                    self._apply_live(state, entry, writes)
                if writes is not None:
                    writes.tend(state.version, idle=entry is None)
            with self._past_lock:  # stopped: the past folds' consumer goes too
                self._reader.close()
        except BaseException as exc:  # a page must hear of it instead of showing a stale version for ever
            LOG.error("the UI stopped following the cache log: %s", exc)
            with self._changed:
                self._failure = exc
                self._changed.notify_all()

    # ----------------------------------------------------------------------------- survey
    def _survey(self) -> None:
        """Points from the log's first record to its end when it starts: see ``survey``
        (beyond it, the live fold's coarse anchors and the windows of browsed versions)."""
        try:
            self.wait_ready(timeout_s=24 * 3600.0)
        except StrataError:
            return
        try:
            self.survey.run(self.runner, self.runner.reader.end_offset(), self._gate)
        except Exception as exc:  # the survey only saves time: a failure leaves far versions to restores
            LOG.warning("the UI's survey of the history failed: %s", exc)

    def _gate(self) -> None:
        with self._quiet:
            while self._serving and not self._stop.is_set():
                self._quiet.wait(1.0)  # nothing notifies a stop: look at it every second
        if self._stop.is_set():
            raise Stopped

    @contextmanager
    def serving(self) -> Iterator[None]:
        """Around the answer to a request: the survey waits meanwhile."""
        with self._quiet:
            self._serving += 1
        try:
            yield
        finally:
            with self._quiet:
                self._serving -= 1
                self._quiet.notify_all()

    def _apply_live(self, state: CacheState, entry: LogEntry, writes: _IndexWrites | None) -> None:
        ctx = auditentries.context(state, entry.record) if writes is not None else None
        with self._changed:
            outcome = state.apply_at(entry.offset, entry.record)
            self._live_snapshot = None
            self._live_time_ms = entry.timestamp_ms
            if state.version % self.anchor_every == 0:
                if self._live_from_grid:
                    self._record_step(state.version - self.anchor_every, frozenset(state.tasks.changed))
                self._live_from_grid = True
                forget_changes(state)
                if state.version % (COARSE * self.anchor_every) == 0:
                    # the versions since the newest checkpoint need no restore: anchors of the live lineage
                    self._remember(("a", state.version), _Item(LIVE, fork(state)))
                freeze_kept(state.version)  # the live state's newer objects
            self._changed.notify_all()
        if writes is not None:
            kept = auditentries.Kept(entry.offset, entry.timestamp_ms, value_of(entry), outcome, ctx)
            writes.add(kept, auditentries.subjects(entry.record, ctx, state.last_object))

    @property
    def live_version(self) -> int:
        with self._changed:
            self._raise_failure()
            if self._live is None:
                raise NotReady("the UI's cache is still restoring the newest checkpoint")
            return self._live.version

    @property
    def live_time_ms(self) -> int | None:
        return self._live_time_ms

    def wait_beyond(self, version: int, timeout_s: float) -> int:
        """The live version once it passes ``version`` (or when ``timeout_s`` ends)."""
        with self._changed:
            self._changed.wait_for(
                lambda: self._failure is not None or (self._live is not None and self._live.version > version),
                timeout_s,
            )
            self._raise_failure()
            return self._live.version if self._live is not None else 0

    def live_snapshot(self) -> Snapshot:
        with self._changed:
            self._raise_failure()
            if self._live is None:
                raise NotReady("the UI's cache is still restoring the newest checkpoint")
            if self._live_snapshot is None:
                if self._live_from_grid:
                    self._record_tail(self._live.version, frozenset(self._live.tasks.changed))
                self._live_snapshot = self._live.snapshot()
                self._remember(("s", self._live.version), _Item(LIVE, self._live_snapshot))
            return self._live_snapshot

    # ------------------------------------------------------------------------------- past
    def snapshot(self, version: int) -> Snapshot:
        """The cache after records 0..version-1."""
        live = self.live_snapshot()
        if version == live.version:
            self._told.how = "live"
            return live
        if version > live.version or version < 0:
            raise StrataError(f"version {version} is not in the log (0 to {live.version})")
        hit = self._cached(version)
        if hit is not None:
            self._told.how = "cached"
            return hit
        asked = time.perf_counter()
        with self._past_lock:
            hit = self._cached(version)
            if hit is not None:
                self._told.how = f"cached after {_ms(asked)} ms waiting"
                return hit
            waited = _ms(asked)
            browsed = self._browsing(version)
            self._asked.append(version)
            started = time.perf_counter()
            # The window is laid with the answer: the first versions asked near this one come
            # within a second, and laid after it, the window was not there yet for them (each
            # then rebuilt a survey point from its key, up to 600 ms, beside the window's own)
            laid = self._lay_window_safely(version) if browsed else 0
            window = f"{laid} anchors laid before it in {_ms(started)} ms, " if laid else ""
            started = time.perf_counter()
            state, lineage = self._start_for(version)
            start, how, began = state.version, self._told.how, _ms(started)
            folding = time.perf_counter()
            self._fold(state, version, lineage, browsed)
            snapshot = state.snapshot()
            self._told.how = (
                f"{window}{how} at {start} in {began} ms, {version - start} records folded in {_ms(folding)} ms"
                + (f", {waited} ms waiting" if waited >= 1 else "")
            )
            # the next one may fold on from it; only the last few such cursors are kept
            self._remember(("a", version), _Item(lineage, state), evict=False)
            self._drop_cursors()
            self._remember(("s", version), _Item(lineage, snapshot))
            gc.freeze()
        return snapshot

    def how(self) -> str:
        """How the calling thread's last past ``snapshot`` came: cached, or from which start,
        each step's milliseconds (the UI's Server-Timing shows it)."""
        return str(getattr(self._told, "how", ""))

    def _cached(self, version: int) -> Snapshot | None:
        with self._changed:
            item = self._items.get(("s", version))
            if item is None:
                return None
            self._items.move_to_end(("s", version))
            assert isinstance(item.value, Snapshot)
            return item.value

    def _browsing(self, version: int) -> bool:
        return browsing(version, self._asked, ANCHOR_WINDOW * self.anchor_every)

    def _start_for(self, version: int) -> tuple[CacheState, int]:
        """The cheapest state at or below ``version`` to fold forward from, as one of our own."""
        best = self._best_anchor(version)
        surveyed = self.survey.below(version)
        checkpoint = self._newest_checkpoint(version)
        from_anchor = (version - best[0]) / FOLD_RATE if best is not None else float("inf")
        from_checkpoint = self._restore_seconds + (version - checkpoint) / FOLD_RATE
        if (
            surveyed is not None
            and (best is None or surveyed > best[0])
            and (version - surveyed) / FOLD_RATE <= from_checkpoint
        ):
            base = self._anchor_starting(surveyed)
            if base is not None:  # nearer than the point's key: fewer deltas to write
                self._told.how = f"survey point from the anchor at {base[0].version}"
                return self.survey.state_at(surveyed, base[0]), base[1]
            self._told.how = f"survey point from its key at {surveyed - surveyed % self.survey.spacing}"
            return self.survey.state_at(surveyed), SURVEY
        if best is not None and from_anchor <= from_checkpoint:
            anchor_version, item = best
            assert isinstance(item.value, CacheState)
            if anchor_version % self.anchor_every == 0:
                with self._changed:
                    if ("a", anchor_version) in self._items:
                        self._items.move_to_end(("a", anchor_version))  # in use: the last to go
                self._told.how = "anchor"
                return fork(item.value), item.lineage  # a grid anchor stays where it is
            with self._changed:
                self._items.pop(("a", anchor_version), None)  # a cursor moves on
            self._told.how = "cursor"
            return item.value, item.lineage
        self._told.how = "checkpoint"
        return self._restore(version)

    def _anchor_starting(self, point: int) -> tuple[CacheState, int] | None:
        """The newest anchor at a survey point between ``point``'s key and it (a window's, most
        often: a version a few thousand records above the window laid so far) and its lineage."""
        with self._changed:
            found = [(v, item) for (kind, v), item in self._items.items() if kind == "a" and v <= point]
        for _v, item in sorted(found, key=lambda pair: pair[0], reverse=True):
            if isinstance(item.value, CacheState) and self.survey.starts(item.value.version, point):
                return item.value, item.lineage
        return None

    def _best_anchor(self, version: int) -> tuple[int, _Item] | None:
        with self._changed:
            below = [(v, item) for (kind, v), item in self._items.items() if kind == "a" and v <= version]
        return max(below, key=lambda pair: pair[0], default=None)

    def _window_from(self, version: int) -> int | None:
        """Where a fold that lays the window before ``version`` starts: the newest anchor of the
        grid in the window, else the survey's point below the window; None when the window is
        laid up to ``version``'s step of the grid, or nothing in reach could start it."""
        reach = version - ANCHOR_WINDOW * self.anchor_every
        with self._changed:
            # (not at ``version``: the fold that answers it leaves a state there, a grid point or not)
            laid = [v for kind, v in self._items if kind == "a" and v % self.anchor_every == 0 and reach < v < version]
        if laid:
            newest = max(laid)
            return newest if version - newest > self.anchor_every else None
        lower = self.survey.below(max(reach, 0))  # a window that reaches below the log starts at its first point
        return lower if lower is not None else self.survey.below(version)

    # ------------------------------------------------------------------------- windows
    def _lay_window_safely(self, version: int) -> int:
        """``_lay_window``, whose failure only costs time: the version still folds without it."""
        try:
            return self._lay_window(version)
        except Exception as exc:
            LOG.warning("the UI could not lay anchors before version %s: %s", version, exc)
            return 0

    def _lay_window(self, version: int) -> int:
        """Lay the window's anchors from where ``_window_from`` says up to ``version``'s step of
        the grid (under the past lock, held by the request that asks for ``version``), and say
        how many. A step is the survey's delta written into a fork of the anchor before where
        the survey has the point (a few ms at 150,000 pods), else a fold of its records (20-90
        ms); the first is the survey's point below the window rebuilt from its key."""
        start = self._window_from(version)
        if start is None:  # laid already, or nothing in reach to start it
            return 0
        with self._changed:
            anchor = self._items.get(("a", start))
        if anchor is not None and isinstance(anchor.value, CacheState):
            state, lineage = fork(anchor.value), anchor.lineage
        else:
            state, lineage = self.survey.state_at(start), SURVEY
        lay_from = version - ANCHOR_WINDOW * self.anchor_every
        shared = False  # whether ``state`` is an anchor laid here (a fold must not write it)
        laid = 0
        while True:
            grid = state.version - state.version % self.anchor_every + self.anchor_every
            if grid >= version:  # the anchors before the version are laid (it has one of its own)
                return laid
            if self.survey.has(grid) and self.survey.starts(state.version, grid):
                # the survey's delta to the next grid point written into a fork: a few ms,
                # where a fold of the 1,024 records took 20-90 ms
                state, shared = self.survey.state_at(grid, state), False
            else:
                if shared:
                    state, shared = fork(state), False
                self._fold(state, grid, lineage, False, lay_from)
            if self._lays(grid, lay_from, True):
                self._remember(("a", grid), _Item(lineage, state), evict=False)
                shared, laid = True, laid + 1

    def _newest_checkpoint(self, version: int) -> int:
        listed_at, versions = self._checkpoints
        if time.monotonic() - listed_at > CHECKPOINTS_TTL_S:
            versions = [i.version for i in self.runner.store.list(self.runner.identity)]
            self._checkpoints = (time.monotonic(), versions)
        return max((v for v in versions if v <= version), default=0)

    def _restore(self, version: int) -> tuple[CacheState, int]:
        started = time.perf_counter()
        state = self.runner.restore(at_or_below=version)
        state.rendered = None
        forget_changes(state)
        # millions of objects that live on: the collector's full passes need not walk them (a pass
        # over two restored states pauses every request for seconds)
        gc.freeze()
        self._restore_seconds = time.perf_counter() - started
        self._restores += 1
        with self._changed:
            self._lineage += 1
            # another restored lineage shares no object with this one: keeping both would double the memory
            kept = (LIVE, SURVEY, self._lineage)
            for key in [k for k, item in self._items.items() if item.lineage not in kept]:
                del self._items[key]
            return state, self._lineage

    def _fold(self, state: CacheState, version: int, lineage: int, browsing: bool, lay_from: int | None = None) -> None:
        """Fold ``state`` forward to ``version``, laying anchors on the grid over the window
        before it (from ``lay_from``: a window folded a step at a time names its own) if
        ``browsing`` (see ``_browsing``: a fork costs the shards the fold copies after it, worth
        it only for the versions asked next), every COARSE-th grid point in any case, and
        recording which tasks each stretch of the grid wrote (``written``)."""
        if lay_from is None:
            lay_from = version - ANCHOR_WINDOW * self.anchor_every
        forget_changes(state)
        segment = self._tail(state.version)  # task uids written since the grid point before, None: unknown
        for item in self._entries(state.version, version, keep_from=lay_from):
            if type(item) is tuple:
                state.apply_object_at(*item)
            else:
                entry = cast(LogEntry, item)
                state.apply_at(entry.offset, entry.record)
            if state.version % self.anchor_every == 0:
                if segment is not None:
                    self._record_step(state.version - self.anchor_every, segment | state.tasks.changed)
                segment = _NOTHING
                forget_changes(state)
                if state.version < version and self._lays(state.version, lay_from, browsing):
                    self._remember(("a", state.version), _Item(lineage, fork(state)), evict=False)
        state.expect_offset(version)
        if segment is not None:
            self._record_tail(version, segment | state.tasks.changed)

    def _lays(self, point: int, lay_from: int, window: bool) -> bool:
        """Whether a fold passing grid ``point`` keeps an anchor there: none is laid yet, and the
        point is in the window (from ``lay_from``) when ``window``, or every COARSE-th point."""
        with self._changed:
            laid = ("a", point) in self._items
        return not laid and ((window and point >= lay_from) or point % (COARSE * self.anchor_every) == 0)

    # ----------------------------------------------------------------- what the folds wrote
    def written(self, a: int, b: int, most: int | None = None) -> set[str] | None:
        """A superset of the task uids written between versions ``a`` and ``b`` (either order),
        from what the folds recorded, else from the survey's deltas; None when neither covers the
        stretch, or when they are ``most`` or more (the union of a long stretch's deltas stops
        there). Facts about the log, the same in every lineage: figures of one version advance
        to another by them."""
        a, b = min(a, b), max(a, b)
        own = self._written(a, b)
        return own if own is not None else self.survey.written(a, b, most)

    def _written(self, a: int, b: int) -> set[str] | None:
        with self._changed:
            if a - a % self.anchor_every == b - b % self.anchor_every:
                tail_a, tail_b = self._tail(a), self._tail(b)
                return None if tail_a is None or tail_b is None else set(tail_a | tail_b)
            tail_b = self._tail(b)
            if tail_b is None:
                return None
            out = set(tail_b)
            for g in range(a - a % self.anchor_every, b - b % self.anchor_every, self.anchor_every):
                step = self._steps.get(g)
                if step is None:
                    return None
                out |= step
            return out

    def _tail(self, version: int) -> frozenset[str] | None:
        """The task uids written between the grid point at or below ``version`` and it."""
        if version % self.anchor_every == 0:
            return _NOTHING
        with self._changed:
            return self._tails.get(version)

    def _record_step(self, grid: int, keys: frozenset[str]) -> None:
        with self._changed:
            self._steps[grid] = keys
            self._steps.move_to_end(grid)
            while len(self._steps) > STEPS_KEPT:
                self._steps.popitem(last=False)

    def _record_tail(self, version: int, keys: frozenset[str]) -> None:
        if version % self.anchor_every == 0:
            return
        with self._changed:
            self._tails[version] = keys
            self._tails.move_to_end(version)
            while len(self._tails) > STEPS_KEPT:
                self._tails.popitem(last=False)

    def _entries(self, start: int, end: int, keep_from: int) -> Iterator[FoldItem]:
        """The log's records in [start, end): from the chunks kept, the others read from the
        broker with one consumer per run of missing chunks (a consumer's start costs a round
        trip or two). Whole chunks at or above ``keep_from`` are kept: a fold toward a nearby
        version reads the same records again, and the broker's round trips for them cost more
        than folding them."""
        live = self.live_version
        offset = start
        while offset < end:
            base = offset - offset % self.chunk
            kept = self._chunks.get(base)
            if kept is not None:
                self._chunks.move_to_end(base)
                yield from kept[offset - base : min(end, base + self.chunk) - base]
                offset = min(end, base + self.chunk)
                continue
            stop = base + self.chunk
            while stop < end and stop not in self._chunks:
                stop += self.chunk
            read_to = min(stop, live)  # whole chunks, but never beyond the log's end
            chunk: list[FoldItem] = []
            for batch in self._reader.fold_items(start=base, end=read_to):
                for item in batch:
                    at = item_offset(item)
                    if offset <= at < end:
                        yield item
                    chunk.append(item)
                    if len(chunk) == self.chunk:
                        if at + 1 > keep_from:
                            self._keep_chunk(at + 1 - self.chunk, chunk)
                        chunk = []
            if read_to <= offset:
                raise StrataError(f"the cache log ends at {read_to}, before offset {offset}")
            offset = read_to

    def _keep_chunk(self, first: int, entries: list[FoldItem]) -> None:
        self._chunks[first] = entries
        while len(self._chunks) > CHUNKS_KEPT:
            self._chunks.popitem(last=False)

    # ----------------------------------------------------------------------------- memory
    def _remember(self, key: tuple[str, int], item: _Item, evict: bool = True) -> None:
        with self._changed:
            self._items[key] = item
            self._items.move_to_end(key)
            if evict:
                self._evict()

    def _is_grid(self, key: tuple[str, int]) -> bool:
        return key[0] == "a" and key[1] % self.anchor_every == 0

    def _drop_cursors(self) -> None:
        """Keep the CURSORS_KEPT most recent anchors off the grid: each is worth only the next
        fold that starts from it, while piling them up would crowd the grid's anchors out of
        the budget (and a version with no anchor below it costs a restore)."""
        with self._changed:
            cursors = [k for k in reversed(self._items) if k[0] == "a" and not self._is_grid(k)]
            for key in cursors[CURSORS_KEPT:]:
                del self._items[key]

    def _evict(self) -> None:
        """Drop items until the rest fit the budget: snapshots first, then cursors, then the
        grid's anchors (an anchor gives back any version after it in a short fold), each kind
        least recently used first, never the newest item. Each item is charged what it holds
        beyond the live state and the items kept ahead of it (grid anchors first, then
        cursors, then snapshots, most recent first)."""
        newest = next(reversed(self._items))
        recent = list(reversed(self._items))
        order = (
            [k for k in recent if self._is_grid(k)]
            + [k for k in recent if k[0] == "a" and not self._is_grid(k)]
            + [k for k in recent if k[0] == "s"]
        )
        order.remove(newest)
        shared = shard_ids(self._live) if self._live is not None else set()
        total = self._items[newest].charge(shared)
        budget = self.budget_bytes - self.survey.bytes()
        for key in order:
            total += self._items[key].charge(shared)
            if total > budget:
                del self._items[key]

    def stats(self) -> TimelineStats:
        with self._changed:
            items = list(self._items.items())
            shared = shard_ids(self._live) if self._live is not None else set()
            size = sum(own_bytes(item.value, shared) for _, item in items)
        return TimelineStats(
            snapshots=sum(1 for (kind, _), _item in items if kind == "s"),
            anchors=sum(1 for (kind, _), _item in items if kind == "a"),
            bytes=size,
            restores=self._restores,
            survey=self.survey.stats(),
            lineages=sorted({item.lineage for _, item in items}),
        )

    def fast_versions(self) -> list[int]:
        """Versions a page answers from without a restore: cached snapshots and anchors."""
        with self._changed:
            return sorted({v for (_kind, v) in self._items} | set(self.survey.versions()))


class _IndexWrites:
    """The live fold's audit entries, written to the index in batches where it lacks them."""

    def __init__(self, runner: LogRunner, index: AuditIndex) -> None:
        self.runner = runner
        self.index = index
        self.pending: list[auditentries.Kept] = []
        self.subjects: list[tuple[str, ...]] = []
        self.written_at = time.monotonic()
        self.enabled = True

    def add(self, entry: auditentries.Kept, subjects: tuple[str, ...]) -> None:
        if self.enabled:
            self.pending.append(entry)
            self.subjects.append(subjects)

    def tend(self, version: int, idle: bool) -> None:
        now = time.monotonic()
        if not self.pending or not (len(self.pending) >= INDEX_BATCH or idle or now - self.written_at >= INDEX_SECONDS):
            return
        self.written_at = now
        try:
            self.index.write(self.runner.identity, Records.of(self.pending, self.subjects), upto=version)
        except Exception as exc:  # the database is away or locked: try again with the next batch
            LOG.warning("the audit index refused %d entries: %s", len(self.pending), exc)
            if len(self.pending) > INDEX_BACKLOG:
                LOG.error("the UI stops writing the audit index (%d entries waiting)", len(self.pending))
                self.pending, self.subjects, self.enabled = [], [], False
            return
        self.pending, self.subjects = [], []

"""Starting points over the whole history, so that no past version costs a checkpoint's restore.

The timeline lays anchors near the versions asked for; a version below all of them was a
checkpoint's restore (2-5 s at 150,000 pods) plus a fold of up to the checkpoints' distance
(100,000-400,000 records): 3-11 s. The survey folds the log once, in the background, from its
first record to its end when the UI started, and keeps a *point* every ``step``
records: what the state changed since the point before (``statedelta``, about 50 KB for 1,024
records at 150,000 pods), and every ``spacing`` records a *key*, a whole state (a fork of the
key before with the deltas between written into it: up to 7 MB, since most task shards change
between two keys). A version is then a fork of the key at or below its point, the deltas up to
the point written into it (each key once, some ms), and a fold of less than ``step`` records.
When the points pass their share of the budget, the keys thin out first (the spacing doubles,
every other key goes: a delta costs about a thirtieth of a record's fold per record it spans),
and once keys are ``KEY_RATIO`` steps apart the step doubles (pairs of deltas merged): the
points kept are as many as fit, evenly spread, whatever the history's length.

Once folded, the survey counts each key's figures (``derived.Figures``: tasks by status and sums
per job and queue), the first anew and each next one advanced from the one before: a version far
from every figures the pages keep then advances from its nearest key's by the tasks written in
between (10-80 ms at 150,000 pods, 16,384 to 131,072 records away) instead of a count of every
task (100-230 ms).

The survey gives way to requests: the interpreter is one, and a fold beside a request would
double the request's time. It waits while any is being answered.
"""

from __future__ import annotations

import gc
import logging
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass

from strata.errors import StrataError
from strata.log.cachelog import CacheLogReader
from strata.projector.fold.state import CacheState
from strata.projector.fold.statedelta import StateDelta, apply, take, track
from strata.projector.runner import LogRunner
from strata.schemas import LogRecord
from strata.ui.derived import Figures, queue_figures
from strata.ui.states import charge, forget_changes, fork, parts

LOG = logging.getLogger("strata.ui")
SURVEY_EVERY = 1024  # the closest step between points: a fold of this many records takes ~20 ms at 150,000 pods
KEYS_EVERY = 8  # steps between keys at first
KEY_RATIO = 128  # keys thin out until they are this many steps apart; then the step doubles
GATE_EVERY = 1024  # records between two looks at the requests being answered (and at stop)
JOB_FIGURES_BYTES = 700  # a job's figures (the object, its counts, two small sums), charged to the budget


@dataclass(frozen=True)
class SurveyStats:
    anchors: int  # keys: whole states
    spacing: int  # records between keys
    points: int  # versions a past fold can start from (a key's, or a key's with deltas written in)
    step: int  # records between points
    bytes: int
    reached: int
    done: bool


class Stopped(Exception):
    """The UI is stopping: the survey ends where it is."""


class Survey:
    def __init__(self, budget_bytes: int, every: int = SURVEY_EVERY) -> None:
        self.budget_bytes = budget_bytes
        self.step = max(1, every)
        self.spacing = self.step * KEYS_EVERY
        self.gate_every = min(GATE_EVERY, self.step)
        self._lock = threading.Lock()
        # version -> (a whole state, its parts for ``charge``), in version order
        self._keys: dict[int, tuple[CacheState, tuple[list[tuple[int, int]], int]]] = {}
        self._deltas: dict[int, StateDelta] = {}  # point -> the change from the point ``step`` before
        self._carry: StateDelta | None = None  # a delta whose point a doubled step dropped, merged into the next
        # the task uids written after the newest point, up to where the survey ended (``finish``)
        self._end: tuple[int, frozenset[str]] | None = None
        self._figures: dict[int, Figures] = {}  # key -> its figures (``count_keys``)
        self._bytes = 0
        self._delta_bytes = 0
        self._figure_bytes = 0
        self.reached = 0  # the version the survey's fold has come to
        self.done = False

    @property
    def enabled(self) -> bool:
        return self.budget_bytes > 0

    def below(self, version: int) -> int | None:
        """The newest point at or below ``version``."""
        with self._lock:
            if not self._keys:
                return None
            newest = max(self._deltas, default=0)
            point = min(version - version % self.step, newest)
            return point if point >= 0 else None

    def state_at(self, point: int, base: CacheState | None = None) -> CacheState:
        """A state of one's own at ``point`` (from ``below``): a fork of the key at or below it,
        the deltas since written into it; or of ``base``, when it is a state at a point between
        that key and ``point`` (``starts``): the fold is deterministic, so the deltas bring a
        state of any lineage at that version to the same content."""
        with self._lock:  # the survey's thinning may merge the deltas meanwhile
            if base is None or not self._starts(base.version, point):
                base = self._keys[point - point % self.spacing][0]
            deltas = self._between(base.version, point)
        # Written outside the lock (tens of ms): a request asks ``below`` meanwhile. Forking only
        # reads the key (it marks the key's shards shared, as any fork of it does).
        state = fork(base)
        apply(state, deltas)
        forget_changes(state)
        return state

    def starts(self, version: int, point: int) -> bool:
        """Whether a state at ``version`` may start ``point``'s rebuild instead of its key: a
        point itself, from the key on, at or below ``point``."""
        with self._lock:
            return self._starts(version, point)

    def has(self, point: int) -> bool:
        """Whether ``point`` is one of the survey's points (a state there is ``state_at`` it)."""
        with self._lock:
            return point % self.step == 0 and point in self._deltas

    def _starts(self, version: int, point: int) -> bool:
        key = point - point % self.spacing
        return (
            key <= version <= point and version % self.step == 0 and (version in self._deltas or version in self._keys)
        )

    def _between(self, start: int, point: int) -> list[StateDelta]:
        """The deltas after ``start`` up to ``point``, oldest first."""
        return [self._deltas[v] for v in range(start + self.step, point + 1, self.step)]

    def written(self, a: int, b: int, most: int | None = None) -> set[str] | None:
        """A superset of the task uids written between versions ``a`` and ``b`` (either order),
        from the deltas and, past the newest point, what the survey wrote up to its end (None
        beyond that, or once they are ``most`` or more)."""
        a, b = min(a, b), max(a, b)
        with self._lock:
            first = a - a % self.step + self.step
            last = b if b % self.step == 0 else b - b % self.step + self.step
            newest = max(self._deltas, default=0)
            out: set[str] = set()
            if last > newest:
                if self._end is None or b > self._end[0]:
                    return None
                out.update(self._end[1])
                last = newest
            for point in range(first, last + 1, self.step):
                out.update(self._deltas[point].writes.get("tasks", ()))
                if most is not None and len(out) >= most:
                    return None
            return out

    def figures_near(self, version: int) -> list[Figures]:
        """The figures counted at the keys just below and just above ``version``."""
        with self._lock:
            below = max((v for v in self._figures if v <= version), default=None)
            above = min((v for v in self._figures if v > version), default=None)
            return [self._figures[v] for v in (below, above) if v is not None]

    def versions(self) -> list[int]:
        with self._lock:
            return sorted({0, *self._keys, *self._deltas})

    def bytes(self) -> int:
        return self._bytes

    def stats(self) -> SurveyStats:
        with self._lock:
            points = len({0, *self._deltas}) if self._keys else 0
            return SurveyStats(len(self._keys), self.spacing, points, self.step, self._bytes, self.reached, self.done)

    def run(self, runner: LogRunner, end: int, gate: Callable[[], None]) -> None:
        """Fold the log from its first record to ``end``, laying points; ``gate`` is called
        every ``gate_every`` records (it waits for the requests, and raises ``Stopped``)."""
        if not self.enabled or end <= 0:
            self.done = True
            return
        state = runner.restore(at_or_below=0)
        self.begin(state)

        def after() -> None:
            version = state.version
            if version % self.gate_every == 0:
                self.reached = version
                gate()
                if version <= end:
                    self.lay(state)

        def apply_record(offset: int, record: LogRecord) -> None:
            state.apply_at(offset, record)
            after()

        def apply_object(offset: int, op: str, raw: bytes) -> None:
            state.apply_object_at(offset, op, raw)
            after()

        try:
            CacheLogReader(runner.settings).feed(apply_record, apply_object, start=state.version, end=end)
            state.expect_offset(end)
        except Stopped:
            return
        except StrataError as exc:  # the log's first records are gone (retention), or the broker is away
            LOG.warning("the UI's survey of the history stopped at version %d: %s", state.version, exc)
            return
        self.finish(state)
        self.reached = end
        try:
            self.count_keys(gate)
        except Stopped:
            return
        self.done = True
        LOG.info(
            "the UI's survey of the history: %d keys %d records apart, a point every %d records",
            len(self._keys),
            self.spacing,
            self.step,
        )

    def begin(self, state: CacheState) -> None:
        """The first key: ``state`` as the survey's fold starts (at version 0), which from now on
        remembers what it changes."""
        assert state.version == 0, state.version
        key = fork(state)
        track(state)
        forget_changes(state)
        with self._lock:
            self._keys[0] = (key, parts(key))
            self._bytes = self._charged()

    def lay(self, state: CacheState) -> None:
        """Keep what ``state`` changed since the last point if its version is on the step (and a
        key if on the spacing), thinning the points to the budget."""
        if state.version % self.step or state.version == 0:
            return
        delta = take(state)
        if self._carry is not None:
            delta, self._carry = self._carry.then(delta), None
        with self._lock:
            self._deltas[state.version] = delta
            self._delta_bytes += delta.nbytes()
            if state.version % self.spacing == 0:
                self._key(state.version)
            self._bytes = self._charged()
            while self._bytes > self.budget_bytes and (len(self._keys) > 1 or len(self._deltas) > 1):
                self._thin()
                self._bytes = self._charged()
        gc.freeze()  # kept until thinned: the collector's full passes need not walk it

    def finish(self, state: CacheState) -> None:
        """Where the survey's fold ends (off the step, most often): keep which tasks it wrote
        after the newest point, so that figures at the UI's first live version advance to the
        versions below by them (a UI started on a log that does not move, an audit after the
        fact, would otherwise count every past version's figures anew)."""
        delta = take(state)
        if self._carry is not None:
            delta, self._carry = self._carry.then(delta), None
        with self._lock:
            self._end = (state.version, frozenset(delta.writes.get("tasks", ())))

    def count_keys(self, gate: Callable[[], None] = lambda: None) -> None:
        """Each key's figures and queue figures, in version order: the first counted, each next
        advanced from the one before by the tasks written between them (a union of the deltas),
        as long as they fit the budget beside the points (then the rest go without)."""
        before: Figures | None = None
        for version in sorted(self._keys):
            gate()
            with self._lock:  # taking a snapshot marks the key's shards shared, as a fork does
                snapshot = self._keys[version][0].snapshot()
            written = self.written(before.version, version) if before is not None else None
            if before is not None and written is not None:
                figures = before.advance(snapshot, written)
            else:
                figures = Figures.of(snapshot)
            queue_figures(snapshot, figures)  # kept in its memo: a far version's advance from them too
            size = sys.getsizeof(figures.jobs) + JOB_FIGURES_BYTES * _new_jobs(figures, before)
            with self._lock:
                if self._bytes + size > self.budget_bytes:
                    LOG.info("the UI's survey keeps figures at %d of its %d keys", len(self._figures), len(self._keys))
                    return
                self._figures[version] = figures
                self._figure_bytes += size
                self._bytes = self._charged()
            before = figures

    def _key(self, version: int) -> None:
        before = max(self._keys)
        key = fork(self._keys[before][0])
        apply(key, self._between(before, version))
        forget_changes(key)
        key.compact()
        self._keys[version] = (key, parts(key))

    def _thin(self) -> None:
        """Every other key, or once keys are KEY_RATIO steps apart, every other point."""
        if self.spacing < KEY_RATIO * self.step and len(self._keys) > 1:
            self.spacing *= 2
            self._keys = {v: k for v, k in self._keys.items() if v % self.spacing == 0}
            return
        self.step *= 2
        self.spacing = max(self.spacing, self.step)
        merged: dict[int, StateDelta] = {}
        for v, delta in self._deltas.items():
            if v % self.step == 0:
                before = self._deltas.get(v - self.step // 2)
                merged[v] = delta if before is None else before.then(delta)
        newest = max(self._deltas)
        if newest % self.step:  # its pair is still to come: it goes into the next delta
            self._carry = self._deltas[newest]
        self._deltas = merged
        self._delta_bytes = sum(d.nbytes() for d in merged.values())

    def _charged(self) -> int:
        """The keys' dict structure, each counted once however many keys share it, the deltas'
        and the keys' figures'."""
        shared: set[int] = set()
        keys = sum(charge(key_parts, shared) for _, key_parts in self._keys.values())
        return self._delta_bytes + self._figure_bytes + keys


def _new_jobs(figures: Figures, before: Figures | None) -> int:
    """How many of ``figures``' job figures are not shared with ``before``'s."""
    if before is None:
        return len(figures.jobs)
    old = before.jobs
    return sum(1 for job, f in figures.jobs.items() if old.get(job) is not f)

"""Anchors over the whole history, so that no past version costs a checkpoint's restore.

The timeline lays anchors near the versions asked for; a version below all of them was a
checkpoint's restore (2-5 s at 150,000 pods) plus a fold of up to the checkpoints' distance
(100,000-400,000 records): 3-11 s. The survey folds the log once, in the background, from its
first record to the version the live state was restored at, and keeps a fork every ``spacing``
records. Anchors far apart share few shards (most tasks change between them), so each costs
about a whole state's dict structure (up to 24 MB at 150,000 pods); when the anchors pass their
share of the budget the spacing doubles and every other anchor goes (thinning), so the anchors
kept are as many as fit, evenly spread, whatever the history's length.

The survey gives way to requests: the interpreter is one, and a fold beside a request would
double the request's time. It waits while any is being answered.
"""

from __future__ import annotations

import gc
import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass

from strata.log.cachelog import CacheLogReader
from strata.log.errors import StrataError
from strata.projector.runner import LogRunner
from strata.projector.state import CacheState
from strata.schemas import LogRecord
from strata.ui.states import charge, forget_changes, fork, parts

LOG = logging.getLogger("strata.ui")
SURVEY_EVERY = 8192  # the closest spacing: a fold of this many records takes ~150 ms at 150,000 pods
GATE_EVERY = 1024  # records between two looks at the requests being answered (and at stop)


@dataclass(frozen=True)
class SurveyStats:
    anchors: int
    spacing: int
    bytes: int
    reached: int
    done: bool


class Stopped(Exception):
    """The UI is stopping: the survey ends where it is."""


class Survey:
    def __init__(self, budget_bytes: int, every: int = SURVEY_EVERY) -> None:
        self.budget_bytes = budget_bytes
        self.spacing = max(1, every)
        self.gate_every = min(GATE_EVERY, self.spacing)
        self._lock = threading.Lock()
        # version -> (the anchor, its parts for ``charge``), in version order
        self._anchors: dict[int, tuple[CacheState, tuple[list[tuple[int, int]], int]]] = {}
        self._bytes = 0
        self.reached = 0  # the version the survey's fold has come to
        self.done = False

    @property
    def enabled(self) -> bool:
        return self.budget_bytes > 0

    def below(self, version: int) -> tuple[int, CacheState] | None:
        """The newest anchor at or below ``version`` (to fork, never to fold itself)."""
        with self._lock:
            best = max((v for v in self._anchors if v <= version), default=None)
            return None if best is None else (best, self._anchors[best][0])

    def versions(self) -> list[int]:
        with self._lock:
            return list(self._anchors)

    def bytes(self) -> int:
        return self._bytes

    def stats(self) -> SurveyStats:
        with self._lock:
            return SurveyStats(len(self._anchors), self.spacing, self._bytes, self.reached, self.done)

    def run(self, runner: LogRunner, end: int, gate: Callable[[], None]) -> None:
        """Fold the log from its first record to ``end``, laying anchors; ``gate`` is called
        every ``gate_every`` records (it waits for the requests, and raises ``Stopped``)."""
        if not self.enabled or end <= 0:
            self.done = True
            return
        state = runner.restore(at_or_below=0)
        self.lay(state)  # the versions before the first spacing's end: an empty state, or nearly

        def after() -> None:
            version = state.version
            if version % self.gate_every == 0:
                self.reached = version
                gate()
                if version < end:
                    self.lay(state)

        def apply(offset: int, record: LogRecord) -> None:
            state.apply_at(offset, record)
            after()

        def apply_object(offset: int, op: str, raw: bytes) -> None:
            state.apply_object_at(offset, op, raw)
            after()

        try:
            CacheLogReader(runner.settings).feed(apply, apply_object, start=state.version, end=end)
            state.expect_offset(end)
        except Stopped:
            return
        except StrataError as exc:  # the log's first records are gone (retention), or the broker is away
            LOG.warning("the UI's survey of the history stopped at version %d: %s", state.version, exc)
            return
        self.reached = end
        self.done = True
        LOG.info("the UI's survey of the history: %d anchors, %d records apart", len(self._anchors), self.spacing)

    def lay(self, state: CacheState) -> None:
        """Keep a fork of ``state`` if its version is on the spacing, thinning the anchors to the budget."""
        if state.version % self.spacing:
            return
        forget_changes(state)
        anchor = fork(state)
        with self._lock:
            self._anchors[state.version] = (anchor, parts(anchor))
            self._bytes = self._charged()
            while self._bytes > self.budget_bytes and len(self._anchors) > 1:
                self.spacing *= 2
                self._anchors = {v: a for v, a in self._anchors.items() if v % self.spacing == 0}
                self._bytes = self._charged()
        gc.freeze()  # kept until thinned: the collector's full passes need not walk it

    def _charged(self) -> int:
        """The anchors' dict structure, each counted once however many anchors share it."""
        shared: set[int] = set()
        return sum(charge(anchor_parts, shared) for _, anchor_parts in self._anchors.values())

"""The log runner: the fold driven by the cache log, with checkpoints (an edge, like ingest).

A runner restores the newest checkpoint of its log (at or below a target version), reads the
tail, and either stops at a given offset (`strata snapshot`) or follows the log and writes a
checkpoint every N records or T seconds (`strata project`), through a forked writer
(``writer``) so that the fold never waits for one. The clock here only decides *when* to
checkpoint; what a checkpoint holds depends on the records alone.
"""

from __future__ import annotations

import gc
import logging
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import datetime

from confluent_kafka import KafkaException
from prometheus_client import REGISTRY, Counter, Gauge, Histogram
from prometheus_client.core import CounterMetricFamily, Metric

from strata.health import Health
from strata.log import readahead
from strata.log.cachelog import BIND_FIELDS, SUCCEEDED_FIELDS, CacheLogReader, LogEntry, Publisher
from strata.log.config import Settings
from strata.log.digests import DigestReporter
from strata.log.metrics import FOLLOWING
from strata.projector.auditindex.store import AuditIndex
from strata.projector.auditindex.writer import BACKLOG, AuditFeed, value_of
from strata.projector.checkpoints.interface import CheckpointInfo, CheckpointStore, LogIdentity
from strata.projector.checkpoints.writer import Job, Stored, Writer, write_checkpoint
from strata.projector.fold import auditentries, statecodec
from strata.projector.fold.kinds import KIND_NAMES
from strata.projector.fold.snapshot import Snapshot
from strata.projector.fold.state import APPLIED, CacheState, FoldConfig, Outcome
from strata.projector.fold.statedigest import SETTLE_EVERY
from strata.projector.gctune import FREEZE_EVERY, freeze_kept
from strata.projector.release import Release
from strata.schemas import WatchEvent

LOG = logging.getLogger("strata.projector")
# A follower looks at its writer (a waitpid) and at what falls due every TEND_EVERY records, not
# after each one: per record that bookkeeping cost about a tenth of the fold (a system call while
# the writer child runs, the clocks, the checks). A checkpoint or batch then starts at most
# TEND_EVERY - 1 records later. The digest's slices and reports keep their exact versions (the
# next version either falls due at is computed ahead, ``_Following.due_at``: the records before
# it cost the loop one comparison). A follower that checkpoints more often than
# CHECK_ALWAYS_BELOW records (tests, demos) still checks after each record.
TEND_EVERY = 64
CHECK_ALWAYS_BELOW = 100 * TEND_EVERY
# A checkpoint costs the writer seconds of CPU (render, encode, store) on a machine whose other
# cores also serve the fold's broker: the next one is not due before the writer has been idle
# CHECKPOINT_REST times as long as the last one took, so checkpoints take at most a quarter of it
# (a catch-up at 40k records/s would otherwise checkpoint back to back).
CHECKPOINT_REST = 3.0
LONG_PAUSE_S = 0.05  # a pause of the fold longer than this is logged (INFO) step by step
DRAIN_S = 20.0  # on stop, the longest the fold waits for the audit index's writer (Kubernetes gives 30 s)
assert FREEZE_EVERY % SETTLE_EVERY == 0, "tend's full pass must come at every version the follower freezes at"
ALL_KINDS = KIND_NAMES  # what a follower waits to see SYNCED before it is ready, unless told fewer

CHECKPOINTS = Counter("strata_checkpoints", "Checkpoints written by this projector.")
CHECKPOINT_SECONDS = Histogram(
    "strata_checkpoint_duration_seconds",
    "From forking a checkpoint's writer until it is stored.",
    buckets=(0.1, 0.25, 0.5, 1, 2.5, 5, 10, 20, 40, 80),
)
CHECKPOINT_BYTES = Gauge("strata_checkpoint_bytes", "Size of the newest checkpoint's serialized state.")
CHECKPOINT_VERSION = Gauge("strata_checkpoint_version", "Version of the newest checkpoint.")
CHECKPOINT_AGE = Gauge("strata_checkpoint_age_seconds", "Seconds since the newest checkpoint was written.")
AUDIT_LAG = Gauge("strata_audit_index_lag_records", "Records applied by the fold that the audit index lacks.")
# The steps of the fold's bookkeeping between records (``_Following.tend``), in the order it takes them.
PAUSE_STEPS = ("collect", "checkpoint", "audit", "release", "settle", "freeze", "report")


class FoldPauses:
    """How long the fold has stood still between records in all, by step, exported when scraped:
    the fold only adds to a dict (a labelled Counter would take a lock per step, as
    ``strata.log.metrics.Following`` says). One per process (``FOLD_PAUSES``)."""

    def __init__(self) -> None:
        self.seconds = dict.fromkeys(PAUSE_STEPS, 0.0)

    def collect(self) -> Iterator[Metric]:
        paused = CounterMetricFamily(
            "strata_fold_paused_seconds",
            "Time the fold stood still between records for its bookkeeping, by step.",
            labels=["step"],
        )
        for step, seconds in self.seconds.items():
            paused.add_metric([step], seconds)
        yield paused


FOLD_PAUSES = FoldPauses()
REGISTRY.register(FOLD_PAUSES)


@dataclass
class Progress:
    version: int
    end: int  # the log's end as last seen
    checkpoints: int = 0
    bad: int = 0
    longest_pause_s: float = 0.0  # the longest the fold stood still for bookkeeping between records
    longest_digest_s: float = 0.0  # the longest a state digest report took (part of a pause)
    writer_waits_s: float = 0.0  # how long the fold waited in all for the audit index's writer
    stop_s: float = 0.0  # how long the stop took: the final checkpoint, the audit index's drain
    paused_s: dict[str, float] = field(default_factory=lambda: dict.fromkeys(PAUSE_STEPS, 0.0))  # in all, by step

    @property
    def lag(self) -> int:
        return max(0, self.end - self.version)

    def pause(self, seconds: float, steps: Sequence[tuple[str, float]] = ()) -> None:
        self.longest_pause_s = max(self.longest_pause_s, seconds)
        mine, everyone = self.paused_s, FOLD_PAUSES.seconds
        for step, took in steps:
            mine[step] += took
            everyone[step] += took


class LogRunner:
    def __init__(self, settings: Settings, store: CheckpointStore, fold: FoldConfig, quarantine: bool = False) -> None:
        self.settings = settings
        self.store = store
        self.fold = fold
        self.reader = CacheLogReader(settings, quarantine=Publisher(settings) if quarantine else None)
        self._identity: LogIdentity | None = None

    @property
    def identity(self) -> LogIdentity:
        if self._identity is None:
            self._identity = LogIdentity(self.reader.topic, self.reader.cluster_id(), self.fold.identity)
        return self._identity

    def _end_or(self, last: int) -> int:
        """The log's end for a progress report: as the follower's consumer last heard it (asking
        the broker anew would stop the fold for a round trip), else asked; while the brokers are
        away, the last one seen (the consumer reconnects by itself; a report is no reason to stop)."""
        followed = self.reader.followed_end()
        if followed is not None:
            return followed
        try:
            return self.reader.end_offset()
        except KafkaException as exc:
            LOG.warning("the log's end is unknown for now: %s", _reason(exc))
            return last

    def restore(self, at_or_below: int | None = None) -> CacheState:
        """The newest checkpointed state at or below ``at_or_below``, or an empty state."""
        checkpoint = self.store.latest(self.identity, at_or_below)
        if checkpoint is None:
            return CacheState(self.fold)
        return statecodec.decode(checkpoint.state)

    def state_at(self, end: int) -> CacheState:
        """The state after records 0..end-1: a checkpoint at or below ``end`` plus the tail."""
        state = self.restore(at_or_below=end)
        readahead.feed(
            self.reader,
            state.apply_at,
            state.apply_object_at,
            start=state.version,
            end=end,
            apply_bind=state.bind_at,
            apply_succeeded=state.succeeded_at,
        )
        state.expect_offset(end)
        return state

    def _end_at_start(self, stop: threading.Event) -> int:
        """The log's end as a follower starts. A follower outlives the brokers' absences: right
        after a broker's loss its partitions' leaders are elected again, which can take longer
        than one ask's 10 s, and a follower started then asks again instead of ending (it is
        not ready meanwhile). A bootstrap that answers nothing has failed before this, on the
        log's identity."""
        while True:
            try:
                return self.reader.end_offset()
            except KafkaException as exc:
                if stop.is_set():
                    raise
                LOG.warning("the log's end is unknown for now, asking again: %s", _reason(exc))
                stop.wait(1.0)

    def checkpoint(self, state: CacheState) -> CheckpointInfo:
        """Write a checkpoint of ``state`` here and now (``follow`` has its writer do it)."""
        return write_checkpoint(self.store, self.identity, state)

    def follow(
        self,
        stop: threading.Event,
        every_records: int = 100_000,
        every_seconds: float = 60.0,
        report: Callable[[Progress], None] = lambda p: None,
        report_seconds: float = 5.0,
        audit_index: AuditIndex | None = None,
        digests: DigestReporter | None = None,
        health: Health | None = None,
        kinds: Sequence[str] = ALL_KINDS,
        on_request: SnapshotOnRequest | None = None,
        until: int | None = None,
    ) -> CacheState:
        """Apply records as they arrive until ``stop`` is set, or (with ``until``) the state's
        version reaches ``until``; checkpoint on the way and at the end.

        Checkpoints are written by a forked child (``writer.Writer``) and the audit index by a
        writer process (``auditindex.writer``) while the fold goes on; a projector whose index lags its
        checkpoints starts from an older one.
        ``health`` is ready once the checkpoint is restored, the log's end as of the start is
        applied and every one of ``kinds`` is SYNCED.
        """
        end = self.reader.end_offset() if until is not None else self._end_at_start(stop)
        restored: list[CacheState] = []
        if health is not None:
            health.require(lambda: sync_reason(restored[0] if restored else None, end, kinds))
        indexed = audit_index.indexed_to(self.identity) if audit_index else None
        release = Release()  # what the fold lets go of, a few parts a pause
        # started first: its interpreter starts while the checkpoint is restored
        feed = (
            _feed(audit_index, self.identity, indexed, release)
            if audit_index is not None and indexed is not None
            else None
        )
        try:
            LOG.info("restoring the newest checkpoint")
            state = self.restore(at_or_below=indexed)
            LOG.info("restored version %d", state.version)
            restored.append(state)
            gc.freeze()  # the restored state lives on: the collector's full passes need not walk it
            progress = Progress(state.version, end)
            FOLLOWING.end, FOLLOWING.version = end, state.version
            run = _Following(
                self, state, feed, audit_index, digests, progress, every_records, every_seconds, release, until
            )
            if until is not None and state.version >= until:
                stop.set()
            self._loop(run, stop, report, report_seconds, health, on_request)
            stopping = time.monotonic()
            run.finish()
            progress.stop_s = time.monotonic() - stopping
            if digests is not None:
                digests.drain()
            progress.end = max(progress.end, state.version)
            report(progress)
            return state
        finally:
            if feed is not None:
                feed.close()  # after an error: what it has not stored is left for the next fold

    def _loop(
        self,
        run: _Following,
        stop: threading.Event,
        report: Callable[[Progress], None],
        report_seconds: float,
        health: Health | None,
        on_request: SnapshotOnRequest | None,
    ) -> None:
        """Each record as it arrives, and between records the bookkeeping, until ``stop``."""
        state, progress = run.state, run.progress
        last_report = last_end = time.monotonic()
        idle_at = -1

        def between(idle: bool) -> None:
            nonlocal last_report, last_end
            now = time.monotonic()
            run.tend(now, idle)
            if run.until is not None and state.version >= run.until:
                stop.set()  # the rest of the batch is folded, then the loop ends
            if on_request is not None:
                on_request.tend(state)
            if now - last_end >= 1.0:
                progress.end = FOLLOWING.end = max(self._end_or(progress.end), state.version)
                last_end = now
                if health is not None:
                    health.beat()
            if now - last_report >= report_seconds:
                report(progress)
                last_report = now

        watched, bound, succeeded = run.handlers(between)

        def entered(entry: LogEntry | None) -> None:
            nonlocal idle_at
            if entry is not None:
                run.apply(entry)
                if state.version < run.due_at:
                    return
            elif idle_at != state.version:
                idle_at = state.version
                LOG.info("idle at version %d", state.version)
            between(entry is None)

        shortcuts = ((*BIND_FIELDS, bound), (*SUCCEEDED_FIELDS, succeeded))
        readahead.follow_feed(self.reader, state.version, stop, watched, entered, shortcuts=shortcuts, end=progress.end)


class SnapshotOnRequest:
    """The fold's snapshot handed to another thread (a scrape) when it asks.

    A snapshot is O(1) to take, but it freezes the state's shards: the fold's next writes copy
    the shards they touch (tens of ms at 150,000 pods). So the fold takes one only when asked,
    between records, and the asker waits at most ``timeout_s`` (else it gets the previous one).
    """

    def __init__(self, timeout_s: float = 2.0) -> None:
        self.timeout_s = timeout_s
        self.snapshot: Snapshot | None = None
        self._wanted = False
        self._given = threading.Condition()

    def request(self) -> Snapshot | None:
        with self._given:
            self._wanted = True
            self._given.wait_for(lambda: not self._wanted, self.timeout_s)
            return self.snapshot

    def tend(self, state: CacheState) -> None:
        if self._wanted:  # read without the lock: a request seen one pass late costs nothing
            with self._given:
                self.snapshot, self._wanted = state.snapshot(), False
                self._given.notify_all()


def _checkpoint_stored(infos: Sequence[CheckpointInfo]) -> None:
    """Export the newest checkpoint's version, size and age (none yet: age 0)."""
    if infos:
        newest = max(infos, key=lambda i: i.version)
        _export_checkpoint(Stored(newest.version, newest.size, newest.created_at))


def _export_checkpoint(stored: Stored) -> None:
    CHECKPOINT_BYTES.set(stored.size)
    CHECKPOINT_VERSION.set(stored.version)
    written = datetime.fromisoformat(stored.created_at).timestamp()
    CHECKPOINT_AGE.set_function(lambda: max(0.0, time.time() - written))


def sync_reason(state: CacheState | None, end: int, kinds: Sequence[str]) -> str | None:
    """Why a follower of the log is not ready yet, or None once it is: restored, caught up with
    the log's end as of its start, every kind SYNCED. A replica must never schedule from a
    half-built cache (nor a projector answer for one)."""
    if state is None:
        return "restoring the newest checkpoint"
    if state.version < end:
        return f"catching up: version {state.version} of the log's end {end} at start"
    missing = sorted(set(kinds) - state.synced)
    if missing:
        return f"waiting for {', '.join(missing)} to be SYNCED"
    return None


def _feed(index: AuditIndex, log: LogIdentity, indexed: int, release: Release) -> AuditFeed:
    return AuditFeed(index.engine.url.render_as_string(hide_password=False), log, indexed, release)


def _ready(state: CacheState) -> bool:
    if state.hashes.ready(state):
        return True
    LOG.info("no digest at version %d: the restored state is still being hashed", state.version)
    return False


class _Pause:
    """The steps of one pause of the fold, each timed, less what it waited for the audit's writer
    (``waited``, counted apart as ``Progress.writer_waits_s``)."""

    def __init__(self) -> None:
        self.started = self.at = time.perf_counter()
        self.waited = 0.0
        self.steps: list[tuple[str, float]] = []

    def step(self, name: str) -> None:
        """The step ``name`` ends now."""
        now = time.perf_counter() - self.waited
        self.steps.append((name, now - self.at))
        self.at = now

    @property
    def seconds(self) -> float:
        return self.at - self.started

    def __str__(self) -> str:
        return ", ".join(f"{name} {seconds * 1000:.1f} ms" for name, seconds in self.steps)


class _Following:
    """One follow of the log: the state, the audit index's feed, the checkpoint writer child."""

    def __init__(
        self,
        runner: LogRunner,
        state: CacheState,
        feed: AuditFeed | None,
        audit_index: AuditIndex | None,
        digests: DigestReporter | None,
        progress: Progress,
        every_records: int,
        every_seconds: float,
        release: Release,
        until: int | None = None,
    ) -> None:
        self.runner = runner
        self.state = state
        self.feed = feed
        self.keep = feed.adder() if feed is not None else None
        self.digests = digests
        self.progress = progress
        self.every_records = every_records
        self.every_seconds = every_seconds
        self.tend_mask = TEND_EVERY - 1 if every_records >= CHECK_ALWAYS_BELOW else 0
        self.until = until  # the version to stop at (``follow``'s)
        self.due_at = self._next_due(state.version)  # the loop skips the bookkeeping before this version
        self.release = release  # what the fold lets go of (the feed's frames too), a few parts a pause
        self.writer = Writer(runner.store, runner.identity, audit_index, self.release)
        self.restored = state.version
        self.requested = state.version  # the version of the newest checkpoint handed to the writer
        self.requested_at = time.monotonic()
        self.rested_at = 0.0  # when the next checkpoint may start (CHECKPOINT_REST)
        AUDIT_LAG.set_function(lambda: max(0, self.state.version - feed.indexed) if feed is not None else 0)
        _checkpoint_stored(runner.store.list(runner.identity))

    def apply(self, entry: LogEntry) -> None:
        """Fold one entry and hand it to the audit index's feed."""
        state = self.state
        record = entry.record
        keep = self.keep
        if keep is None:
            outcome = state.apply_at(entry.offset, record)
        else:
            ctx = None if type(record) is WatchEvent else auditentries.context(state, record)
            outcome = state.apply_at(entry.offset, record)
            value = entry.value if type(record) is WatchEvent and entry.value else value_of(entry)
            keep(
                entry.offset, entry.timestamp_ms, value, outcome, ctx, auditentries.pod_refs(record, state.last_object)
            )
        if outcome.result == "bad":
            self.progress.bad += 1
        FOLLOWING.applied_entry(entry.offset, entry.timestamp_ms, record)
        self.progress.version = state.version

    def handlers(self, between: Callable[[bool], None]) -> tuple[Callable[..., None], ...]:
        """``follow_feed``'s callbacks: for a WatchEvent read as its kind, op and object, a BIND
        as its pod and node, a BIND_SUCCEEDED as its pod. Each folds its record (none is built),
        keeps it for the audit index (a scheduler record with its pod's context, taken first
        as ``apply`` takes it), counts it, and calls ``between`` at the versions ``due_at``
        names. They run for every record: what they use is bound here once, not looked up per
        call, and a WatchEvent of a kind but a pod skips ``watch_refs`` (it has none)."""
        state, progress, keep = self.state, self.progress, self.keep
        apply_object_at, applied = state.apply_object_at, FOLLOWING.applied_watch
        pod_context, watch_refs = auditentries.pod_context, auditentries.watch_refs

        def watched(offset: int, stamp: int, value: bytes, kind: str, op: str, raw: bytes) -> None:
            outcome = apply_object_at(offset, op, raw)
            if keep is not None:
                refs = watch_refs(kind, state.last_object) if kind == "Pod" else None
                keep(offset, stamp, value, outcome, None, refs)
            if outcome is not APPLIED and outcome.result == "bad":
                progress.bad += 1
            applied(offset, stamp, op, kind)
            progress.version = state.version
            if state.version >= self.due_at:
                between(False)

        def named(type_: str, fold: Callable[..., Outcome]) -> Callable[..., None]:
            def apply(offset: int, stamp: int, value: bytes, pod: str, *rest: str) -> None:
                if keep is None:
                    fold(offset, pod, *rest)
                else:
                    ctx = pod_context(state, pod)
                    keep(offset, stamp, value, fold(offset, pod, *rest), ctx, None)
                applied(offset, stamp, type_, "Pod")
                progress.version = state.version
                if state.version >= self.due_at:
                    between(False)

            return apply

        return watched, named("BIND", state.bind_at), named("BIND_SUCCEEDED", state.succeeded_at)

    def _next_due(self, version: int) -> int:
        """The first version after ``version`` at which ``tend`` has anything to do (the next
        multiple of TEND_EVERY or SETTLE_EVERY, the next digest report, the version to stop
        at): the loop calls it only then, or when the log is idle, so the records between cost
        no call, no clock."""
        if not self.tend_mask:
            return version + 1
        due = min(version - version % every + every for every in (TEND_EVERY, SETTLE_EVERY))
        if self.until is not None and version < self.until:
            due = min(due, self.until)
        report_in = self.digests.until_due(version + 1) if self.digests is not None else None
        return due if report_in is None else min(due, version + 1 + report_in)

    def tend(self, now: float, idle: bool) -> None:
        """The bookkeeping between records, each step timed as a pause of the fold: collect a
        finished checkpoint, hand over a due one, feed the audit's writer, keep the digest settled.
        The loop calls it at the versions ``due_at`` names (``_next_due``) and when the log is idle."""
        version = self.state.version
        self.due_at = self._next_due(version)
        pause = _Pause()
        state = self.state
        done = self.writer.collect()
        if done is not None:
            self._collected(*done, now)
        pause.step("collect")
        due = (
            state.version != self.requested
            and now >= self.rested_at
            and (state.version - self.requested >= self.every_records or now - self.requested_at >= self.every_seconds)
        )
        forked = due and not self.writer.busy
        if forked:
            if self.feed is not None:
                self.feed.seal()  # the checkpoint is stored once the index holds its records: soon
            self.writer.start(state, self.feed.pipes() if self.feed is not None else ())
            self.requested, self.requested_at = state.version, now
            # The restored fragments served the child's rendering; kept longer, the shards they
            # share would pin every object the fold has replaced since.
            self.release.hand(state.rendered)
            state.rendered = None
        pause.step("checkpoint")
        # A fork is this pause's long step (tens of ms at 150,000 pods): what would follow it waits
        # for the next pause, freeing parts above all (each page it touches first after the fork
        # is copied: 9.5 ms after a 40.5 ms fork in run S's load), feeding the audit's writer (9.5
        # ms after a 53.1 ms fork in run X's load) and the digest's slice.
        feed = self.feed
        if feed is not None and not forked:
            if idle:
                feed.seal()  # a history asked now finds the records up to here
            feed.pump()
            if feed.backlog >= BACKLOG:  # the writer fell behind: the fold waits (bounded memory)
                pause.waited = feed.wait()
                self.progress.writer_waits_s += pause.waited
        pause.step("audit")
        if not forked:
            self.release.tend()
        pause.step("release")
        if not forked:
            state.hashes.tend(state, self.digests.until_due(state.version) if self.digests is not None else None)
        pause.step("settle")
        freeze_kept(state.version)  # reached at every SETTLE_EVERY-th version, so at every FREEZE_EVERY-th
        pause.step("freeze")
        if self.digests is not None and self.digests.due(state.version) and _ready(state):
            digest_started = time.perf_counter()
            self.digests.offer(state.version, state.state_digest())
            self.progress.longest_digest_s = max(self.progress.longest_digest_s, time.perf_counter() - digest_started)
        pause.step("report")
        self.progress.pause(pause.seconds, pause.steps)
        if pause.seconds > LONG_PAUSE_S:
            LOG.info("a pause of %.1f ms at version %d: %s", pause.seconds * 1000, version, pause)

    def _collected(self, job: Job, ok: bool, now: float) -> None:
        self.rested_at = now + CHECKPOINT_REST * (now - job.started_at)
        if ok:
            self.progress.checkpoints += 1
            CHECKPOINTS.inc()
            CHECKPOINT_SECONDS.observe(now - job.started_at)
            if job.stored is not None:
                _export_checkpoint(job.stored)

    def finish(self) -> None:
        """Write a checkpoint at the final version while the audit index's writer stores the
        records it lacks: a child forked now waits for the index to hold its version (a
        checkpoint ahead of the index would be restored from by nobody) and this process, which
        alone sends the index's writer its records, drains the feed meanwhile. Written after the
        drain instead, it added its 1.5 s to the drain's 0.5 s at 5,000 nodes / 150,000 pods.

        A checkpoint still being written at the stop is let go of only once the final one is sure
        to follow, the index holding every record: so with one in flight the drain comes first
        (the one in flight, waiting for the index too, is often stored meanwhile). Killed before
        the drain, it was lost whenever the index's writer was slow, and with it, when the drain
        failed, the newest checkpoint the stop could have left."""
        deadline = time.monotonic() + DRAIN_S
        feed = self.feed
        if self.writer.busy:
            if feed is not None:
                self._drain(deadline)
            done = self.writer.collect()
            pending = self.writer.pending
            drained = feed is None or not feed.backlog
            if done is None and drained and pending is not None and pending < self.state.version:
                self.writer.abandon()  # the final checkpoint need not wait for an older one (1-2 s)
            else:
                self._collected(*(done or self.writer.wait()), time.monotonic())
        if self.state.version not in (self.writer.saved, self.restored):
            if feed is not None:
                feed.seal()
            self.writer.start(self.state, feed.pipes() if feed is not None else ())
        if feed is not None:
            self._drain(deadline)
            feed.close()
            if feed.backlog:
                LOG.error(
                    "the audit index's writer did not store the last %d record(s) within %.0f s: no final "
                    "checkpoint (the next projector starts from the one the index covers)",
                    feed.backlog,
                    DRAIN_S,
                )
                if self.writer.busy:
                    self.writer.abandon()
                return
        if self.writer.busy:
            self._collected(*self.writer.wait(), time.monotonic())

    def _drain(self, deadline: float) -> None:
        """Wait until the audit index holds every record added, or ``deadline`` has passed."""
        assert self.feed is not None
        self.progress.writer_waits_s += self.feed.drain(timeout_s=max(0.0, deadline - time.monotonic()))


def _reason(exc: KafkaException) -> str:
    """A Kafka error's own words (its KafkaError's), for a one-line warning."""
    return str(exc.args[0].str()) if exc.args else str(exc)

"""The projector's checkpoint writer: a forked child.

Writing a checkpoint of 150k tasks takes seconds (encode, render its digest, store); the fold
must not wait for it. A snapshot is immutable, and so is a forked child's copy of the whole
process: as Redis's BGSAVE does, the projector forks, the child writes the checkpoint of the
state exactly as it stood at the fork, and the parent folds on. The fold pauses only for the
fork itself. One child at a time, so checkpoints land in log order. The child dies with its
parent (PR_SET_PDEATHSIG): a killed projector's half-written checkpoint is a rolled-back
transaction, never an orphan's late write, so the newest complete checkpoint is always the
newest in the store. (The audit index has a writer process of its own: ``auditindex.writer``.)
"""

from __future__ import annotations

import gc
import logging
import os
import signal
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime

from strata.children import die_with, step_aside
from strata.errors import StrataError
from strata.projector.auditindex.store import AuditIndex
from strata.projector.checkpoints.interface import Checkpoint, CheckpointInfo, CheckpointStore, LogIdentity
from strata.projector.fold import statecodec
from strata.projector.fold.snapshot import Fragments, Snapshot
from strata.projector.fold.state import CacheState
from strata.projector.release import Release

LOG = logging.getLogger("strata.projector")
INDEX_POLL_S = 0.05
INDEX_WAIT_S = 120.0  # a checkpoint waits this long for the audit index to cover it, then fails


@dataclass
class Job:
    """One checkpoint being written: of the state at ``version``, whose snapshot the next one
    renders from once this one is stored."""

    version: int
    snapshot: Snapshot | None = None
    started_at: float = field(default_factory=time.monotonic)
    stored: Stored | None = None  # the checkpoint written, as its writer reported it


@dataclass(frozen=True)
class Stored:
    """What the projector exports of a checkpoint it wrote, from the writer itself: asking the
    store instead cost the fold up to 32 ms (a query) in the same pause as the next fork."""

    version: int
    size: int
    created_at: str  # the writer's clock (the store keeps its own)
    rendered_from: int = -1  # the version of the checkpoint whose fragments it rendered from (-1: none)

    def encode(self) -> bytes:
        return f"{self.version} {self.size} {self.created_at} {self.rendered_from}".encode()

    @classmethod
    def decode(cls, data: bytes) -> Stored | None:
        parts = data.decode(errors="replace").split()
        if len(parts) != 4 or not (parts[0].isdigit() and parts[1].isdigit() and parts[3].lstrip("-").isdigit()):
            return None
        return cls(int(parts[0]), int(parts[1]), parts[2], int(parts[3]))


def write_checkpoint(
    store: CheckpointStore,
    log: LogIdentity,
    state: CacheState,
    before_save: Callable[[int], None] = lambda _v: None,
    base: Fragments | None = None,
) -> CheckpointInfo:
    """Store a checkpoint of ``state``; its canonical JSON rendered from ``base`` (an earlier
    checkpoint's fragments) where nothing changed since, else from the state's restored ones."""
    LOG.info("writing a checkpoint at version %d", state.version)
    snapshot = state.snapshot(base)
    digest = snapshot.digest()
    blob = statecodec.encode(state, snapshot.fragments())  # the next restore renders only what changed
    before_save(state.version)
    info = CheckpointInfo(
        log=log,
        version=state.version,
        digest=digest,
        size=len(blob),
        created_at=datetime.now(UTC).isoformat(timespec="seconds"),
    )
    store.save(Checkpoint(info, blob, statecodec.FORMAT))
    if base is None:
        LOG.info("checkpoint at version %d written", state.version)
    else:
        LOG.info("checkpoint at version %d written (rendered from %d's)", state.version, base.snapshot.version)
    return info


class Writer:
    """Forks a checkpoint's writer. With an audit index, a checkpoint is stored only once the index
    holds every record up to it: a projector restores the newest checkpoint at or below the index's
    position (so that the index misses no record), and the newest checkpoint must be that one."""

    def __init__(
        self,
        store: CheckpointStore,
        log: LogIdentity,
        audit_index: AuditIndex | None = None,
        release: Release | None = None,
    ) -> None:
        self.store = store
        self.log = log
        self.audit_index = audit_index
        self.release = release  # where a replaced base goes (None: dropped at once)
        self.saved = -1  # the version of the newest checkpoint written
        # That checkpoint's snapshot: the next checkpoint renders only what changed since it,
        # from the fragments it stored. Held, it keeps the shards the fold has replaced since
        # (what changed between two checkpoints, not the state).
        self.base: Snapshot | None = None
        self._pid: int | None = None
        self._job: Job | None = None
        self._report: int | None = None  # the read end of the pipe the child reports its checkpoint on

    @property
    def busy(self) -> bool:
        return self._pid is not None

    def start(self, state: CacheState, foreign: Sequence[int] = ()) -> None:
        """Fork a child that writes a checkpoint of ``state``; it closes the ``foreign`` file
        descriptors first (a pipe's end held by the child would keep its reader from its end)."""
        assert self._pid is None, "one writer at a time keeps the checkpoints in log order"
        job = Job(state.version, state.snapshot())
        parent = os.getpid()
        report, child_end = os.pipe()
        pid = os.fork()
        if pid == 0:
            os.close(report)
            for fd in foreign:
                os.close(fd)
            self._child(parent, state, job, child_end)
        os.close(child_end)
        self._pid, self._job, self._report = pid, job, report

    def collect(self) -> tuple[Job, bool] | None:
        """The finished job and whether it succeeded, or None while the child still writes."""
        if self._pid is None:
            return None
        pid, status = os.waitpid(self._pid, os.WNOHANG)
        return None if pid == 0 else self._finished(status)

    def wait(self) -> tuple[Job, bool]:
        assert self._pid is not None
        _, status = os.waitpid(self._pid, 0)
        return self._finished(status)

    @property
    def pending(self) -> int | None:
        """The version of the checkpoint being written, or None."""
        return self._job.version if self._job is not None else None

    def abandon(self) -> None:
        """Kill the child writing a checkpoint (one a newer one supersedes, or one that would
        never be stored): its transaction is rolled back, as a killed projector's child's is,
        and the store keeps the checkpoints it held."""
        assert self._pid is not None and self._job is not None and self._report is not None
        os.kill(self._pid, signal.SIGKILL)
        os.waitpid(self._pid, 0)
        os.close(self._report)
        # the child may have committed just before the kill: then the store keeps it all the same
        LOG.info("the checkpoint at version %d let go of (stored only if its writer had committed)", self._job.version)
        self._job.snapshot = None
        self._pid = self._job = self._report = None

    def _finished(self, status: int) -> tuple[Job, bool]:
        job, self._job, self._pid = self._job, None, None
        assert job is not None and self._report is not None
        with os.fdopen(self._report, "rb") as report:  # the child has exited: all it wrote is there
            job.stored = Stored.decode(report.read())
        self._report = None
        code = os.waitstatus_to_exitcode(status)
        if code != 0:
            LOG.error(
                "the checkpoint writer of version %d failed (exit %d); the next one comes when due", job.version, code
            )
        else:
            if self.release is not None:
                self.release.hand(self.base)
            self.saved, self.base = job.version, job.snapshot
        job.snapshot = None
        return job, code == 0

    def _write(self, state: CacheState) -> Stored:
        base = self._base_fragments(state)
        info = write_checkpoint(self.store, self.log, state, self._indexed, base)
        return Stored(info.version, info.size, info.created_at, -1 if base is None else base.snapshot.version)

    def _base_fragments(self, state: CacheState) -> Fragments | None:
        """The fragments the newest checkpoint written stored, for its snapshot; None when the
        state's own (restored) ones are as new, or that checkpoint cannot give them (pruned, of
        an older format): then the rendering is whole, and only slower."""
        base = self.base
        if base is None or (state.rendered is not None and state.rendered.snapshot.version >= base.version):
            return None
        try:
            checkpoint = self.store.latest(self.log, at_or_below=base.version)
            if checkpoint is None or checkpoint.info.version != base.version:
                return None
            return statecodec.fragments_of(checkpoint.state, base)
        except Exception as exc:  # a faster rendering is no reason to fail a checkpoint
            LOG.warning("version %d rendered whole: no fragments from %d: %s", state.version, base.version, exc)
            return None

    def _indexed(self, version: int) -> None:
        """Wait until the audit index holds the records up to ``version`` (its writer process
        stores them; the fold has asked it to at once); a checkpoint it never covers is not stored."""
        waited = 0.0
        while self.audit_index is not None and self.audit_index.indexed_to(self.log) < version:
            if waited >= INDEX_WAIT_S:
                raise StrataError(f"the audit index did not reach version {version} within {INDEX_WAIT_S:.0f} s")
            time.sleep(INDEX_POLL_S)
            waited += INDEX_POLL_S

    def _child(self, parent: int, state: CacheState, job: Job, report: int) -> None:
        code = 1
        try:
            for signum in (signal.SIGTERM, signal.SIGINT):
                signal.signal(signum, signal.SIG_DFL)
            die_with(parent)
            step_aside()
            gc.disable()  # a short life: collecting would only copy the parent's pages
            self.store.forked()
            os.write(report, self._write(state).encode())
            code = 0
        except BaseException as exc:
            LOG.error("writing version %d failed: %s", job.version, exc)
        finally:
            sys.stderr.flush()
            os._exit(code)

"""The audit index's writer: a process of its own, fed by the fold as it goes.

The fold's thread keeps, per record, references it holds already (``audit.Kept``: the message
as the log holds it, the stamp, the fold's outcome and pod context) and, for a pod, what only
its parse of the object says of the subjects (``audit.pod_refs``: the group and the node), and
every block's worth of records (``BLOCK_RECORDS`` offsets) packs them into one frame for the
writer: the stamps and sizes as arrays, the pods' refs, the few records whose outcome is not a
plain "applied" or that carry a pod context, and after them the messages themselves, joined
into the frame's one buffer (``wire``: one copy of each, where a buffer per message cost more
in every write to a pipe the writer had not emptied). Nothing kept is an object the collector
walks for long, and no fork copies the fold's pages for the audit. The writer decodes each
message (the generated reader) and spells its subjects out (``audit.subjects_of``: spelled by
the fold, the strings took about a sixth of its thread, docs/projector.md), stores blocks and
postings in one transaction for what it has read, and answers with how far the index goes.

    fold (AuditFeed)  --frames-->  python -m strata.projector.auditindex.writer  --acks-->  fold

The feed keeps every frame until the writer acknowledges it: a writer that dies is started again
and given them anew (what the index holds already is skipped). A writer that cannot write (the
database is away) tries again; once ``backlog`` records wait unacknowledged the fold waits for it,
so memory stays bounded. The writer dies with its parent (PR_SET_PDEATHSIG), so a killed projector
leaves a rolled-back transaction, never a late write.

A frame on the writer's stdin is two 4-byte little-endian lengths (its MessagePack head's, its
messages'), the head, then the messages one after another; acknowledgements are 8-byte
little-endian versions on its stdout. The first frame is the writer's settings, the database URL
among them: never on its command line, where ``ps`` would show a password.
"""

from __future__ import annotations

import functools
import gc
import itertools
import logging
import math
import os
import select
import signal
import subprocess
import sys
import time
from array import array
from collections import deque
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any, TypeVar

import msgspec

from strata.children import die_with, step_aside, widen
from strata.errors import StrataError
from strata.log.metrics import CHILD_RESTARTS
from strata.projector.auditindex.store import BLOCK_RECORDS, AuditIndex, Records, context_of, plain_context
from strata.projector.checkpoints.interface import LogIdentity
from strata.projector.fold.auditentries import (
    WATCH_SUBJECT_FIELDS,
    Context,
    PodContext,
    PodRefs,
    scheduler_subjects,
    subjects_of,
    watch_subjects,
)
from strata.projector.fold.state import APPLIED, Outcome
from strata.projector.release import Release
from strata.schemas import BadRecord, Bind, BindSucceeded, WatchEvent, decode, encode
from strata.schemas.codec import head_reader, record_reader

if TYPE_CHECKING:
    from strata.log.cachelog import LogEntry

LOG = logging.getLogger("strata.projector")
T = TypeVar("T")
BACKLOG = 64 * BLOCK_RECORDS  # records sent and not yet acknowledged before the fold waits
FRAMES_PER_WRITE = 32  # frames (of BLOCK_RECORDS records) one transaction stores, at most
GATHER_S = 0.5  # a transaction stores what came once no frame came for this long
RETRY_S = 1.0  # a writer that failed to write tries again this much later
CLOSE_S = 10.0  # after its end of input, the longest a writer is given to finish its transaction
COLLECT_EVERY = 16  # transactions between two collections (``_collect_by_hand``)
FAILURES_IN_A_ROW = 5  # writers that stop before they store anything, before the fold gives up
_LENGTH = 4
_PREFIX = 2 * _LENGTH  # a frame's head's length, then its messages'
_IOV_MAX = 1024  # buffers one writev takes (Linux's UIO_MAXIOV)
_ACK = 8
_encode = msgspec.msgpack.Encoder().encode
# keeps one record for the index: (offset, time_ms, message, outcome, pod context, pod refs)
Keep = Callable[[int, int, bytes, Outcome, Context, PodRefs], None]
_decode = msgspec.msgpack.Decoder().decode
RESTARTS = CHILD_RESTARTS.labels("audit_writer")  # exported from the start, at 0 (a series to plot)


# ------------------------------------------------------------------------------------ frames
class Frame(msgspec.Struct, array_like=True):
    """What the fold sends: records (none: a request to store what came before now), the version
    the index reaches once they are stored, and whether the fold waits for that (``urgent``:
    else the writer gathers frames into larger transactions). On the wire the records' messages
    follow the head, whose ``records.values`` is empty, and instead of the records' subjects
    the head holds each record's ``audit.pod_refs`` (``refs``), from which the writer spells
    them out (``read_frame``)."""

    upto: int
    urgent: bool
    records: Records
    refs: list[PodRefs] = []


_read_head = msgspec.msgpack.Decoder(Frame).decode


def wire(head: bytes, values: list[bytes]) -> bytes:
    """One frame's bytes on the pipe: the two lengths and the head, then the messages. One
    buffer, not one per message: with a thousand buffers a frame, each pump of a pipe the
    writer had not emptied built (and the kernel walked) a thousand-entry vector for the few
    the pipe took; and an acknowledged frame is let go of as one object, not a thousand."""
    size = sum(map(len, values))
    return b"".join((len(head).to_bytes(_LENGTH, "little"), size.to_bytes(_LENGTH, "little"), head, *values))


def read_frame(data: bytes) -> Frame:
    """A frame from its bytes on the pipe (as ``_take`` cuts them), its records' subjects spelled."""
    head_size = int.from_bytes(data[:_LENGTH], "little")
    frame = _read_head(memoryview(data)[_PREFIX : _PREFIX + head_size])
    frame.records.values = data[_PREFIX + head_size :]
    frame.records.subjects = spelled(frame.records, frame.refs)
    return frame


def spelled(records: Records, refs: list[PodRefs]) -> list[list[str]]:
    """Each record's subjects (``audit.subjects``), from its message, its pod context (the
    exceptions') and its ``pod_refs``: the same strings the fold would have spelled. A watch
    event's are read from its first fields alone (most records: no copy, no record made)."""
    contexts = {i: plain for i, _, _, plain in records.exceptions}
    head, bound, succeeded = _heads()
    read = record_reader()
    values = records.values
    out: list[list[str]] = []
    start = 0
    for i, size in enumerate(records.column("sizes")):
        fields = head(values, start)
        if fields is not None:
            kind, namespace, name, uid = fields
            out.append(list(watch_subjects(kind, namespace, name, uid, refs[i])))
        elif (named := bound(values, start) or succeeded(values, start)) is not None:
            pod, node = named
            ctx = context_of(contexts.get(i))  # a BIND's or BIND_SUCCEEDED's: its pod's, or none
            out.append(list(scheduler_subjects(pod, node, ctx if isinstance(ctx, PodContext) else None)))
        else:
            value = values[start : start + size]
            record = read(value) or decode(value)
            out.append(list(subjects_of(record, context_of(contexts.get(i)), refs[i])))  # type: ignore[arg-type]
        start += size
    return out


@functools.cache
def _heads() -> tuple[Callable[[bytes, int], tuple[Any, ...] | None], ...]:
    """Readers of the first fields of the commonest records, all their subjects need: a
    WatchEvent's WATCH_SUBJECT_FIELDS, a BIND's and a BIND_SUCCEEDED's pod and node (a third of
    the log: no record made for them)."""
    return (
        head_reader(WatchEvent.SCHEMA, WATCH_SUBJECT_FIELDS),
        head_reader(Bind.SCHEMA, ("pod", "node")),
        head_reader(BindSucceeded.SCHEMA, ("pod", "node")),
    )


def value_of(entry: LogEntry) -> bytes:
    """The bytes the index keeps of a log entry: its message as the log holds it, or (a bad
    message's bytes being no record, or an entry not read from a log) the record re-encoded."""
    if entry.value and type(entry.record) is not BadRecord:
        return entry.value
    return encode(entry.record)


class Packer:
    """The records of the frame being filled (the fold's side: a few appends a record)."""

    def __init__(self) -> None:
        self.first = -1
        # Filled by ``adder``'s closure and emptied in place by ``seal``: the closure holds them.
        self.values: list[bytes] = []
        self.stamps = array("q")
        self.refs: list[PodRefs] = []
        self.exceptions: list[tuple[int, str, str, Any]] = []

    def adder(self, first_kept: int, on_block: Callable[[int], None]) -> Keep:
        """``add(offset, time_ms, value, outcome, ctx, refs)``: keep one record of an offset
        from ``first_kept`` on (below it: skipped), and once it ends a block call
        ``on_block(offset + 1)``. A closure over the columns: the fold's thread calls it for
        every record, and an attribute load costs about what an append does."""
        values, stamps, refs_, exceptions = self.values, self.stamps, self.refs, self.exceptions

        def add(offset: int, time_ms: int, value: bytes, outcome: Outcome, ctx: Context, refs: PodRefs) -> None:
            if offset < first_kept:
                return
            if not values:
                self.first = offset
            if ctx is not None or (outcome is not APPLIED and (outcome.result != "applied" or outcome.reason)):
                exceptions.append((len(values), outcome.result, outcome.reason, plain_context(ctx)))
            values.append(value)
            stamps.append(time_ms)
            refs_.append(refs)
            if (offset + 1) % BLOCK_RECORDS == 0:
                on_block(offset + 1)

        return add

    def seal(self, upto: int, urgent: bool) -> bytes:
        """The frame of what was added since the last seal (maybe nothing), as ``wire`` writes it."""
        values = self.values
        sizes = array("I", map(len, values)).tobytes()
        first = self.first if values else upto
        head = _encode((upto, urgent, (first, self.stamps.tobytes(), sizes, b"", [], self.exceptions), self.refs))
        frame = wire(head, values)
        values.clear()
        del self.stamps[:]
        self.refs.clear()
        self.exceptions.clear()
        return frame

    @property
    def end(self) -> int | None:
        """The offset after the last record added, or None when none was."""
        return self.first + len(self.values) if self.values else None


# -------------------------------------------------------------------------------- the fold's side
class AuditFeed:
    """The fold's end: a writer process, the frames it has not acknowledged, the one filling."""

    COMMAND = (sys.executable, "-m", "strata.projector.auditindex.writer")

    def __init__(self, url: str, log: LogIdentity, indexed: int, release: Release | None = None) -> None:
        self.url = url
        self.log = log
        self.indexed = indexed  # the index holds records 0 .. indexed - 1
        self.release = release  # where acknowledged frames go (None: dropped at once)
        self.packer = Packer()
        self.restarts = 0
        self._unacked: deque[tuple[int, bytes]] = deque()  # (upto, frame), oldest first
        # the frames the writer has not been sent yet (a view of the rest of one the pipe took a part of)
        self._outbox: deque[bytes | memoryview] = deque()
        self._acks = b""
        self._process: subprocess.Popen[bytes] | None = None
        self._failures = 0  # writers in a row that stopped before they acknowledged anything
        self._acked_since_start = 0
        self._start()

    def adder(self) -> Keep:
        """``Packer.adder``'s ``add`` for the records the fold applies next: those the index
        holds already (a restart from an older checkpoint folds them again) are skipped, and a
        block's last record sends a frame. Acknowledgements never pass the records sent, so
        the index's position now is where the records to keep begin."""
        return self.packer.adder(self.indexed, lambda upto: self._send_frame(upto, urgent=False))

    def seal(self) -> None:
        """Have what was added so far stored now (the fold is idle, or stops), not with the next
        larger transaction."""
        end = self.packer.end
        if end is not None or self.backlog:
            self._send_frame(end if end is not None else self._unacked[-1][0], urgent=True)

    def _send_frame(self, upto: int, urgent: bool) -> None:
        frame = self.packer.seal(upto, urgent)
        self._unacked.append((upto, frame))
        self._outbox.append(frame)
        self.pump()

    @property
    def backlog(self) -> int:
        """Records sent (or to be sent) that the writer has not acknowledged."""
        return self._unacked[-1][0] - self.indexed if self._unacked else 0

    def pipes(self) -> list[int]:
        """The file descriptors of this end of the writer's pipes (for a forked child to close)."""
        process = self._process
        if process is None or process.stdin is None or process.stdout is None:
            return []
        return [process.stdin.fileno(), process.stdout.fileno()]

    def pump(self) -> None:
        """Send what the pipe takes and read the acknowledgements there are, without waiting."""
        try:
            self._send()
            self._read_acks()
        except (BrokenPipeError, ConnectionResetError, EOFError):
            self._restart()

    def wait(self, below: int = BACKLOG, timeout_s: float = math.inf) -> float:
        """Wait until fewer than ``below`` records are unacknowledged (or ``timeout_s`` has
        passed); the seconds waited."""
        started = time.perf_counter()
        if self.backlog + len(self.packer.values) >= max(below, 1):
            self.seal()  # the writer stores what it gathered now, not once its transaction is full
        while self.backlog >= max(below, 1) and time.perf_counter() - started < timeout_s:
            assert self._process is not None and self._process.stdin is not None and self._process.stdout is not None
            writing = [self._process.stdin] if self._outbox else []
            select.select([self._process.stdout], writing, [], 1.0)
            self.pump()
        return time.perf_counter() - started

    def drain(self, timeout_s: float = math.inf) -> float:
        """Wait until the writer has stored everything added (the frame being filled too), or
        ``timeout_s`` has passed (then ``backlog`` says what it has not)."""
        return self.wait(below=1, timeout_s=timeout_s)

    def close(self) -> None:
        """Stop the writer (after ``drain``: what it has not stored is left for the next fold)."""
        process, self._process = self._process, None
        if process is None:
            return
        assert process.stdin is not None and process.stdout is not None
        process.stdin.close()  # its end of input: it exits
        try:
            process.wait(CLOSE_S)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        process.stdout.close()

    # ------------------------------------------------------------------------------ internals
    def _start(self) -> None:
        process = subprocess.Popen(
            list(self.COMMAND),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            bufsize=0,
        )
        assert process.stdin is not None and process.stdout is not None
        for end in (process.stdin, process.stdout):
            widen(end.fileno())
        os.set_blocking(process.stdin.fileno(), False)
        os.set_blocking(process.stdout.fileno(), False)
        log = [self.log.topic, self.log.cluster_id, self.log.fold]
        settings = {"url": self.url, "log": log, "parent": os.getpid()}
        hello = _encode(settings)
        self._process = process
        self._outbox.clear()
        self._outbox.append(wire(hello, []))
        self._outbox.extend(frame for upto, frame in self._unacked if upto > self.indexed)
        self._acks = b""
        self._acked_since_start = 0

    def _restart(self) -> None:
        process = self._process
        code = process.poll() if process is not None else None
        if process is not None and code is None:
            process.kill()
        if process is not None:
            process.wait()
        self.restarts += 1
        self._failures = self._failures + 1 if self._acked_since_start == 0 else 1
        if self._failures >= FAILURES_IN_A_ROW:
            raise StrataError(
                f"the audit index's writer stopped {self._failures} times in a row before it stored anything "
                f"(exit {code}; its errors are above); `strata project --no-audit` folds without it"
            )
        LOG.error(
            "the audit index's writer stopped (exit %s); starting another, %d record(s) to send again",
            code,
            self.backlog,
        )
        RESTARTS.inc()
        self._start()

    def _send(self) -> None:
        assert self._process is not None and self._process.stdin is not None
        fd = self._process.stdin.fileno()
        outbox = self._outbox
        while outbox:
            try:
                written = os.writev(fd, list(itertools.islice(outbox, _IOV_MAX)))
            except BlockingIOError:
                return
            while outbox and written >= len(outbox[0]):
                written -= len(outbox.popleft())
            if written:  # the pipe took part of a buffer: it is full
                outbox[0] = memoryview(outbox[0])[written:]  # no copy of the rest
                return

    def _read_acks(self) -> None:
        assert self._process is not None and self._process.stdout is not None
        fd = self._process.stdout.fileno()
        while True:
            try:
                data = os.read(fd, 4096)
            except BlockingIOError:
                break
            if not data:
                raise EOFError("the writer closed its output")
            self._acks += data
        whole = len(self._acks) - len(self._acks) % _ACK
        self._acked_since_start += whole // _ACK
        for i in range(0, whole, _ACK):
            self.indexed = max(self.indexed, int.from_bytes(self._acks[i : i + _ACK], "little"))
        self._acks = self._acks[whole:]
        # A transaction's acknowledgement lets go of up to FRAMES_PER_WRITE frames of about 1 MB
        # (2-3 ms to free at once; 20-34 ms when each message was an object of its own): the
        # release frees them a few a pause.
        unacked = self._unacked
        while unacked and unacked[0][0] <= self.indexed:
            _, frame = unacked.popleft()
            if self.release is not None:
                self.release.keep(frame)


# ------------------------------------------------------------------------------- the writer
def _frames(fd: int, buffer: bytearray) -> Iterator[list[Frame]]:
    """The frames on ``fd`` to store in one transaction: FRAMES_PER_WRITE of them, or fewer when
    one is urgent, when none came for GATHER_S, or at the end of input."""
    frames: list[Frame] = []
    while (payload := _next(fd, buffer, GATHER_S if frames else None)) is not None:
        if payload is _QUIET:
            yield frames  # the fold went quiet: what came is stored now
            frames = []
            continue
        frames.append(read_frame(payload))
        if frames[-1].urgent or len(frames) >= FRAMES_PER_WRITE:
            yield frames
            frames = []
    if frames:
        yield frames


# What ``_next`` gives when nothing came in time: no payload is empty (each has its lengths).
_QUIET = b""


def _next(fd: int, buffer: bytearray, timeout_s: float | None) -> bytes | None:
    """The next whole payload on ``fd`` (the settings, or a frame: ``_take``'s), reading into
    ``buffer`` as needed; ``_QUIET`` when no byte came for ``timeout_s`` (None: wait), None at
    the end of input."""
    while (payload := _take(buffer)) is None:
        if timeout_s is not None and not select.select([fd], [], [], timeout_s)[0]:
            return _QUIET
        data = os.read(fd, 1 << 20)
        if not data:
            return None
        buffer += data
    return payload


def _take(buffer: bytearray) -> bytes | None:
    """The first whole frame in ``buffer`` (``read_frame``'s input), cut off it; None until one is."""
    if len(buffer) < _PREFIX:
        return None
    size = _PREFIX + int.from_bytes(buffer[:_LENGTH], "little") + int.from_bytes(buffer[_LENGTH:_PREFIX], "little")
    if len(buffer) < size:
        return None
    with memoryview(buffer) as view:
        frame = bytes(view[:size])  # one copy (a bytearray's slice would be one more)
    del buffer[:size]
    return frame


def run(stdin: int, stdout: int) -> None:
    """The writer's loop: the settings, then frames until the end of input."""
    from strata.projector.checkpoints.sql import SqlCheckpointStore

    buffer = bytearray()
    hello = _next(stdin, buffer, None)
    if hello is None:
        return  # the fold stopped before it said anything
    settings = _decode(memoryview(hello)[_PREFIX:])
    die_with(settings["parent"])
    store = _retried("open the database", lambda: SqlCheckpointStore(settings["url"]))
    index, log = AuditIndex(store.engine), LogIdentity(*settings["log"])
    stored = upto = 0
    _collect_by_hand()
    try:
        for written, frames in enumerate(_frames(stdin, buffer), 1):
            upto = max(frame.upto for frame in frames)
            parts = [frame.records for frame in frames]
            _retried(f"store up to version {upto}", functools.partial(index.write, log, parts, upto))
            os.write(stdout, upto.to_bytes(_ACK, "little"))
            stored += sum(map(len, parts))
            if written % COLLECT_EVERY == 0:
                gc.collect()
    finally:
        store.close()
        LOG.info("stored %d records up to version %d in %.1f s of CPU", stored, upto, time.process_time())


def _collect_by_hand() -> None:
    """The collector off, what lives now (modules, the engine) out of its passes: a
    transaction's frames and rows are tens of thousands of containers that live until it ends
    and make no cycles, which automatic young collections walked again and again (7 % of the
    writer's CPU under ``py-spy --native``). A collection every COLLECT_EVERY transactions frees
    the few cycles the database layer makes."""
    gc.disable()
    gc.freeze()


def _retried(what: str, attempt: Callable[[], T]) -> T:
    """``attempt()``, tried again until it works: the database away, a lock held too long. The
    fold keeps the frames meanwhile and waits once too many wait."""
    failures = 0
    while True:
        try:
            return attempt()
        except Exception as exc:
            failures += 1
            if failures == 1 or failures % 60 == 0:
                LOG.error("could not %s (try %d): %s", what, failures, exc)
            time.sleep(RETRY_S)


def main() -> None:
    logging.basicConfig(level=logging.WARNING, format="strata: %(name)s: the audit writer: %(message)s")
    level = os.environ.get("STRATA_LOG_LEVEL", "").upper()  # as the command that started it
    if level in ("DEBUG", "INFO", "WARNING", "ERROR"):
        logging.getLogger("strata").setLevel(level)
    # Ctrl-C and a signal to the process group reach the writer too: the fold stops it, once it
    # has drained (its end of input), or its death does (PR_SET_PDEATHSIG)
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, signal.SIG_IGN)
    step_aside()  # the fold first: the writer takes the CPU it leaves
    run(sys.stdin.fileno(), sys.stdout.fileno())


if __name__ == "__main__":
    main()

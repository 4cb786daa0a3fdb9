"""Disaster-recovery archives of the cache log: Avro Object Container Files plus a manifest.

An archive is a directory. Each ``cache-log-<first>-<last>.avro`` holds the messages of one
contiguous offset range exactly as the broker had them (offset, timestamp, key and the raw
single-object value, bad messages included), so folding an archive gives the same snapshot as
folding the log. ``manifest.json`` (see ``strata.recovery.manifest``) names every file with its
range, size, SHA-256 and the digest of the snapshot after its last offset; ``state.zst`` is the
fold state after the last exported offset, so the next export continues without refolding.

- ``export_archive``: the log (or a range of it) into a directory, incrementally;
- ``fold_archive``: an archive folded offline, like ``strata replay`` folds a trace;
- ``verify_archive``: every problem of an archive (files, ranges, metadata, digests);
- ``restore_archive``: an archive back into an empty cache log.
"""

from __future__ import annotations

import hashlib
import os
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple

import fastavro

from strata import __version__
from strata.errors import GapError, StrataError
from strata.log.cachelog import CacheLogReader, Publisher, bad_record, classify, offset_of
from strata.log.config import Settings
from strata.log.topics import ensure_topics
from strata.projector.fold import statecodec
from strata.projector.fold.state import CacheState, FoldConfig
from strata.projector.replay import ReplayReport
from strata.recovery import codec as archive_codec
from strata.recovery.manifest import (
    BASE,
    CHECKPOINT,
    CODECS,
    DEFAULT_RECORDS_PER_FILE,
    MANIFEST,
    FileEntry,
    Manifest,
    StateEntry,
    file_name,
    read_manifest,
    sha256_of,
    write_atomically,
    write_manifest,
)
from strata.schemas import LogRecord
from strata.schemas.codec import HEADER_SIZE, MARKER

SCHEMA = fastavro.parse_schema(
    {
        "type": "record",
        "name": "LogMessage",
        "namespace": "strata.recovery.archive",
        "doc": "One message of the cache log, exactly as the broker had it.",
        "fields": [
            {"name": "offset", "type": "long"},
            {"name": "timestamp_ms", "type": "long"},
            {"name": "key", "type": ["null", "bytes"]},
            {"name": "value", "type": "bytes", "doc": "the raw single-object encoding (or whatever bytes were there)"},
        ],
    }
)
Progress = Callable[[int, int], None]  # (done, total)
archive_codec.register()


class RawMessage(NamedTuple):
    offset: int
    timestamp_ms: int
    key: bytes | None
    value: bytes


@dataclass
class ArchiveReport(ReplayReport):
    """What ``fold_archive`` folded: a ``ReplayReport`` with offsets where it has line numbers."""

    files: int = 0
    bytes: int = 0


@dataclass
class TransferReport:
    """Figures of an export or a restore."""

    records: int = 0
    files: int = 0
    bytes: int = 0  # archive bytes written (export) or read (restore)
    seconds: float = 0.0
    first_offset: int = 0
    next_offset: int = 0  # the archive's (export) or the restored log's (restore) end

    def figures(self) -> str:
        s = max(self.seconds, 1e-9)
        mb = self.bytes / 1e6
        return (
            f"{self.records:,} records, {self.files} file(s), {mb:.1f} MB in {self.seconds:.2f} s: "
            f"{self.records / s:,.0f} records/s, {mb / s:.1f} MB/s"
        )


# ------------------------------------------------------------------------------------ reading
class RawLogReader(CacheLogReader):
    """The cache log's messages as the broker has them: no decoding, key and timestamp kept."""

    def read_raw(self, start: int, end: int, timeout_s: float = 10.0) -> Iterator[RawMessage]:
        """Messages with offsets in [start, end)."""
        for msg in self.messages(start, end, timeout_s):
            yield RawMessage(offset_of(msg), msg.timestamp()[1], msg.key(), msg.value() or b"")


def decode_message(value: bytes, offset: int, topic: str) -> LogRecord:
    """The record of one cache-log message, exactly as ``CacheLogReader`` decodes it (bad -> BadRecord)."""
    record, _, message = classify(value)
    return record if record is not None else bad_record(value, offset, topic, message)


def fingerprint_of(value: bytes) -> str | None:
    """The writer schema's fingerprint (hex) of a single-object message; None when it is none."""
    if len(value) >= HEADER_SIZE and value[:2] == MARKER:
        return value[2:HEADER_SIZE].hex()
    return None


def _messages(path: Path) -> Iterator[dict[str, Any]]:
    with open(path, "rb") as f:
        yield from _records(fastavro.reader(f))


def _records(avro: Iterable[object]) -> Iterator[dict[str, Any]]:
    """The records of an archive file (SCHEMA is a record: each message is a dict)."""
    for msg in avro:
        if not isinstance(msg, dict):
            raise TypeError(f"an archived message is a {type(msg).__name__}, not a record")
        yield msg


def _require_manifest(directory: Path) -> Manifest:
    manifest = read_manifest(directory)
    if manifest is None:
        if not directory.is_dir():
            raise StrataError(f"archive {directory} does not exist")
        raise StrataError(f"{directory} is no archive: it has no {MANIFEST}")
    return manifest


def _checked(directory: Path, entry: FileEntry) -> Path:
    """The path of an archive file whose SHA-256 matches the manifest; an error naming it otherwise."""
    path = directory / entry.name
    try:
        actual = sha256_of(path)
    except FileNotFoundError:
        raise StrataError(f"{path} is missing from the archive") from None
    except OSError as exc:
        raise StrataError(f"cannot read {path}: {exc.strerror}") from exc
    if actual != entry.sha256:
        raise StrataError(f"{path} is corrupted: its SHA-256 {actual[:16]}… differs from the manifest's")
    return path


def _range_problems(manifest: Manifest) -> list[str]:
    problems = []
    expected = manifest.first_offset
    for entry in manifest.files:
        if entry.last_offset < entry.first_offset:
            problems.append(f"{entry.name}: empty range {entry.first_offset}..{entry.last_offset}")
        if entry.first_offset > expected:
            problems.append(f"gap: offsets {expected}..{entry.first_offset - 1} are in no file (before {entry.name})")
        elif entry.first_offset < expected:
            problems.append(f"overlap: {entry.name} starts at {entry.first_offset}, before offset {expected}")
        expected = entry.last_offset + 1
    return problems


def _fold_config(manifest: Manifest) -> FoldConfig:
    return FoldConfig(tuple(manifest.fold["scheduler_names"]), manifest.fold["default_queue"])


def _fold_doc(config: FoldConfig) -> dict[str, Any]:
    return {"scheduler_names": list(config.scheduler_names), "default_queue": config.default_queue}


def _load_state(directory: Path, entry: StateEntry) -> CacheState:
    path = directory / entry.name
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise StrataError(f"cannot read {path}: {exc.strerror}") from exc
    if hashlib.sha256(data).hexdigest() != entry.sha256:
        raise StrataError(f"{path} is corrupted: its SHA-256 differs from the manifest's")
    try:
        return statecodec.decode(data)
    except statecodec.StateFormatError as exc:
        raise StrataError(f"{path}: {exc}") from exc


def _initial_state(directory: Path, manifest: Manifest, config: FoldConfig | None) -> CacheState:
    config = config or _fold_config(manifest)
    if manifest.base is None:
        return CacheState(config)
    state = _load_state(directory, manifest.base)
    if state.config.identity != config.identity:
        raise StrataError(
            f"{directory} starts at offset {manifest.first_offset} from a state folded with "
            f"{state.config.identity}; it cannot be folded with {config.identity}"
        )
    return state


# ------------------------------------------------------------------------------------- export
def export_archive(
    settings: Settings,
    directory: Path,
    *,
    start: int | None = None,
    stop: int | None = None,
    codec: str = "zstandard",
    records_per_file: int = DEFAULT_RECORDS_PER_FILE,
    force: bool = False,
    fold: FoldConfig | None = None,
    progress: Progress | None = None,
) -> TransferReport:
    """Append the log's offsets [start, stop) to the archive in ``directory`` (created if need be).

    A new archive starts at ``start`` (default 0); an existing one continues after its last
    offset. ``stop`` defaults to the log's end now. Returns the figures of what was written.
    """
    if codec not in CODECS:
        raise StrataError(f"codec {codec!r} is not one of {', '.join(CODECS)}")
    if records_per_file < 1:
        raise StrataError("--records-per-file must be at least 1")
    started = time.monotonic()
    reader = RawLogReader(settings)
    end = reader.end_offset()
    stop = end if stop is None else stop
    if stop > end:
        raise StrataError(f"offset {stop} is beyond the log's end ({end})")
    try:
        directory.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise StrataError(f"cannot create {directory}: {exc.strerror}") from exc
    manifest, state = _open_archive(settings, reader, directory, start, end, force, fold)
    first = manifest.next_offset
    writer = _FileWriter(directory, manifest, state, codec, TransferReport(first_offset=first, next_offset=first))
    total = stop - first
    lo, hi = first, min(first + records_per_file, stop)
    for msg in reader.read_raw(first, stop) if first < stop else ():
        while msg.offset >= hi:
            writer.close(lo, hi)
            lo, hi = hi, min(hi + records_per_file, stop)
        writer.add(msg)
        if progress is not None and writer.report.records % 1000 == 0:
            progress(msg.offset + 1 - first, total)
    while lo < stop:
        writer.close(lo, hi)
        lo, hi = hi, min(hi + records_per_file, stop)
    if progress is not None and first < stop:
        progress(total, total)
    writer.report.seconds = time.monotonic() - started
    return writer.report


def _open_archive(
    settings: Settings,
    reader: RawLogReader,
    directory: Path,
    start: int | None,
    end: int,
    force: bool,
    fold: FoldConfig | None,
) -> tuple[Manifest, CacheState]:
    """The archive's manifest (a new one, or the one there, checked against this log) and the fold
    at its next offset (``manifest.next_offset``)."""
    cluster_id = reader.cluster_id()
    manifest = read_manifest(directory)
    if manifest is None:
        first = start or 0
        config = fold or FoldConfig()
        manifest = Manifest(reader.topic, cluster_id, first, _fold_doc(config), __version__)
        state = CacheState(config)
        if first > 0:  # the fold before the archive's first offset, stored beside it
            if first > end:
                raise StrataError(f"offset {first} is beyond the log's end ({end})")
            for entry in CacheLogReader(settings).read(0, first):
                state.apply_at(entry.offset, entry.record)
            manifest.base = _write_state(directory, BASE, state, first)
        return manifest, state
    first = manifest.next_offset
    if (manifest.topic, manifest.cluster_id) != (reader.topic, cluster_id) and not force:
        raise StrataError(
            f"{directory} archives {manifest.topic} of cluster {manifest.cluster_id}, not {reader.topic} "
            f"of cluster {cluster_id}; --force continues it from this log"
        )
    if start is not None and start != first:
        raise StrataError(f"{directory} ends at offset {first - 1}; an export into it continues from {first}")
    if fold is not None and _fold_doc(fold) != manifest.fold:
        raise StrataError(f"{directory} was folded with other settings ({_fold_config(manifest).identity})")
    if first > end:
        raise StrataError(f"{directory} ends at offset {first - 1}, beyond the log's end ({end}): another log?")
    _check_same_log(reader, directory, manifest)
    state = _resume_state(directory, manifest)
    manifest.topic, manifest.cluster_id, manifest.strata_version = reader.topic, cluster_id, __version__
    return manifest, state


class _FileWriter:
    """Buffers an export's messages, folds them, and writes one container file per offset range."""

    def __init__(
        self, directory: Path, manifest: Manifest, state: CacheState, codec: str, report: TransferReport
    ) -> None:
        self.directory = directory
        self.manifest = manifest
        self.state = state
        self.codec = codec
        self.report = report
        self.buffer: list[dict[str, Any]] = []
        self.fingerprints: set[str] = set()

    def add(self, msg: RawMessage) -> None:
        self.buffer.append(msg._asdict())
        fp = fingerprint_of(msg.value)
        if fp is not None:
            self.fingerprints.add(fp)
        self.state.apply_at(msg.offset, decode_message(msg.value, msg.offset, self.manifest.topic))
        self.report.records += 1

    def close(self, lo: int, hi: int) -> None:
        """Write offsets [lo, hi) as one file, then the fold after it, then the manifest naming it."""
        manifest, name = self.manifest, file_name(lo, hi - 1)
        fps = tuple(sorted(self.fingerprints))
        metadata = {
            "strata.topic": manifest.topic,
            "strata.cluster_id": manifest.cluster_id,
            "strata.first_offset": str(lo),
            "strata.last_offset": str(hi - 1),
            "strata.fingerprints": ",".join(fps),
            "strata.version": __version__,
        }
        path = self.directory / name
        tmp = path.with_name(f".{name}.tmp")
        with open(tmp, "wb") as f:
            fastavro.writer(f, SCHEMA, self.buffer, codec=self.codec, metadata=metadata)
            f.flush()
            os.fsync(f.fileno())
        tmp.replace(path)
        entry = FileEntry(
            name=name,
            first_offset=lo,
            last_offset=hi - 1,
            records=len(self.buffer),
            bytes=path.stat().st_size,
            sha256=sha256_of(path),
            digest=self.state.snapshot().digest(),
            codec=self.codec,
            topic=manifest.topic,
            cluster_id=manifest.cluster_id,
            fingerprints=fps,
        )
        manifest.files.append(entry)
        manifest.checkpoint = _write_state(self.directory, CHECKPOINT, self.state, hi)
        write_manifest(self.directory, manifest)  # last: a file it does not name is not part of the archive
        self.report.files += 1
        self.report.bytes += entry.bytes
        self.report.next_offset = hi
        self.buffer.clear()
        self.fingerprints.clear()


def _write_state(directory: Path, name: str, state: CacheState, next_offset: int) -> StateEntry:
    blob = statecodec.encode(state)
    write_atomically(directory / name, blob)
    return StateEntry(
        name=name,
        next_offset=next_offset,
        version=state.version,
        digest=state.snapshot().digest(),
        bytes=len(blob),
        sha256=hashlib.sha256(blob).hexdigest(),
    )


def _resume_state(directory: Path, manifest: Manifest) -> CacheState:
    """The fold after the archive's last offset: the stored checkpoint, else a fold of the archive."""
    checkpoint = manifest.checkpoint
    if checkpoint is not None and checkpoint.next_offset == manifest.next_offset:
        try:
            return _load_state(directory, checkpoint)
        except StrataError:
            pass  # a damaged checkpoint is only a cache: fold the archive instead
    return fold_archive(directory)[0]


def _check_same_log(reader: RawLogReader, directory: Path, manifest: Manifest) -> None:
    """The log still holds the archive's last message: an export must not continue another log."""
    last = next((f for f in reversed(manifest.files) if f.records), None)
    if last is None:
        return
    archived = None
    for archived in _messages(_checked(directory, last)):  # noqa: B007 - the last one is wanted
        pass
    assert archived is not None
    offset = archived["offset"]
    live = next(reader.read_raw(offset, offset + 1), None)
    if live is None or (live.key, live.value) != (archived["key"], archived["value"]):
        raise StrataError(
            f"the log's message at offset {offset} differs from the archive's: {directory} is an archive of another log"
        )


# --------------------------------------------------------------------------------------- fold
def archive_bytes(directory: Path) -> int:
    """The size of the archive's files, for a progress bar over ``fold_archive``."""
    return _require_manifest(directory).bytes


def fold_archive(
    directory: Path,
    config: FoldConfig | None = None,
    until: int | None = None,
    *,
    strict: bool = False,
    progress: Callable[[int], None] | None = None,
) -> tuple[CacheState, ArchiveReport]:
    """Fold an archive offline: the state after every archived message with offset < ``until``.

    ``config`` defaults to the settings the archive was exported with. The same records give the
    same digest as ``strata snapshot --at-offset until-1`` of the live log. Each file's SHA-256 is
    checked before it is folded; ``progress`` hears the bytes of each file folded.
    """
    manifest = _require_manifest(directory)
    problems = _range_problems(manifest)
    if problems:
        raise StrataError(f"{directory}: {problems[0]}")
    state = _initial_state(directory, manifest, config)
    report = ArchiveReport()
    for entry in manifest.files:
        if until is not None and entry.first_offset >= until:
            break
        for msg in _messages(_checked(directory, entry)):
            offset = msg["offset"]
            if until is not None and offset >= until:
                break
            outcome = state.apply_at(offset, decode_message(msg["value"], offset, manifest.topic))
            report.count(offset, outcome, strict, "offset")
        report.files += 1
        report.bytes += entry.bytes
        if progress is not None:
            progress(entry.bytes)
    return state, report


# ------------------------------------------------------------------------------------- verify
def verify_archive(directory: Path) -> list[str]:
    """Every problem of the archive, one human-readable line each; empty when it is sound.

    Checks that every file is present with the manifest's size and SHA-256, that the ranges are
    contiguous from the first offset, that each file's metadata and records agree with the
    manifest, and refolds the archive to check the digest recorded after each file.
    """
    problems, checkpoint_problems = _verify(Path(directory))
    return problems + checkpoint_problems


def _verify(directory: Path) -> tuple[list[str], list[str]]:
    """(problems of the archive, problems of its checkpoint alone: harmless for a restore)."""
    try:
        manifest = _require_manifest(directory)
    except StrataError as exc:
        return [str(exc)], []
    problems = _range_problems(manifest)
    listed = {f.name for f in manifest.files}
    problems += [
        f"{p.name}: not in the manifest" for p in sorted(directory.glob("cache-log-*.avro")) if p.name not in listed
    ]
    try:
        state: CacheState | None = _initial_state(directory, manifest, None)
    except StrataError as exc:
        problems.append(str(exc))
        state = None
    if state is not None and manifest.base is not None and state.snapshot().digest() != manifest.base.digest:
        problems.append(f"{manifest.base.name}: digest differs from the manifest's")
    expected = manifest.first_offset
    for entry in manifest.files:
        if entry.first_offset != expected:
            state = None  # after a gap or an overlap the digests cannot be checked
        expected = entry.last_offset + 1
        path = directory / entry.name
        if not path.exists():
            problems.append(f"{entry.name}: missing")
            state = None  # the digests after a missing file cannot be checked
            continue
        size = path.stat().st_size
        if size != entry.bytes:
            problems.append(f"{entry.name}: {size} bytes, the manifest says {entry.bytes}")
        if sha256_of(path) != entry.sha256:
            problems.append(f"{entry.name}: SHA-256 differs from the manifest's (the file is corrupted)")
            state = None
            continue
        try:
            file_problems = _check_file(path, entry, manifest.topic, state)
        except Exception as exc:  # fastavro raises many kinds on a damaged file
            file_problems = [f"{entry.name}: unreadable: {type(exc).__name__}: {exc}"]
            state = None
        problems += file_problems
        if state is not None and state.snapshot().digest() != entry.digest:
            problems.append(
                f"{entry.name}: the fold's digest after offset {entry.last_offset} differs from the manifest's"
            )
    checkpoint_problems = []
    checkpoint = manifest.checkpoint
    if checkpoint is not None:
        what = f"{checkpoint.name} (only a cache for the next export)"
        if checkpoint.next_offset != manifest.next_offset:
            checkpoint_problems.append(f"{what}: at offset {checkpoint.next_offset}, not {manifest.next_offset}")
        elif manifest.files and checkpoint.digest != manifest.files[-1].digest:
            checkpoint_problems.append(f"{what}: digest differs from the last file's")
        else:
            try:
                _load_state(directory, checkpoint)
            except StrataError as exc:
                checkpoint_problems.append(f"{what}: {exc}")
    return problems, checkpoint_problems


def _check_file(path: Path, entry: FileEntry, topic: str, state: CacheState | None) -> list[str]:
    problems = []
    with open(path, "rb") as f:
        avro = fastavro.reader(f)
        meta = avro.metadata
        expected = {
            "avro.codec": entry.codec,
            "strata.topic": entry.topic,
            "strata.cluster_id": entry.cluster_id,
            "strata.first_offset": str(entry.first_offset),
            "strata.last_offset": str(entry.last_offset),
            "strata.fingerprints": ",".join(entry.fingerprints),
        }
        for key, value in expected.items():
            if meta.get(key) != value:
                problems.append(f"{entry.name}: metadata {key}={meta.get(key)!r}, the manifest says {value!r}")
        count, previous, fingerprints = 0, entry.first_offset - 1, set()
        for msg in _records(avro):
            offset = msg["offset"]
            if not previous < offset <= entry.last_offset:
                problems.append(f"{entry.name}: offset {offset} out of order or outside {entry.first_offset}..")
                state = None
            previous = offset
            count += 1
            fp = fingerprint_of(msg["value"])
            if fp is not None:
                fingerprints.add(fp)
            if state is not None:
                try:
                    state.apply_at(offset, decode_message(msg["value"], offset, topic))
                except GapError as exc:
                    problems.append(f"{entry.name}: {exc}")
                    state = None
    if count != entry.records:
        problems.append(f"{entry.name}: {count} records, the manifest says {entry.records}")
    if tuple(sorted(fingerprints)) != entry.fingerprints:
        problems.append(f"{entry.name}: its values' schema fingerprints differ from its metadata")
    return problems


# ------------------------------------------------------------------------------------ restore
def restore_archive(settings: Settings, directory: Path, progress: Progress | None = None) -> TransferReport:
    """Produce every archived message, in order, into the settings' cache log, which must be empty.

    The archive is verified first (files, ranges, digests). Keys and values are kept; the broker
    stamps new LogAppendTime timestamps, and offsets are dense (transaction markers of the
    original log are not reproduced).
    """
    started = time.monotonic()
    manifest = _require_manifest(directory)
    if manifest.first_offset != 0:
        raise StrataError(f"{directory} starts at offset {manifest.first_offset}; a restore needs the log from 0")
    problems, _ = _verify(directory)
    if problems:
        more = f" (and {len(problems) - 1} more problem(s))" if len(problems) > 1 else ""
        raise StrataError(f"{directory} fails verification: {problems[0]}{more}")
    ensure_topics(settings)
    reader = CacheLogReader(settings)
    end = reader.end_offset()
    if end:
        raise StrataError(
            f"{reader.topic} is not empty (it ends at offset {end}); restore writes only into an empty "
            "cache log (a new cluster or another --topic-prefix)"
        )
    publisher = Publisher(settings)
    report = TransferReport()
    total = manifest.records
    for entry in manifest.files:
        for msg in _messages(_checked(directory, entry)):
            publisher.publish(reader.topic, msg["value"], key=msg["key"])
            report.records += 1
            if progress is not None and report.records % 1000 == 0:
                progress(report.records, total)
        report.files += 1
        report.bytes += entry.bytes
    publisher.flush()
    if progress is not None:
        progress(total, total)
    report.next_offset = reader.end_offset()
    if report.next_offset != report.records:
        raise StrataError(
            f"{reader.topic} ends at offset {report.next_offset} after restoring {report.records} records: "
            "something else wrote into it"
        )
    report.seconds = time.monotonic() - started
    return report

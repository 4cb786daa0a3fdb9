"""The manifest of a cache-log archive, and the file plumbing around it (atomic writes, SHA-256).

``manifest.json`` is the archive's table of contents and is always written last: a file it does
not name is not part of the archive. Each entry holds a file's offset range, record count, size,
SHA-256 and the digest of the canonical snapshot after its last offset.
"""

from __future__ import annotations

import builtins
import hashlib
import json
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from strata.errors import StrataError

FORMAT = 1
MANIFEST = "manifest.json"
CHECKPOINT = "state.zst"  # the fold state after the last exported offset (projector.fold.statecodec)
BASE = "base-state.zst"  # the fold state before the first offset, when an archive starts after 0
CODECS = ("zstandard", "deflate")  # the Avro container codecs an archive is written with
DEFAULT_RECORDS_PER_FILE = 100_000


@dataclass(frozen=True)
class FileEntry:
    name: str
    first_offset: int
    last_offset: int  # the range [first_offset, last_offset] is covered; transaction markers take offsets too
    records: int
    bytes: int
    sha256: str
    digest: str  # of the canonical snapshot after last_offset
    codec: str
    topic: str
    cluster_id: str
    fingerprints: tuple[str, ...] = ()


@dataclass(frozen=True)
class StateEntry:
    """A fold state stored beside the manifest (statecodec bytes)."""

    name: str
    next_offset: int
    version: int
    digest: str
    bytes: int
    sha256: str


@dataclass
class Manifest:
    topic: str
    cluster_id: str
    first_offset: int
    fold: dict[str, Any]  # {"scheduler_names": [...], "default_queue": ...}
    strata_version: str
    files: list[FileEntry] = field(default_factory=list)
    base: StateEntry | None = None
    checkpoint: StateEntry | None = None
    format: int = FORMAT

    @property
    def next_offset(self) -> int:
        return self.files[-1].last_offset + 1 if self.files else self.first_offset

    @property
    def records(self) -> int:
        return sum(f.records for f in self.files)

    @property
    def bytes(self) -> int:
        return sum(f.bytes for f in self.files)

    def to_json(self) -> builtins.bytes:  # `bytes` in this class is the property above
        doc = asdict(self)
        return (json.dumps(doc, indent=2, sort_keys=True) + "\n").encode()

    @classmethod
    def from_json(cls, data: builtins.bytes) -> Manifest:
        doc = json.loads(data)
        if not isinstance(doc, dict):
            raise ValueError("not a JSON object")
        if doc.get("format") != FORMAT:
            raise ValueError(f"manifest format {doc.get('format')!r}; this Strata reads format {FORMAT}")
        files = [FileEntry(**{**f, "fingerprints": tuple(f.get("fingerprints", ()))}) for f in doc.pop("files")]
        base = doc.pop("base", None)
        checkpoint = doc.pop("checkpoint", None)
        return cls(
            **doc,
            files=files,
            base=StateEntry(**base) if base else None,
            checkpoint=StateEntry(**checkpoint) if checkpoint else None,
        )


def read_manifest(directory: Path) -> Manifest | None:
    """The archive's manifest; None when the directory has none. A broken one is an error."""
    path = directory / MANIFEST
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise StrataError(f"cannot read {path}: {exc.strerror}") from exc
    try:
        return Manifest.from_json(data)
    except (ValueError, TypeError, KeyError) as exc:
        raise StrataError(f"{path} is not a Strata archive manifest: {exc}") from exc


def write_manifest(directory: Path, manifest: Manifest) -> None:
    write_atomically(directory / MANIFEST, manifest.to_json())


def write_atomically(path: Path, data: bytes) -> None:
    """Write under a temporary name, fsync, then rename: a reader sees the old file or the new one."""
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    with open(tmp, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    fsync_directory(path.parent)


def fsync_directory(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(1 << 20):
            digest.update(chunk)
    return digest.hexdigest()


def file_name(first_offset: int, last_offset: int) -> str:
    return f"cache-log-{first_offset:012d}-{last_offset:012d}.avro"

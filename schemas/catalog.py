"""The in-repo schema catalog: every released version of every schema, found by fingerprint.

A schema file is ``avsc/<Name>.v<N>.avsc``. A released file is never edited: a change is a new
version file (``fingerprints.lock`` pins the released ones, the evolution gate checks that each
new version reads the old ones and is read by them). Writers always use the newest version;
readers resolve any known writer version to the newest.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

from fastavro import parse_schema
from fastavro.schema import fingerprint, to_parsing_canonical_form

AVSC_DIR = Path(__file__).with_name("avsc")
LOCK_FILE = Path(__file__).with_name("fingerprints.lock")
_FILE_NAME = re.compile(r"^(?P<name>[A-Za-z_][A-Za-z0-9_]*)\.v(?P<version>[1-9][0-9]*)\.avsc$")


@dataclass(frozen=True)
class SchemaVersion:
    """One released version of one schema."""

    full_name: str  # e.g. strata.log.Bind
    version: int
    path: Path
    source: dict[str, Any]  # the schema JSON as written, defaults and docs included
    parsed: dict[str, Any]  # fastavro's parsed form
    fingerprint: bytes  # CRC-64-AVRO of the parsing canonical form, 8 bytes little-endian

    @property
    def content_sha256(self) -> str:
        """Hash of the whole schema JSON; unlike the fingerprint it sees defaults and logical types."""
        canonical = json.dumps(self.source, sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(canonical.encode()).hexdigest()


class Catalog:
    """Schema versions by full name and by fingerprint."""

    def __init__(self, versions: list[SchemaVersion]) -> None:
        self._by_name: dict[str, list[SchemaVersion]] = {}
        for v in sorted(versions, key=lambda v: (v.full_name, v.version)):
            self._by_name.setdefault(v.full_name, []).append(v)
        # Versions that differ only in defaults or docs share a fingerprint (the canonical form
        # strips both); they decode the same bytes, so the newest one may stand for all.
        self._by_fingerprint = {v.fingerprint: v for v in sorted(versions, key=lambda v: v.version)}

    @classmethod
    def load(cls, directory: Path = AVSC_DIR) -> Catalog:
        versions = []
        for path in sorted(directory.glob("*.avsc")):
            m = _FILE_NAME.match(path.name)
            if m is None:
                raise ValueError(f"schema file {path.name} is not named <Name>.v<N>.avsc")
            versions.append(load_version(path, int(m["version"])))
        return cls(versions)

    def names(self) -> list[str]:
        return sorted(self._by_name)

    def versions(self, full_name: str) -> list[SchemaVersion]:
        return list(self._by_name[full_name])

    def current(self, full_name: str) -> SchemaVersion:
        return self._by_name[full_name][-1]

    def by_fingerprint(self, fp: bytes) -> SchemaVersion | None:
        return self._by_fingerprint.get(fp)

    def all_versions(self) -> list[SchemaVersion]:
        return [v for name in self.names() for v in self._by_name[name]]


def load_version(path: Path, version: int) -> SchemaVersion:
    source = json.loads(path.read_text(encoding="utf-8"))
    parsed = parse_schema(source)
    if not isinstance(parsed, dict):  # a union (list) or a primitive (str) has no name
        raise ValueError(f"{path.name} holds no named schema")
    pcf = to_parsing_canonical_form(parsed)
    fp = bytes.fromhex(fingerprint(pcf, "CRC-64-AVRO"))
    full_name: str = parsed["name"]
    if path.name.split(".v")[0] != full_name.rsplit(".", 1)[-1]:
        raise ValueError(f"{path.name} holds schema {full_name}")
    return SchemaVersion(full_name, version, path, source, parsed, fp)


@cache
def default_catalog() -> Catalog:
    return Catalog.load()

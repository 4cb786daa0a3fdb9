"""The schema-evolution gate.

Two rules keep every message ever written readable:

* a released version is never edited: ``fingerprints.lock`` pins each released file by its
  fingerprint and by a hash of its whole JSON (the fingerprint alone ignores defaults);
* the newest version of a schema reads every older version's messages, and every older version
  reads the newest one's (Avro FULL_TRANSITIVE compatibility, checked by the Apache ``avro``
  package's checker, an implementation independent of fastavro's resolver).

``python -m strata.schemas.evolution`` prints the problems; ``--lock`` adds unreleased versions to the
lock once they pass.
"""

from __future__ import annotations

import json
import sys

import avro.schema
from avro.compatibility import ReaderWriterCompatibilityChecker, SchemaCompatibilityType

from strata.schemas.catalog import LOCK_FILE, Catalog, SchemaVersion, default_catalog


def compatibility_problems(catalog: Catalog) -> list[str]:
    problems = []
    checker = ReaderWriterCompatibilityChecker()  # type: ignore[no-untyped-call]  # avro leaves __init__ unannotated
    for name in catalog.names():
        *older, current = catalog.versions(name)
        for old in older:
            for reader, writer in ((current, old), (old, current)):
                result = checker.get_compatibility(reader=_avro(reader), writer=_avro(writer))
                if result.compatibility is not SchemaCompatibilityType.compatible:
                    kinds = sorted({i.name for i in result.incompatibilities})
                    messages = "; ".join(sorted(map(str, result.messages)))
                    locations = ", ".join(sorted(map(str, result.locations)))
                    problems.append(
                        f"{name}: v{reader.version} cannot read v{writer.version}: "
                        f"{', '.join(kinds)} ({messages} at {locations})"
                    )
    return problems


def lock_entries(catalog: Catalog) -> dict[str, dict[str, str]]:
    return {
        v.path.name: {"fingerprint": v.fingerprint.hex(), "sha256": v.content_sha256} for v in catalog.all_versions()
    }


def lock_problems(catalog: Catalog, locked: dict[str, dict[str, str]]) -> list[str]:
    problems = []
    current = lock_entries(catalog)
    for file_name, entry in sorted(locked.items()):
        if file_name not in current:
            problems.append(f"{file_name}: released but missing; released versions are never removed")
        elif current[file_name] != entry:
            problems.append(f"{file_name}: released but changed; add a new version file instead")
    for file_name in sorted(set(current) - set(locked)):
        problems.append(f"{file_name}: not released yet; run `python -m strata.schemas.evolution --lock`")
    return problems


def read_lock() -> dict[str, dict[str, str]]:
    return json.loads(LOCK_FILE.read_text()) if LOCK_FILE.exists() else {}


def _avro(version: SchemaVersion) -> avro.schema.Schema:
    return avro.schema.parse(json.dumps(version.source))


def main(argv: list[str]) -> int:
    catalog = default_catalog()
    problems = compatibility_problems(catalog)
    locked = read_lock()
    if "--lock" in argv and not problems:
        new = {k: v for k, v in lock_entries(catalog).items() if k not in locked}
        locked.update(new)
        LOCK_FILE.write_text(json.dumps(locked, indent=2, sort_keys=True) + "\n")
        print(f"released {len(new)} version(s)", file=sys.stderr)
    problems += lock_problems(catalog, locked)
    for p in problems:
        print(p)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

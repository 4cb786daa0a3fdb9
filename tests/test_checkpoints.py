"""The SQL checkpoint store against a real SQLite file and a real PostgreSQL server."""

from __future__ import annotations

import hashlib
import multiprocessing
import os
import sqlite3
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import inspect

from strata.projector.checkpoint import Checkpoint, CheckpointInfo, LogIdentity
from strata.projector.sqlstore import Base, SqlCheckpointStore, alembic_config, normalize_url, open_engine

LOG = LogIdentity("strata.cache-log", "cluster-a", "schedulerNames=volcano;defaultQueue=default")


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A URL of an empty database: a SQLite file in a directory that does not exist yet, or a
    fresh database on the real PostgreSQL server."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'state' / 'checkpoints' / 'strata.db'}"
    return request.getfixturevalue("postgres_database")


@pytest.fixture
def open_store(url: str) -> Iterator[Callable[[], SqlCheckpointStore]]:
    """Opens stores on ``url`` and closes every one after the test."""
    stores: list[SqlCheckpointStore] = []

    def open_() -> SqlCheckpointStore:
        stores.append(SqlCheckpointStore(url))
        return stores[-1]

    yield open_
    for store in stores:
        store.close()


@pytest.fixture
def store(open_store: Callable[[], SqlCheckpointStore]) -> SqlCheckpointStore:
    return open_store()


def checkpoint(version: int, log: LogIdentity = LOG, state: bytes | None = None, state_format: int = 1) -> Checkpoint:
    state = f"state of {log} at {version}".encode() if state is None else state
    info = CheckpointInfo(log, version, hashlib.sha256(state).hexdigest(), len(state), "")
    return Checkpoint(info, state, state_format)


def versions(store: SqlCheckpointStore, log: LogIdentity = LOG) -> list[int]:
    return [info.version for info in store.list(log)]


def test_save_latest_list_prune(store: SqlCheckpointStore) -> None:
    assert store.latest(LOG) is None
    assert store.list(LOG) == []
    for version in (300, 100, 200):  # saved out of order, listed oldest first
        store.save(checkpoint(version, state_format=version // 100))

    newest = store.latest(LOG)
    assert newest is not None
    assert newest.state == checkpoint(300).state
    assert newest.state_format == 3
    assert newest.info.log == LOG
    assert newest.info.digest == checkpoint(300).info.digest
    assert newest.info.size == len(checkpoint(300).state)
    assert versions(store) == [100, 200, 300]
    assert [info.digest for info in store.list(LOG)] == [checkpoint(v).info.digest for v in (100, 200, 300)]

    assert store.prune(LOG, keep=2) == 1
    assert versions(store) == [200, 300]
    assert store.prune(LOG, keep=2) == 0
    assert store.prune(LOG, keep=5) == 0
    assert store.prune(LOG, keep=0) == 2
    assert store.list(LOG) == []
    assert store.latest(LOG) is None
    with pytest.raises(ValueError):
        store.prune(LOG, keep=-1)


def test_latest_at_or_below(store: SqlCheckpointStore) -> None:
    for version in (0, 10, 20):
        store.save(checkpoint(version))

    def at(bound: int | None) -> int | None:
        found = store.latest(LOG, at_or_below=bound)
        return None if found is None else found.info.version

    assert at(None) == 20
    assert at(20) == 20
    assert at(19) == 10
    assert at(10) == 10
    assert at(9) == 0
    assert at(0) == 0
    assert at(-1) is None
    assert store.latest(LOG, 15).state == checkpoint(10).state  # type: ignore[union-attr]


def test_created_at_is_utc_iso8601(store: SqlCheckpointStore) -> None:
    before = datetime.now(UTC).replace(microsecond=0)
    store.save(checkpoint(1))
    created = datetime.fromisoformat(store.list(LOG)[0].created_at)
    assert created.utcoffset() is not None and created.utcoffset().total_seconds() == 0  # type: ignore[union-attr]
    assert abs((created - before).total_seconds()) < 60  # the database's clock, not the caller's ""
    assert store.latest(LOG).info.created_at == store.list(LOG)[0].created_at  # type: ignore[union-attr]


def test_saving_a_version_twice_keeps_the_first(store: SqlCheckpointStore) -> None:
    first = checkpoint(42, state=b"first")
    store.save(first)
    store.save(checkpoint(42, state=b"second, longer", state_format=2))
    kept = store.latest(LOG)
    assert kept is not None
    assert (kept.state, kept.state_format, kept.info.digest) == (b"first", 1, first.info.digest)
    assert versions(store) == [42]


def test_logs_never_mix(store: SqlCheckpointStore) -> None:
    # differ in one field each: another topic, another cluster (a restored log), another fold
    others = [
        LogIdentity("other.cache-log", LOG.cluster_id, LOG.fold),
        LogIdentity(LOG.topic, "cluster-b", LOG.fold),
        LogIdentity(LOG.topic, LOG.cluster_id, "schedulerNames=volcano;defaultQueue=other"),
    ]
    for version in (1, 2, 3):
        store.save(checkpoint(version))
    for n, log in enumerate(others):
        store.save(checkpoint(10 * (n + 1), log))  # a newer version than any of LOG's
        store.save(checkpoint(2, log))  # the same version as one of LOG's: no conflict

    assert versions(store) == [1, 2, 3]
    assert store.latest(LOG).state == checkpoint(3).state  # type: ignore[union-attr]
    assert store.latest(LOG, 2).state == checkpoint(2).state  # type: ignore[union-attr]
    for n, log in enumerate(others):
        assert versions(store, log) == [2, 10 * (n + 1)]
        assert store.latest(log).info.log == log  # type: ignore[union-attr]
        assert store.latest(log, 2).state == checkpoint(2, log).state  # type: ignore[union-attr]
    assert store.latest(LogIdentity("unknown", LOG.cluster_id, LOG.fold)) is None

    assert store.prune(others[0], keep=0) == 2
    assert versions(store) == [1, 2, 3]
    assert [versions(store, log) for log in others] == [[], [2, 20], [2, 30]]


def test_a_20_mb_state_round_trips_byte_exact(store: SqlCheckpointStore) -> None:
    state = os.urandom(20 * 1024 * 1024)  # incompressible, and every byte value occurs
    store.save(checkpoint(7, state=state))
    back = store.latest(LOG)
    assert back is not None
    assert type(back.state) is bytes
    assert back.state == state
    assert back.info.size == len(state)
    assert store.list(LOG)[0].size == len(state)


def test_migrations_create_the_schema_on_an_empty_database_and_are_idempotent(
    url: str, open_store: Callable[[], SqlCheckpointStore]
) -> None:
    head = ScriptDirectory.from_config(alembic_config()).get_current_head()
    engine = open_engine(url)  # creates a SQLite file's directory, migrates nothing
    try:
        with engine.connect() as conn:
            assert inspect(conn).get_table_names() == []

        store = open_store()
        store.save(checkpoint(5))
        store.close()
        again = open_store()  # a second upgrade finds nothing to do and keeps the data
        assert versions(again) == [5]

        with engine.connect() as conn:
            assert MigrationContext.configure(conn).get_current_heads() == (head,)
            assert sorted(inspect(conn).get_table_names()) == [
                "alembic_version",
                "audit_logs",
                "audit_records",
                "audit_subjects",
                "checkpoints",
            ]
            unique = inspect(conn).get_unique_constraints("checkpoints")
            assert [(u["name"], u["column_names"]) for u in unique] == [
                ("uq_checkpoints_topic_cluster_id_fold_version", ["topic", "cluster_id", "fold", "version"])
            ]
            # the migrations build exactly what the models describe (the audit's models too)
            import strata.projector.auditstore  # noqa: F401

            assert compare_metadata(MigrationContext.configure(conn), Base.metadata) == []
    finally:
        engine.dispose()


WRITERS, PER_WRITER = 2, 25


def replica(url: str, n: int, start: Any) -> None:
    """One of several processes on one database: opens (and so migrates) a store, then saves
    versions of its own and one version every replica saves."""
    start.wait()
    with SqlCheckpointStore(url) as store:
        for i in range(PER_WRITER):
            store.save(checkpoint(i * WRITERS + n, state=os.urandom(64 * 1024)))
            store.save(checkpoint(1000))  # the same version from every replica: one row, no error


def test_concurrent_first_opens_and_writers(url: str, open_store: Callable[[], SqlCheckpointStore]) -> None:
    """Replicas in processes of their own migrate the empty database at the same moment, then
    save at the same time: nothing fails, nothing is lost."""
    spawn = multiprocessing.get_context("spawn")  # a clean interpreter, like another replica's
    start = spawn.Barrier(WRITERS)
    replicas = [spawn.Process(target=replica, args=(url, n, start)) for n in range(WRITERS)]
    for p in replicas:
        p.start()
    for p in replicas:
        p.join(timeout=120)
    assert [p.exitcode for p in replicas] == [0] * WRITERS  # a failed replica's traceback is in the output
    assert versions(open_store()) == [*range(WRITERS * PER_WRITER), 1000]


def test_an_in_memory_sqlite_database_opens(tmp_path: Path) -> None:
    """It has no WAL ("memory" is its only journal mode): opening it must not wait for one."""
    with open_engine("sqlite://").connect() as conn:
        assert conn.exec_driver_sql("PRAGMA journal_mode").scalar() == "memory"


def test_the_sqlite_file_is_in_wal_mode(tmp_path: Path) -> None:
    path = tmp_path / "a" / "b" / "strata.db"  # parent directories are created
    with SqlCheckpointStore(f"sqlite:///{path}") as store:
        store.save(checkpoint(1))
        # the journal mode is a property of the file: a plain sqlite3 connection sees it too
        with sqlite3.connect(path) as raw:
            assert raw.execute("PRAGMA journal_mode").fetchone() == ("wal",)
            plan = raw.execute(
                "EXPLAIN QUERY PLAN SELECT * FROM checkpoints"
                " WHERE topic = ? AND cluster_id = ? AND fold = ? AND version <= ? ORDER BY version DESC LIMIT 1",
                ("t", "c", "f", 1),
            ).fetchall()
        raw.close()
        # the latest-lookup is an index search on the unique constraint, without a sort
        assert any("USING INDEX" in row[-1] for row in plan), plan
        assert not any("TEMP B-TREE" in row[-1] for row in plan), plan
        with store.engine.connect() as conn:
            assert conn.exec_driver_sql("PRAGMA busy_timeout").scalar() > 0
            assert conn.exec_driver_sql("PRAGMA foreign_keys").scalar() == 1


def test_url_forms() -> None:
    assert normalize_url("postgresql://u@h:1/d").drivername == "postgresql+psycopg"
    assert normalize_url("postgres://u@h:1/d").drivername == "postgresql+psycopg"
    assert normalize_url("postgresql+psycopg://u@h:1/d").drivername == "postgresql+psycopg"
    assert normalize_url("sqlite:///x.db").drivername == "sqlite"
    with pytest.raises(Exception, match="SQLite and PostgreSQL"):
        SqlCheckpointStore("mysql://u@h/d")


@pytest.mark.postgres
def test_a_plain_postgresql_url_uses_psycopg(postgres_database: str) -> None:
    plain = postgres_database.replace("postgresql+psycopg://", "postgresql://")
    with SqlCheckpointStore(plain) as store:
        assert store.engine.dialect.driver == "psycopg"
        store.save(checkpoint(1))
        assert versions(store) == [1]

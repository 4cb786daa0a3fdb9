"""The SQL checkpoint store against a real SQLite file and a real PostgreSQL server: the
``CheckpointStore`` contract (tests/contracts.py) on each, then what is the SQL engine's own."""

from __future__ import annotations

import multiprocessing
import os
import sqlite3
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import inspect

from strata.projector.checkpoints.interface import CheckpointStore
from strata.projector.checkpoints.sql import (
    SCHEMA_HEAD,
    Base,
    SqlCheckpointStore,
    alembic_config,
    normalize_url,
    open_engine,
)
from tests.contracts import CheckpointStoreContract, checkpoint, versions


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


class TestSqliteCheckpointStore(CheckpointStoreContract):
    @pytest.fixture
    def store(self, tmp_path: Path) -> Iterator[CheckpointStore]:
        store = SqlCheckpointStore(f"sqlite:///{tmp_path / 'state' / 'checkpoints' / 'strata.db'}")
        yield store
        store.close()


@pytest.mark.postgres
class TestPostgresCheckpointStore(CheckpointStoreContract):
    @pytest.fixture
    def store(self, postgres_database: str) -> Iterator[CheckpointStore]:
        store = SqlCheckpointStore(postgres_database)
        yield store
        store.close()


def test_migrations_create_the_schema_on_an_empty_database_and_are_idempotent(
    url: str, open_store: Callable[[], SqlCheckpointStore]
) -> None:
    head = ScriptDirectory.from_config(alembic_config()).get_current_head()
    assert head == SCHEMA_HEAD  # what a store opened at head skips Alembic by
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
                "audit_blocks",
                "audit_logs",
                "audit_postings",
                "checkpoints",
            ]
            unique = inspect(conn).get_unique_constraints("checkpoints")
            assert [(u["name"], u["column_names"]) for u in unique] == [
                ("uq_checkpoints_topic_cluster_id_fold_version", ["topic", "cluster_id", "fold", "version"])
            ]
            # the migrations build exactly what the models describe (the audit's models too)
            import strata.projector.auditindex.store  # noqa: F401

            assert compare_metadata(MigrationContext.configure(conn), Base.metadata) == []
    finally:
        engine.dispose()


def test_sqlite_lists_checkpoints_from_an_index_without_reading_their_states(tmp_path: Path) -> None:
    """``list`` reads columns a row keeps after the state's blob: without a covering index
    SQLite reads every checkpoint's whole blob to reach them (8 ms for six of 18 MB)."""
    path = tmp_path / "strata.db"
    SqlCheckpointStore(f"sqlite:///{path}").close()
    with sqlite3.connect(path) as conn:
        plan = " ".join(
            row[-1]
            for row in conn.execute(
                "EXPLAIN QUERY PLAN SELECT version, digest, size, created_at FROM checkpoints "
                "WHERE topic = ? AND cluster_id = ? AND fold = ? ORDER BY version",
                ("t", "c", "f"),
            )
        )
    assert "COVERING INDEX ix_checkpoints_listed" in plan, plan


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

"""The SQL checkpoint store: ``CheckpointStore`` on SQLite (the default) or PostgreSQL.

One table, ``checkpoints``, created and upgraded by the Alembic migrations shipped in
``projector/migrations``; opening a store runs ``alembic upgrade head``, so an installed Strata
migrates its own database and no ``alembic.ini`` is needed.
"""

from __future__ import annotations

import sqlite3
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sqlalchemy import (
    BigInteger,
    Connection,
    DateTime,
    Engine,
    Index,
    Integer,
    LargeBinary,
    MetaData,
    String,
    Text,
    UniqueConstraint,
    create_engine,
    delete,
    event,
    func,
    select,
)
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.engine import URL, make_url
from sqlalchemy.exc import DBAPIError
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

from strata.errors import StrataError
from strata.projector.checkpoints.interface import Checkpoint, CheckpointInfo, CheckpointStore, LogIdentity

if TYPE_CHECKING:
    from alembic.config import Config

SQLITE_BUSY_TIMEOUT_MS = 30_000  # how long a writer waits for another (a large checkpoint takes a while)
MIGRATIONS = "strata.projector:migrations"  # Alembic resolves package:path, so the installed package is enough
_MIGRATION_LOCK = 0x5354_5241_5441  # "STRATA": a PostgreSQL advisory lock key held while migrating

# Alembic's ``context`` and ``op`` are module-level proxies: one migration at a time per process.
_ALEMBIC = threading.Lock()

# INSERT ... ON CONFLICT DO NOTHING exists only in the dialects' own Insert classes
_INSERTS: dict[str, Callable[[type[Base]], sqlite.Insert | postgresql.Insert]] = {
    "sqlite": sqlite.insert,
    "postgresql": postgresql.insert,
}

# Explicit constraint names, so every database (and every later migration) agrees on them.
NAMING_CONVENTION = {
    "ix": "ix_%(table_name)s_%(column_0_N_name)s",
    "uq": "uq_%(table_name)s_%(column_0_N_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}


class Base(DeclarativeBase):
    metadata = MetaData(naming_convention=NAMING_CONVENTION)


class CheckpointRow(Base):
    __tablename__ = "checkpoints"
    # The unique constraint's index (topic, cluster_id, fold, version) is also the index of the
    # latest-lookups: equality on the first three columns, then a backward scan on version. The
    # listing's index covers what ``list`` reads, which the rows keep after the state's blob.
    __table_args__ = (
        UniqueConstraint("topic", "cluster_id", "fold", "version"),
        Index("ix_checkpoints_listed", "topic", "cluster_id", "fold", "version", "digest", "size", "created_at"),
    )

    # SQLite autoincrements only an INTEGER PRIMARY KEY (the rowid)
    id: Mapped[int] = mapped_column(BigInteger().with_variant(Integer(), "sqlite"), primary_key=True)
    topic: Mapped[str] = mapped_column(String(249))  # Kafka's longest topic name
    cluster_id: Mapped[str] = mapped_column(String(255))
    fold: Mapped[str] = mapped_column(Text)
    version: Mapped[int] = mapped_column(BigInteger)
    digest: Mapped[str] = mapped_column(String(64))
    state: Mapped[bytes] = mapped_column(LargeBinary)
    state_format: Mapped[int] = mapped_column(Integer)
    size: Mapped[int] = mapped_column(BigInteger)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), server_default=func.now())


def normalize_url(url: str | URL) -> URL:
    """The URL with a driver SQLAlchemy can use: plain ``postgresql://`` means psycopg 3."""
    parsed = make_url(url)
    if parsed.drivername in ("postgresql", "postgres"):
        parsed = parsed.set(drivername="postgresql+psycopg")
    return parsed


def open_engine(url: str | URL) -> Engine:
    parsed = normalize_url(url)
    if parsed.get_backend_name() not in _INSERTS:
        raise StrataError(f"the checkpoint store supports SQLite and PostgreSQL, not {parsed.get_backend_name()}")
    if parsed.get_backend_name() != "sqlite":
        return create_engine(parsed, pool_pre_ping=True)
    if parsed.database and parsed.database != ":memory:" and not parsed.query.get("uri"):
        Path(parsed.database).expanduser().parent.mkdir(parents=True, exist_ok=True)
    engine = create_engine(parsed)
    event.listen(engine, "connect", _sqlite_connect)
    event.listen(engine, "begin", _sqlite_begin)
    return engine


def _sqlite_connect(dbapi_connection: Any, _record: Any) -> None:
    # SQLAlchemy emits BEGIN itself (_sqlite_begin), so DDL and reads are transactional too;
    # the sqlite3 module's legacy mode would autocommit each CREATE TABLE of a migration.
    dbapi_connection.isolation_level = None
    cursor = dbapi_connection.cursor()
    cursor.execute(f"PRAGMA busy_timeout={SQLITE_BUSY_TIMEOUT_MS}")  # first: the WAL switch may have to wait
    cursor.execute("PRAGMA foreign_keys=ON")
    # WAL: readers never block the writer, and another process's writes wait instead of failing.
    # The switch itself needs the file to itself and SQLite answers "locked" at once, without its
    # busy handler, when another process opens the new database at the same moment: ask again.
    # The answer is the mode in force; an in-memory database answers "memory" and stays so.
    deadline = time.monotonic() + SQLITE_BUSY_TIMEOUT_MS / 1000
    while True:
        try:
            mode = cursor.execute("PRAGMA journal_mode=WAL").fetchone()[0].lower()
        except sqlite3.OperationalError as exc:
            if "locked" not in str(exc) or time.monotonic() > deadline:
                raise
            mode = "locked"
        if mode in ("wal", "memory"):
            break
        if time.monotonic() > deadline:
            raise sqlite3.OperationalError(f"cannot switch the database to WAL: its journal mode stays {mode}")
        time.sleep(0.02)
    # In WAL mode NORMAL syncs at the WAL's checkpoints, not at every commit (the audit writer
    # commits every 1,024 records when it keeps up; an fsync took 67 ms on this machine's disk):
    # a crashed process loses nothing committed, and what a power loss takes back (the newest
    # commits, never consistency) derives again from the cache log.
    cursor.execute("PRAGMA synchronous=NORMAL")
    cursor.close()


def _sqlite_begin(conn: Connection) -> None:
    # IMMEDIATE takes the write lock up front (waiting on busy_timeout), for transactions that
    # read before they write: a deferred one would fail at once when another writer got in between.
    conn.exec_driver_sql("BEGIN IMMEDIATE" if conn.get_execution_options().get("sqlite_immediate") else "BEGIN")


def alembic_config(connection: Connection | None = None) -> Config:
    """The migrations' configuration, without an ini file; env.py migrates ``connection``."""
    from alembic.config import Config

    config = Config()
    config.set_main_option("script_location", MIGRATIONS)
    config.attributes["connection"] = connection
    return config


# The newest migration's revision (tests/projector/checkpoints/test_sql.py checks it is Alembic's head): a
# database already there is opened without loading Alembic and its scripts, a third of a short
# command's time (`strata history`).
SCHEMA_HEAD = "0006"


def _at_head(engine: Engine) -> bool:
    try:
        with engine.connect() as conn:
            return conn.exec_driver_sql("SELECT version_num FROM alembic_version").scalars().all() == [SCHEMA_HEAD]
    except DBAPIError:  # no alembic_version table yet
        return False


def upgrade(engine: Engine) -> None:
    """``alembic upgrade head`` in one transaction that concurrent openers (other processes too) wait for."""
    if _at_head(engine):
        return
    from alembic import command

    with _ALEMBIC, engine.connect().execution_options(sqlite_immediate=True) as conn, conn.begin():
        if conn.dialect.name == "postgresql":
            conn.execute(select(func.pg_advisory_xact_lock(_MIGRATION_LOCK)))
        command.upgrade(alembic_config(conn), "head")


def _utc_iso(moment: datetime) -> str:
    # SQLite's CURRENT_TIMESTAMP is UTC without a zone; PostgreSQL's is in the session's zone
    aware = moment if moment.tzinfo else moment.replace(tzinfo=UTC)
    return aware.astimezone(UTC).isoformat()


class SqlCheckpointStore:
    """``CheckpointStore`` on a SQLAlchemy URL (``sqlite:///path``, ``postgresql+psycopg://...``).

    ``created_at`` is the database's clock at save, one clock for every writer; the value in the
    saved ``CheckpointInfo`` is not kept.
    """

    def __init__(self, url: str | URL) -> None:
        self.engine = open_engine(url)
        self._insert = _INSERTS[self.engine.dialect.name]
        try:
            upgrade(self.engine)
        except BaseException:
            self.engine.dispose()
            raise

    def __enter__(self) -> SqlCheckpointStore:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()

    def save(self, checkpoint: Checkpoint) -> None:
        info = checkpoint.info
        statement = (
            self._insert(CheckpointRow)
            .values(
                topic=info.log.topic,
                cluster_id=info.log.cluster_id,
                fold=info.log.fold,
                version=info.version,
                digest=info.digest,
                state=checkpoint.state,
                state_format=checkpoint.state_format,
                size=len(checkpoint.state),
            )
            .on_conflict_do_nothing(index_elements=["topic", "cluster_id", "fold", "version"])
        )
        with self.engine.begin() as conn:
            conn.execute(statement)

    def latest(self, log: LogIdentity, at_or_below: int | None = None) -> Checkpoint | None:
        query = select(CheckpointRow).where(*_of(log)).order_by(CheckpointRow.version.desc()).limit(1)
        if at_or_below is not None:
            query = query.where(CheckpointRow.version <= at_or_below)
        with self.engine.connect() as conn:
            row = conn.execute(query).one_or_none()
        if row is None:
            return None
        return Checkpoint(_info(log, row), bytes(row.state), row.state_format)

    def list(self, log: LogIdentity) -> list[CheckpointInfo]:
        columns = [CheckpointRow.version, CheckpointRow.digest, CheckpointRow.size, CheckpointRow.created_at]
        query = select(*columns).where(*_of(log)).order_by(CheckpointRow.version)
        with self.engine.connect() as conn:
            return [_info(log, row) for row in conn.execute(query)]

    def prune(self, log: LogIdentity, keep: int) -> int:
        if keep < 0:
            raise ValueError(f"keep must be >= 0, not {keep}")
        # One statement (the newest version to delete is a subquery): atomic, and on SQLite it
        # takes the write lock at once instead of upgrading a read.
        cutoff = (
            select(CheckpointRow.version)
            .where(*_of(log))
            .order_by(CheckpointRow.version.desc())
            .offset(keep)
            .limit(1)
            .scalar_subquery()
        )
        with self.engine.begin() as conn:
            return conn.execute(delete(CheckpointRow).where(*_of(log), CheckpointRow.version <= cutoff)).rowcount

    def forked(self) -> None:
        self.engine.dispose(close=False)  # SQLAlchemy's recipe for a pool inherited across fork()

    def close(self) -> None:
        self.engine.dispose()


def _implements(store: SqlCheckpointStore) -> CheckpointStore:
    """Never called: mypy checks here that SqlCheckpointStore satisfies the CheckpointStore
    Protocol (like kube-scheduler's `var _ Cache = &cacheImpl{}`) and names any member that differs."""
    return store


def _of(log: LogIdentity) -> tuple[Any, ...]:
    return (
        CheckpointRow.topic == log.topic,
        CheckpointRow.cluster_id == log.cluster_id,
        CheckpointRow.fold == log.fold,
    )


def _info(log: LogIdentity, row: Any) -> CheckpointInfo:
    return CheckpointInfo(log, row.version, row.digest, row.size, _utc_iso(row.created_at))

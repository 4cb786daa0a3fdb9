"""Shared fixtures. Tests marked ``kafka`` run against the real broker that `strata dev up`
starts (or the one STRATA_KAFKA_BOOTSTRAP names); each test gets topics of its own prefix."""

from __future__ import annotations

import fcntl
import os
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

import pytest

from strata.log.config import Settings, settings_from
from strata.log.topics import drop_topics, ensure_topics
from tests.paths import REPO

TEST_PREFIX = "test-"  # every topic a test creates starts with it, and is deleted afterwards


@pytest.fixture(scope="session")
def broker() -> Iterator[Settings]:
    if os.environ.get("STRATA_KAFKA_BOOTSTRAP"):
        settings = settings_from()
    else:
        from strata.dev.stack import Stack

        env = Stack(Path(os.environ.get("STRATA_DATA_DIR") or REPO / ".strata")).up()
        settings = settings_from(bootstrap=env["STRATA_KAFKA_BOOTSTRAP"], data_dir=env["STRATA_DATA_DIR"])
    # A broker that outlives the tests would otherwise gather thousands of partitions and take
    # minutes to start next time; but another test session may be running against the same
    # broker, and its topics must stay. Sessions hold a shared lock; the last one out, which gets
    # the lock alone, sweeps what killed sessions left behind.
    lock = _session_lock(settings.data_dir)
    yield settings
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)  # converts the shared lock, if alone
    except BlockingIOError:
        return  # another session is running
    drop_topics(settings.with_(topic_prefix=TEST_PREFIX))


def _session_lock(data_dir: Path) -> IO[bytes]:
    data_dir.mkdir(parents=True, exist_ok=True)
    lock = (data_dir / "test-sessions.lock").open("ab")
    fcntl.flock(lock, fcntl.LOCK_SH)
    return lock  # held (shared) until the process ends


@pytest.fixture
def kafka(broker: Settings) -> Iterator[Settings]:
    """Settings with a fresh topic prefix whose topics exist (and are deleted afterwards)."""
    settings = broker.with_(topic_prefix=f"{TEST_PREFIX}{uuid.uuid4().hex[:12]}.", command_partitions=2)
    ensure_topics(settings)
    yield settings
    drop_topics(settings)


@pytest.fixture(scope="session")
def postgres_url() -> str:
    """The PostgreSQL of STRATA_PG_URL, else the local one of `strata dev up` (started if need be)."""
    if os.environ.get("STRATA_PG_URL"):
        return os.environ["STRATA_PG_URL"]
    from strata.dev.stack.postgres import PostgresServer

    server = PostgresServer(Path(os.environ.get("STRATA_DATA_DIR") or REPO / ".strata"))
    if not server.installed():
        pytest.skip("PostgreSQL is not installed (scripts/bootstrap.sh installs the Debian package)")
    server.up(log=lambda _msg: None)
    return server.url


@pytest.fixture
def postgres_database(postgres_url: str) -> Iterator[str]:
    """The URL of a fresh, empty database on that server, dropped after the test."""
    from sqlalchemy import create_engine

    from strata.projector.checkpoints.sql import normalize_url

    server = normalize_url(postgres_url)
    name = f"strata_test_{uuid.uuid4().hex[:12]}"
    # CREATE/DROP DATABASE cannot run inside a transaction
    admin = create_engine(server, isolation_level="AUTOCOMMIT")
    try:
        with admin.connect() as conn:
            conn.exec_driver_sql(f'CREATE DATABASE "{name}"')
        yield server.set(database=name).render_as_string(hide_password=False)
        _drop(admin, name)
    finally:
        admin.dispose()


def _drop(admin: Any, name: str) -> None:
    """DROP DATABASE ... WITH (FORCE), asked again while it fails: an autovacuum worker that has
    just started on the new database belongs to the superuser, whom the test's role may not stop."""
    from sqlalchemy.exc import ProgrammingError

    for attempt in range(20):
        try:
            with admin.connect() as conn:
                conn.exec_driver_sql(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
            return
        except ProgrammingError:
            if attempt == 19:
                raise
            time.sleep(0.5)


@pytest.fixture(scope="session")
def kubeconfig() -> str:
    """The admin kubeconfig of the cluster KUBECONFIG names, else of the local control plane (etcd and
    kube-apiserver with Strata's CRDs, started by the Stack; built first when the cache lacks them)."""
    if os.environ.get("KUBECONFIG"):
        return os.environ["KUBECONFIG"]
    from strata.dev.stack import Stack

    return Stack(Path(os.environ.get("STRATA_DATA_DIR") or REPO / ".strata")).up_kube()["KUBECONFIG"]


@pytest.fixture(scope="session")
def prometheus() -> tuple[str, Path]:
    """The URL of the stack's Prometheus and the data directory whose target files it reads:
    STRATA_PROMETHEUS_URL and STRATA_DATA_DIR when set (`eval "$(strata dev up)"`), else the
    local one, started if need be."""
    data_dir = Path(os.environ.get("STRATA_DATA_DIR") or REPO / ".strata")
    if os.environ.get("STRATA_PROMETHEUS_URL"):
        return os.environ["STRATA_PROMETHEUS_URL"], data_dir
    from strata.dev.stack.prometheus import PrometheusServer

    server = PrometheusServer(data_dir)
    if not server.installed():
        pytest.skip("Prometheus is not installed (scripts/bootstrap.sh installs the Debian package)")
    server.up(log=lambda _msg: None)
    return server.url, data_dir

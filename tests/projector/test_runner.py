"""The log path on the real broker: `strata snapshot` equals `strata replay` byte for byte, and
checkpoints (SQLite and PostgreSQL) restore to the same digests, SIGKILL included."""

from __future__ import annotations

import itertools
import os
import re
import signal
import subprocess
import threading
import time
import uuid
from pathlib import Path

import pytest

from strata.dev.gen import generate
from strata.ingest.from_trace import publish_trace
from strata.log import readahead
from strata.log.config import Settings
from strata.log.metrics import FOLLOWING
from strata.log.topics import ensure_topics
from strata.projector.auditindex.store import AuditIndex
from strata.projector.checkpoints.sql import SqlCheckpointStore
from strata.projector.fold.state import FoldConfig
from strata.projector.replay import replay_file
from strata.projector.runner import LogRunner
from tests.cli.test_cli import STRATA, run
from tests.cli.test_log import env_of
from tests.conftest import drop_topics
from tests.log.test_cachelog import _readers
from tests.paths import CONFORMANCE

pytestmark = pytest.mark.kafka
CONFORMANCE = CONFORMANCE
TRACES = sorted(p.name for p in CONFORMANCE.glob("*.jsonl"))


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def db_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'checkpoints.db'}"
    return request.getfixturevalue("postgres_url")


def test_every_conformance_trace_through_the_broker_equals_replay(broker: Settings, tmp_path: Path):
    store = SqlCheckpointStore(f"sqlite:///{tmp_path / 'c.db'}")
    for name in TRACES:
        settings = broker.with_(topic_prefix=f"test-conf-{uuid.uuid4().hex[:8]}.", command_partitions=1)
        ensure_topics(settings)
        publish_trace(settings, CONFORMANCE / name)
        runner = LogRunner(settings, store, FoldConfig())
        end = runner.reader.end_offset()
        expected = replay_file(CONFORMANCE / name)[0].snapshot()
        assert end == expected.version, name
        assert runner.state_at(end).snapshot().canonical_bytes() == expected.canonical_bytes(), name
        if name == "c04.jsonl":
            until = replay_file(CONFORMANCE / name, until=500)[0].snapshot()
            assert runner.state_at(500).snapshot().canonical_bytes() == until.canonical_bytes()
        drop_topics(settings)


def test_snapshot_command_equals_replay_command_byte_for_byte(kafka: Settings, tmp_path: Path):
    env = {**env_of(kafka), "STRATA_DB_URL": f"sqlite:///{tmp_path / 'c.db'}"}
    trace = CONFORMANCE / "c05.jsonl"
    assert run("ingest", "--from", str(trace), env=env).returncode == 0
    assert run("snapshot", env=env).stdout == run("replay", str(trace)).stdout
    assert (
        run("snapshot", "--at-offset", "999", "--digest", env=env).stdout
        == run("replay", str(trace), "--until", "1000", "--digest").stdout
    )
    beyond = run("snapshot", "--at-offset", "999999", env=env)
    assert beyond.returncode == 1 and "beyond the log's end" in beyond.stderr


def test_checkpoints_restore_to_the_digest_of_a_full_fold(kafka: Settings, db_url: str):
    trace = CONFORMANCE / "c06.jsonl"
    publish_trace(kafka, trace)
    env = {**env_of(kafka), "STRATA_DB_URL": db_url}
    out = run(
        "project", "--stop-at-end", "--checkpoint-every", "700", env={**env, "STRATA_LOG_LEVEL": "INFO"}, timeout=120
    )
    assert out.returncode == 0, out.stderr
    assert "stopped at version 4000" in out.stderr
    store = SqlCheckpointStore(db_url)
    runner = LogRunner(kafka, store, FoldConfig())
    infos = store.list(runner.identity)
    versions = [i.version for i in infos]
    # A checkpoint still being written when the fold reaches the end is let go of (the final one
    # supersedes it): on a slow machine the one at 700, the 3,300 records after it folded first.
    left = [int(v) for v in re.findall(r"the checkpoint at version (\d+) let go of", out.stderr)]
    started = sorted({*versions[:-1], *left})
    # due every 700 records, once the writer has rested three times as long as the last one took
    # (the fold does not wait for it); the last is the final version
    assert started and started[0] == 700 and versions[-1] == 4000, (versions, left)
    assert all(later - earlier >= 700 for earlier, later in itertools.pairwise(started))
    for info in infos:  # every checkpoint is exactly the fold of its prefix
        assert info.digest == replay_file(trace, until=info.version)[0].snapshot().digest()
    for target in (0, 699, 700, 701, 2222, 4000):  # restore at or below, then the tail
        assert runner.state_at(target).snapshot().digest() == replay_file(trace, until=target)[0].snapshot().digest()


def test_a_projector_killed_between_checkpoints_resumes_exactly(kafka: Settings, db_url: str):
    trace = CONFORMANCE / "c06.jsonl"
    publish_trace(kafka, trace)
    env = {**os.environ, **env_of(kafka), "STRATA_DB_URL": db_url}
    store = SqlCheckpointStore(db_url)
    runner = LogRunner(kafka, store, FoldConfig())
    for _ in range(2):  # kill it twice, each time after it wrote a new checkpoint
        before = len(store.list(runner.identity))
        proc = subprocess.Popen(
            [STRATA, "project", "--checkpoint-every", "300"],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + 60
        while len(store.list(runner.identity)) <= before and time.monotonic() < deadline:
            time.sleep(0.02)
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        assert len(store.list(runner.identity)) > before
    out = run("project", "--stop-at-end", "--checkpoint-every", "300", env=env, timeout=120)
    assert out.returncode == 0, out.stderr
    expected = replay_file(trace)[0].snapshot().digest()
    assert store.latest(runner.identity).info.digest == expected
    for info in store.list(runner.identity):
        assert info.digest == replay_file(trace, until=info.version)[0].snapshot().digest()


def test_sigterm_stops_cleanly_with_a_final_checkpoint(kafka: Settings, tmp_path: Path):
    publish_trace(kafka, CONFORMANCE / "c03.jsonl")
    env = {**os.environ, **env_of(kafka), "STRATA_DB_URL": f"sqlite:///{tmp_path / 'c.db'}"}
    proc = subprocess.Popen(
        [STRATA, "project", "--checkpoint-every", "1000000"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    store = SqlCheckpointStore(f"sqlite:///{tmp_path / 'c.db'}")
    runner = LogRunner(kafka, store, FoldConfig())
    time.sleep(3)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == 0, err
    assert "stopped at version 601" in err
    assert store.latest(runner.identity).info.version == 601


def test_undecodable_messages_take_their_place_and_are_quarantined(kafka: Settings, tmp_path: Path):
    from confluent_kafka import Producer

    from strata.schemas import Synced, encode

    producer = Producer(kafka.client_config())
    for value in (encode(Synced("Pod")), b"\x00junk", encode(Synced("Node"))):
        producer.produce(f"{kafka.topic_prefix}cache-log", value)
    producer.flush(10)
    env = {**env_of(kafka), "STRATA_DB_URL": f"sqlite:///{tmp_path / 'c.db'}"}
    out = run("project", "--stop-at-end", env=env)
    assert "version 3 lag 0 checkpoints 1 bad 1" in out.stderr
    summary = run("log", "summary", env=env)
    assert "BAD 1" in summary.stdout


def test_a_projector_whose_reader_process_is_killed_folds_on_exactly(
    kafka: Settings, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    """The process reading the log ahead of a catching-up projector is killed mid-log: another
    reads on from where it stopped, and the fold, its checkpoints and the audit index end as a
    fold that lost no reader does (before, the projector failed and started over)."""
    trace = tmp_path / "h.jsonl"
    with trace.open("wb") as out:
        generate(out, nodes=40, pods=3000, seed=7)
    publish_trace(kafka, trace)
    monkeypatch.setattr(readahead, "AHEAD_FROM", 0)  # a reader process for this short log too
    store = SqlCheckpointStore(f"sqlite:///{tmp_path / 'c.db'}")
    runner, index = LogRunner(kafka, store, FoldConfig()), AuditIndex(store.engine)
    end = runner.reader.end_offset()
    killed: list[int] = []
    at: list[int] = []

    def kill_midway() -> None:
        while FOLLOWING.version < end // 3:
            time.sleep(0.001)
        at.append(FOLLOWING.version)
        killed.extend(_readers())
        for pid in killed:
            os.kill(pid, signal.SIGKILL)

    killer = threading.Thread(target=kill_midway, daemon=True)
    killer.start()
    state = runner.follow(threading.Event(), every_records=5000, audit_index=index, until=end)
    killer.join(5)
    assert len(killed) == 1 and at[0] < end * 2 // 3 and FOLLOWING.version == end
    expected = replay_file(trace)[0].snapshot().digest()
    assert state.snapshot().digest() == expected
    assert store.latest(runner.identity).info.digest == expected
    for info in store.list(runner.identity):
        assert info.digest == replay_file(trace, until=info.version)[0].snapshot().digest()
    assert index.indexed_to(runner.identity) == end
    assert not _readers()

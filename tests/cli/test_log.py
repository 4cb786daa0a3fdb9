"""The README's main job and the CLI against the real broker."""

from __future__ import annotations

import json

import pytest

from strata.log.cachelog import CacheLogReader
from strata.log.config import Settings
from strata.schemas import BadRecord, WatchEvent, objectjson
from strata.schemas.trace import read_trace, split_lines
from tests.cli.test_cli import run
from tests.paths import SAMPLE

pytestmark = pytest.mark.kafka
SAMPLE = SAMPLE


def env_of(settings: Settings) -> dict[str, str]:
    return {
        "STRATA_KAFKA_BOOTSTRAP": settings.bootstrap,
        "STRATA_TOPIC_PREFIX": settings.topic_prefix,
        "STRATA_DATA_DIR": str(settings.data_dir),
    }


def test_dev_up_is_idempotent_and_status_tells(broker: Settings):
    env = {"STRATA_DATA_DIR": str(broker.data_dir)}
    first = run("dev", "status", env=env)
    assert first.returncode == 0 and first.stdout.startswith("kafka: running (pid ")
    again = run("dev", "up", env=env)
    assert again.returncode == 0, again.stderr
    assert "already running" in again.stderr
    assert f"export STRATA_KAFKA_BOOTSTRAP={broker.bootstrap}" in again.stdout.splitlines()
    assert run("dev", "status", env=env).stdout == first.stdout  # the same process, reused


def test_dev_status_of_a_stack_that_never_ran(tmp_path):
    out = run("dev", "status", "--data-dir", str(tmp_path), "--kafka-port", "29092")
    assert out.returncode == 3 and out.stdout.splitlines() == [
        "kafka: stopped",
        "postgres: stopped",
        "prometheus: stopped",
    ]


def test_demo_publishes_reads_back_and_summarizes(broker: Settings):
    out = run("demo", env=env_of(broker.with_(topic_prefix="test-demo.")))
    assert out.returncode == 0, out.stderr
    assert "published 27 records of sample-cluster.jsonl (1 bad, quarantined)" in out.stdout
    assert ": 27 records, offsets 0..26" in out.stdout
    assert "by kind:  Node 3, Pod 6, PodGroup 1, PriorityClass 1, Queue 2" in out.stdout


def test_ingest_then_dump_gives_the_trace_back_redacted(kafka: Settings, tmp_path):
    out = run("ingest", "--from", str(SAMPLE), env=env_of(kafka))
    assert out.returncode == 0, out.stderr
    assert f"{SAMPLE}:21: bad record: JSONDecodeError" in out.stderr
    dump = run("log", "dump", env=env_of(kafka))
    assert dump.returncode == 0, dump.stderr
    original = [line for _, line in split_lines(SAMPLE.read_bytes())]
    dumped = dump.stdout.encode().splitlines()
    assert len(dumped) == len(original)
    redacted = 0
    for before, after in zip(original, dumped, strict=True):
        try:
            expected = objectjson.loads(before)
        except ValueError:
            assert after == before  # a bad line comes back as itself, still bad, in its place
            continue
        got = objectjson.loads(after)
        if expected != got:
            redacted += 1
            assert expected["object"]["kind"] == "Pod" and "managedFields" not in got["object"]["metadata"]
    assert redacted == 2
    summary = json.loads(run("log", "summary", "-o", "json", env=env_of(kafka)).stdout)
    assert summary["records"] == 27 and [b["offset"] for b in summary["bad"]] == [20]


def test_no_secret_reaches_the_log(kafka: Settings):
    assert run("ingest", "--from", str(SAMPLE), env=env_of(kafka)).returncode == 0
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer(kafka.client_config(**{"group.id": "scan", "enable.auto.commit": False}))
    consumer.assign([TopicPartition(f"{kafka.topic_prefix}cache-log", 0, 0)])
    messages = consumer.consume(27, timeout=10)
    consumer.close()
    assert len(messages) == 27
    for message in messages:
        assert b"s3cr3t" not in message.value()
        assert b"last-applied-configuration" not in message.value()
        assert b"managedFields" not in message.value()
    records = [e.record for e in CacheLogReader(kafka).read()]
    assert sum(isinstance(r, WatchEvent) for r in records) == 13
    assert sum(isinstance(r, BadRecord) for r in records) == 1
    assert records == [t.record for t in read_trace(SAMPLE)]  # exactly what was published, in order

"""Archives of the cache log on the real broker: export, fold, verify, restore, and their CLI."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import fastavro
import pytest
from confluent_kafka.admin import AdminClient

from strata.errors import StrataError
from strata.ingest.from_trace import publish_trace
from strata.log.cachelog import Publisher
from strata.log.config import Settings
from strata.log.topics import TopicNames
from strata.projector.checkpoints.sql import SqlCheckpointStore
from strata.projector.fold.state import FoldConfig
from strata.projector.replay import replay_file
from strata.projector.runner import LogRunner
from strata.recovery.archive import RawLogReader, export_archive, fold_archive, restore_archive, verify_archive
from strata.recovery.manifest import read_manifest
from tests.cli.test_cli import run
from tests.cli.test_log import env_of
from tests.paths import CONFORMANCE

pytestmark = pytest.mark.kafka
CONFORMANCE = CONFORMANCE


def digest_of_log(settings: Settings, tmp_path: Path, end: int | None = None) -> str:
    runner = LogRunner(settings, SqlCheckpointStore(f"sqlite:///{tmp_path / 'c.db'}"), FoldConfig())
    return runner.state_at(runner.reader.end_offset() if end is None else end).snapshot().digest()


def messages(settings: Settings) -> list[tuple[bytes | None, bytes]]:
    reader = RawLogReader(settings)
    return [(m.key, m.value) for m in reader.read_raw(0, reader.end_offset())]


def flip_one_byte(path: Path, at: int) -> None:
    data = bytearray(path.read_bytes())
    data[at] ^= 0x01
    path.write_bytes(bytes(data))


def test_fold_of_an_archive_equals_replay_and_the_log(kafka: Settings, tmp_path: Path):
    trace = CONFORMANCE / "c05.jsonl"  # 2002 records, 19 of them bad lines
    publish_trace(kafka, trace)
    archive = tmp_path / "archive"
    report = export_archive(kafka, archive, records_per_file=700)
    assert (report.records, report.files, report.next_offset) == (2002, 3, 2002)
    manifest = read_manifest(archive)
    assert manifest is not None and manifest.cluster_id and manifest.topic == TopicNames(kafka.topic_prefix).cache_log
    assert [(f.name, f.records) for f in manifest.files] == [
        ("cache-log-000000000000-000000000699.avro", 700),
        ("cache-log-000000000700-000000001399.avro", 700),
        ("cache-log-000000001400-000000002001.avro", 602),
    ]
    for entry in manifest.files:  # each recorded digest is the fold of the trace up to that file's end
        assert entry.digest == replay_file(trace, until=entry.last_offset + 1)[0].snapshot().digest()
        with open(archive / entry.name, "rb") as f:
            avro = fastavro.reader(f)
            meta = avro.metadata
            assert meta["avro.codec"] == "zstandard"
            assert meta["strata.first_offset"] == str(entry.first_offset)
            assert meta["strata.last_offset"] == str(entry.last_offset)
            assert meta["strata.topic"] == manifest.topic and meta["strata.cluster_id"] == manifest.cluster_id
            assert meta["strata.fingerprints"].split(",") == sorted(entry.fingerprints) and entry.fingerprints
            assert [m["offset"] for m in avro] == list(range(entry.first_offset, entry.last_offset + 1))

    # another Avro implementation (Apache avro) reads the files, zstandard blocks included
    from avro.datafile import DataFileReader
    from avro.io import DatumReader

    with open(archive / manifest.files[0].name, "rb") as f:
        apache = list(DataFileReader(f, DatumReader()))
    assert [m["offset"] for m in apache] == list(range(700))

    state, folded = fold_archive(archive)
    replayed, replay_report = replay_file(trace)
    assert state.snapshot().canonical_bytes() == replayed.snapshot().canonical_bytes()
    assert state.snapshot().digest() == digest_of_log(kafka, tmp_path)
    assert folded.records == 2002 and len(folded.bad) == len(replay_report.bad) == 19
    assert len(folded.rejected) == len(replay_report.rejected)
    # --until N: the records before offset N, like `strata snapshot --at-offset N-1` and `replay --until N`
    until = fold_archive(archive, FoldConfig(), until=1000)[0].snapshot().digest()
    assert until == replay_file(trace, until=1000)[0].snapshot().digest() == digest_of_log(kafka, tmp_path, 1000)
    assert verify_archive(archive) == []


def test_a_poison_message_is_archived_as_it_was_and_restored_as_it_was(kafka: Settings, tmp_path: Path):
    publish_trace(kafka, CONFORMANCE / "c01.jsonl")
    topic = TopicNames(kafka.topic_prefix).cache_log
    publisher = Publisher(kafka)
    for value, key in [(b"\xc3\x01not an avro body", b"k"), (b"plain text", None), (b"", b"empty")]:
        publisher.publish(topic, value, key=key)
    publisher.flush()
    publish_trace(kafka, CONFORMANCE / "edge-06-deleted-record.jsonl")
    archive = tmp_path / "archive"
    export_archive(kafka, archive, records_per_file=50, codec="deflate")

    state, folded = fold_archive(archive)
    assert state.snapshot().digest() == digest_of_log(kafka, tmp_path)
    assert {150, 151, 152} <= {offset for offset, _ in folded.bad}
    archived = []
    for entry in read_manifest(archive).files:
        with open(archive / entry.name, "rb") as f:
            archived += list(fastavro.reader(f))
    assert [(m["key"], m["value"]) for m in archived] == messages(kafka)
    assert archived[151]["value"] == b"plain text" and archived[152]["key"] == b"empty"

    restored = kafka.with_(topic_prefix=f"{kafka.topic_prefix}restored.")
    restore_archive(restored, archive)
    assert messages(restored) == messages(kafka)
    assert digest_of_log(restored, tmp_path) == state.snapshot().digest()


def test_incremental_export_appends_files_and_keeps_the_earlier_ones(kafka: Settings, tmp_path: Path):
    publish_trace(kafka, CONFORMANCE / "c04.jsonl")  # 1000 records
    archive = tmp_path / "archive"
    export_archive(kafka, archive, records_per_file=300)
    first = {p.name: p.read_bytes() for p in archive.glob("*.avro")}
    assert len(first) == 4

    publish_trace(kafka, CONFORMANCE / "c02.jsonl")  # 300 more
    report = export_archive(kafka, archive, records_per_file=300)
    assert (report.first_offset, report.next_offset, report.files) == (1000, 1300, 1)
    assert {p.name: p.read_bytes() for p in archive.glob("*.avro") if p.name in first} == first
    manifest = read_manifest(archive)
    assert manifest.files[-1].name == "cache-log-000000001000-000000001299.avro"
    for entry in manifest.files:
        assert entry.digest == digest_of_log(kafka, tmp_path, entry.last_offset + 1)
    assert fold_archive(archive)[0].snapshot().digest() == digest_of_log(kafka, tmp_path)

    assert export_archive(kafka, archive).records == 0  # nothing new
    # without the state checkpoint the export refolds the archive, with the same result
    (archive / "state.zst").unlink()
    publish_trace(kafka, CONFORMANCE / "c01.jsonl")
    assert export_archive(kafka, archive, records_per_file=100).files == 2
    assert read_manifest(archive).files[-1].digest == digest_of_log(kafka, tmp_path)
    assert verify_archive(archive) == []
    with pytest.raises(StrataError, match="continues from 1450"):
        export_archive(kafka, archive, start=0)


def test_an_archive_starting_after_offset_zero_folds_from_its_base_state(kafka: Settings, tmp_path: Path):
    trace = CONFORMANCE / "c03.jsonl"
    publish_trace(kafka, trace)
    archive = tmp_path / "archive"
    export_archive(kafka, archive, start=250, stop=500, records_per_file=100)
    manifest = read_manifest(archive)
    assert [f.first_offset for f in manifest.files] == [250, 350, 450] and manifest.base is not None
    assert fold_archive(archive)[0].snapshot().digest() == replay_file(trace, until=500)[0].snapshot().digest()
    assert verify_archive(archive) == []
    with pytest.raises(StrataError, match="needs the log from 0"):
        restore_archive(kafka.with_(topic_prefix=f"{kafka.topic_prefix}r."), archive)


def test_restore_rebuilds_the_log_and_refuses_a_non_empty_one(kafka: Settings, tmp_path: Path):
    trace = CONFORMANCE / "c06.jsonl"
    publish_trace(kafka, trace)
    archive = tmp_path / "archive"
    export_archive(kafka, archive, records_per_file=1500)
    restored = kafka.with_(topic_prefix=f"{kafka.topic_prefix}restored.")
    report = restore_archive(restored, archive)
    assert (report.records, report.next_offset, report.files) == (4000, 4000, 3)
    assert messages(restored) == messages(kafka)  # byte for byte, keys included
    expected = replay_file(trace)[0].snapshot().digest()
    assert digest_of_log(restored, tmp_path) == expected

    with pytest.raises(StrataError, match="is not empty"):
        restore_archive(restored, archive)
    with pytest.raises(StrataError, match="is not empty"):
        restore_archive(kafka, archive)

    # the archive of the original log does not continue from the restored log (another topic)...
    with pytest.raises(StrataError, match="--force"):
        export_archive(restored, archive)
    # ... unless told to: then it continues after its last offset, on the restored log
    publish_trace(restored, CONFORMANCE / "c01.jsonl")
    more = export_archive(restored, archive, force=True)
    assert (more.first_offset, more.next_offset) == (4000, 4150)
    assert read_manifest(archive).topic == TopicNames(restored.topic_prefix).cache_log
    assert verify_archive(archive) == []
    assert fold_archive(archive)[0].snapshot().digest() == digest_of_log(restored, tmp_path)

    # another log of the same length is not continued, even with --force
    other = kafka.with_(topic_prefix=f"{kafka.topic_prefix}other.")
    from strata.log.topics import ensure_topics

    ensure_topics(other)
    for name in ("c05.jsonl", "c05.jsonl", "c01.jsonl"):  # 4154 records
        publish_trace(other, CONFORMANCE / name)
    with pytest.raises(StrataError, match="archive of another log"):
        export_archive(other, archive, force=True)


def test_a_corrupted_file_is_detected_by_verify_fold_and_restore(kafka: Settings, tmp_path: Path):
    publish_trace(kafka, CONFORMANCE / "c03.jsonl")
    archive = tmp_path / "archive"
    export_archive(kafka, archive, records_per_file=200)
    victim = archive / "cache-log-000000000200-000000000399.avro"
    flip_one_byte(victim, victim.stat().st_size // 2)

    problems = verify_archive(archive)
    assert len(problems) == 1 and victim.name in problems[0] and "corrupted" in problems[0]
    with pytest.raises(StrataError, match=f"{victim.name} is corrupted"):
        fold_archive(archive)
    restored = kafka.with_(topic_prefix=f"{kafka.topic_prefix}restored.")
    with pytest.raises(StrataError, match=f"fails verification: {victim.name}"):
        restore_archive(restored, archive)
    # nothing was written, nothing was created
    topics = AdminClient(restored.client_config()).list_topics(timeout=10).topics
    assert not [t for t in topics if t.startswith(restored.topic_prefix)]


def test_a_missing_file_a_gap_and_a_wrong_digest_are_reported(kafka: Settings, tmp_path: Path):
    publish_trace(kafka, CONFORMANCE / "c02.jsonl")
    archive = tmp_path / "archive"
    export_archive(kafka, archive, records_per_file=100)
    (archive / "cache-log-000000000100-000000000199.avro").unlink()
    problems = verify_archive(archive)
    assert problems == ["cache-log-000000000100-000000000199.avro: missing"]
    with pytest.raises(StrataError, match=r"cache-log-000000000100-000000000199.avro is missing"):
        fold_archive(archive)

    doc = json.loads((archive / "manifest.json").read_text())
    del doc["files"][1]  # a gap between the first and the (now) second file
    doc["files"][0]["digest"] = "0" * 64
    (archive / "manifest.json").write_text(json.dumps(doc))
    problems = verify_archive(archive)
    assert "gap: offsets 100..199 are in no file (before cache-log-000000000200-000000000299.avro)" in problems
    assert problems[1:] == [
        "cache-log-000000000000-000000000099.avro: the fold's digest after offset 99 differs from the manifest's"
    ]
    with pytest.raises(StrataError, match=r"gap: offsets 100\.\.199"):
        fold_archive(archive)
    assert verify_archive(tmp_path / "nowhere") == [f"archive {tmp_path / 'nowhere'} does not exist"]


# ------------------------------------------------------------------------------------- the CLI
def one_error_line(out: subprocess.CompletedProcess) -> str:
    assert out.returncode == 1, out.stderr
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("strata: error: "), out.stderr
    return lines[0]


def test_export_and_restore_commands(kafka: Settings, tmp_path: Path):
    publish_trace(kafka, CONFORMANCE / "c04.jsonl")
    archive = tmp_path / "archive"
    env = env_of(kafka)
    out = run("export", "--to", str(archive), "--records-per-file", "400", "--codec", "deflate", env=env)
    assert out.returncode == 0, out.stderr
    assert "exported offsets 0..999: 1,000 records, 3 file(s)" in out.stderr and "records/s" in out.stderr
    assert "MB/s" in out.stderr
    again = run("export", "--to", str(archive), env=env)
    assert again.returncode == 0 and "nothing to export" in again.stderr

    restored = {**env, "STRATA_TOPIC_PREFIX": f"{kafka.topic_prefix}restored."}
    out = run("restore", "--from", str(archive), env=restored)
    assert out.returncode == 0, out.stderr
    assert "restored 1000 records" in out.stderr and "records/s" in out.stderr
    assert run("snapshot", "--digest", env={**restored, "STRATA_DB_URL": f"sqlite:///{tmp_path / 'c.db'}"}).stdout == (
        run("replay", "--digest", str(CONFORMANCE / "c04.jsonl")).stdout
    )
    assert "is not empty" in one_error_line(run("restore", "--from", str(archive), env=restored))
    assert "does not exist" in one_error_line(run("restore", "--from", str(tmp_path / "none"), env=restored))
    assert "beyond the log's end" in one_error_line(
        run("export", "--to", str(tmp_path / "b"), "--to-offset", "5000", env=env)
    )
    other = {**env, "STRATA_TOPIC_PREFIX": f"{kafka.topic_prefix}restored."}
    assert "--force" in one_error_line(run("export", "--to", str(archive), env=other))
    # strata replay DIR and strata verify --archive DIR
    assert (
        run("replay", "--digest", str(archive)).stdout
        == run("replay", "--digest", str(CONFORMANCE / "c04.jsonl")).stdout
    )
    assert run("replay", "--digest", "--until", "500", str(archive)).stdout == (
        run("replay", "--digest", "--until", "500", str(CONFORMANCE / "c04.jsonl")).stdout
    )
    verified = run("verify", "--archive", str(archive))
    assert verified.returncode == 0 and "0 problem(s)" in verified.stderr
    flip_one_byte(archive / "cache-log-000000000000-000000000399.avro", 100)
    line = one_error_line(
        run("restore", "--from", str(archive), env={**env, "STRATA_TOPIC_PREFIX": f"{kafka.topic_prefix}x."})
    )
    assert "cache-log-000000000000-000000000399.avro" in line
    broken = run("verify", "--archive", str(archive))
    assert broken.returncode == 1 and "cache-log-000000000000-000000000399.avro" in broken.stdout
    assert run("export", "--to", str(archive), "--codec", "lz4", env=env).returncode == 2

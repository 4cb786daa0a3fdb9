"""`strata ingest --from TRACE`: publish a recorded history into the cache log, in order."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from strata.log.cachelog import CacheLogWriter
from strata.log.config import Settings
from strata.log.topics import TopicNames
from strata.schemas import BadRecord
from strata.schemas.trace import read_trace


@dataclass
class IngestReport:
    records: int = 0
    bad: list[tuple[int, str]] = field(default_factory=list)  # (line number, error)
    last_offset: int | None = None


def publish_trace(settings: Settings, path: Path, progress: Callable[[int], None] = lambda n: None) -> IngestReport:
    """Append every record of the trace to the cache log; a bad line is appended as a BadRecord
    (it keeps its place in the order) and its raw bytes are copied to the quarantine topic."""
    writer = CacheLogWriter(settings)
    quarantine = TopicNames(settings.topic_prefix).quarantine
    report = IngestReport()
    for line in read_trace(path):
        if not report.records:  # after the trace is read, so that a bad path is told before Kafka is asked
            writer.require(quarantine)
        writer.append(line.record)
        report.records += 1
        if isinstance(line.record, BadRecord):
            report.bad.append((line.number, line.record.error))
            writer.publisher.publish(
                quarantine,
                line.raw,
                key=f"{path.name}:{line.number}".encode(),
                headers=[("strata.error", line.record.error.encode()), ("strata.origin", line.record.source.encode())],
            )
        progress(1)
    writer.flush()
    report.last_offset = writer.publisher.last_offset.get((writer.topic, 0))
    return report

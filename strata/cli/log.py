"""`strata topics` and `strata log`: the topics of a deployment, and the cache log read back."""

from __future__ import annotations

import json
import sys

import click

from strata.cli.options import kafka_options
from strata.log.config import Settings


# ------------------------------------------------------------------------------------- topics
@click.group()
def topics() -> None:
    """The topics of one deployment (one topic prefix)."""


@topics.command("create")
@kafka_options
def topics_create(settings: Settings) -> None:
    """Create the cache log, quarantine, command, retry and dead-letter topics (idempotent).

    Replication for real clusters: STRATA_REPLICATION_FACTOR, STRATA_MIN_INSYNC_REPLICAS;
    command topic partitions: STRATA_COMMAND_PARTITIONS.
    """
    from strata.log.topics import ensure_topics

    for topic, outcome in sorted(ensure_topics(settings).items()):
        click.echo(f"{outcome:8} {topic}")


@topics.command("list")
@kafka_options
def topics_list(settings: Settings) -> None:
    """The planned topics with their partitions and settings."""
    from strata.log.topics import plan

    for spec in plan(settings):
        config = ",".join(f"{k}={v}" for k, v in sorted(spec.config.items()))
        click.echo(f"{spec.name}\tpartitions={spec.partitions}\t{config}")


# ---------------------------------------------------------------------------------------- log
@click.group("log")
def log_group() -> None:
    """Read the cache log back."""


@log_group.command("summary")
@click.option("--output", "-o", type=click.Choice(["table", "json"]), default="table", show_default=True)
@kafka_options
def log_summary(settings: Settings, output: str) -> None:
    """Count the records of the cache log by type and kind, and list the bad ones."""
    click.echo(summary_text(settings, output))


def summary_text(settings: Settings, output: str) -> str:
    from strata.audit.logview import format_summary, summarize
    from strata.log.cachelog import CacheLogReader

    reader = CacheLogReader(settings)
    summary = summarize(reader.read())
    return json.dumps(summary, indent=2) if output == "json" else format_summary(summary, reader.topic)


@log_group.command("dump")
@click.option("--from-offset", type=click.IntRange(min=0), default=0, show_default=True)
@click.option("--to-offset", type=click.IntRange(min=0), help="stop before this offset (default: the end now)")
@kafka_options
def log_dump(settings: Settings, from_offset: int, to_offset: int | None) -> None:
    """Print the records as trace-format JSON lines (replayable like the original trace)."""
    from strata.audit.logview import as_trace_line
    from strata.log.cachelog import CacheLogReader

    out = sys.stdout.buffer
    for entry in CacheLogReader(settings).read(from_offset, to_offset):
        out.write(as_trace_line(entry.record) + b"\n")

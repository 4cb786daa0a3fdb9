"""`strata replay`, `strata project` and `strata snapshot`: the fold of a trace, an archive or the
cache log."""

from __future__ import annotations

import contextlib
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import click

from strata.cli.options import (
    db_option,
    fold_options,
    health_options,
    kafka_options,
    log_runner,
    output_option,
    stop_on_signals,
)
from strata.errors import StrataError
from strata.log.config import Settings


# ------------------------------------------------------------------------------------- replay
@click.command()
@click.argument("trace", type=click.Path(path_type=Path))
@click.option("--until", type=click.IntRange(min=0), metavar="N", help="fold only the first N records")
@output_option
@click.option("--digest", is_flag=True, help="print only the SHA-256 digest of the canonical snapshot")
@click.option("--strict", is_flag=True, help="stop with an error at the first bad record")
@fold_options
def replay(trace: Path, until: int | None, output: str, digest: bool, strict: bool, fold: Any) -> None:
    """Fold a trace (JSON lines) or an archive directory (`strata export`) offline, with no Kafka."""
    from strata.projector.replay import StrictStop, replay_file

    if trace.is_dir():
        _print_snapshot(_replay_archive(trace, until, strict, fold), output, digest)
        return
    try:
        size = trace.stat().st_size
    except OSError as exc:
        raise StrataError(f"cannot read trace {trace}: {exc.strerror}") from exc
    with _progress(size, f"replaying {trace.name}") as advance:
        try:
            state, report = replay_file(trace, config=fold, until=until, strict=strict, progress=advance)
        except StrictStop as exc:
            raise StrataError(f"{trace}:{str(exc).removeprefix('line ')}") from exc
    for number, error in report.bad:
        click.echo(f"{trace}:{number}: bad record: {error}", err=True)
    if report.bad:
        click.echo(f"{len(report.bad)} bad record(s) of {report.records}", err=True)
    _print_snapshot(state.snapshot(), output, digest)


def _replay_archive(directory: Path, until: int | None, strict: bool, fold: Any) -> Any:
    from strata.projector.replay import StrictStop
    from strata.recovery.archive import archive_bytes, fold_archive

    started = time.monotonic()
    with _progress(archive_bytes(directory), f"replaying {directory}") as advance:
        try:
            state, report = fold_archive(directory, fold, until, strict=strict, progress=advance)
        except StrictStop as exc:
            raise StrataError(f"{directory}: {exc}") from exc
    for offset, error in report.bad:
        click.echo(f"{directory}: offset {offset}: bad record: {error}", err=True)
    took = max(time.monotonic() - started, 1e-9)
    click.echo(f"replayed {report.records} records in {took:.1f} s ({report.records / took:,.0f} records/s)", err=True)
    return state.snapshot()


def _print_snapshot(snapshot: Any, output: str, digest: bool) -> None:
    if digest:
        click.echo(snapshot.digest())
    elif output == "json":
        sys.stdout.buffer.write(snapshot.canonical_bytes() + b"\n")
    else:
        from rich.console import Console

        from strata.cli.tables import print_snapshot_tables

        # a pipe has no width; do not wrap names at 80 columns there
        print_snapshot_tables(snapshot.to_json(), Console(width=None if sys.stdout.isatty() else 200))


@contextlib.contextmanager
def _progress(total: int, what: str) -> Iterator[Callable[[int], None] | None]:
    """A progress bar on a terminal; None when stderr is a pipe or a file."""
    if not sys.stderr.isatty():
        yield None
        return
    from rich.progress import BarColumn, DownloadColumn, Progress, TimeRemainingColumn

    with Progress(
        "[progress.description]{task.description}", BarColumn(), DownloadColumn(), TimeRemainingColumn(), transient=True
    ) as progress:
        task = progress.add_task(what, total=total)
        pending = 0

        def advance(n: int) -> None:
            nonlocal pending
            pending += n
            if pending >= 1 << 20:  # redrawing per line would cost more than the fold
                progress.advance(task, pending)
                pending = 0

        yield advance


# ---------------------------------------------------------------------------- project, snapshot
@click.command()
@click.option(
    "--checkpoint-every",
    type=click.IntRange(min=1),
    default=100_000,
    show_default=True,
    metavar="N",
    help="write a checkpoint after N records",
)
@click.option(
    "--checkpoint-seconds",
    type=click.FloatRange(min=0.1),
    default=60.0,
    show_default=True,
    metavar="T",
    help="... or after T seconds with new records",
)
@click.option("--stop-at-end", is_flag=True, help="stop once the log's end (as of the start) is applied")
@click.option(
    "--replica",
    metavar="NAME",
    help="this projector's name in the digests topic (divergence detection)  [default: projector-HOSTNAME]",
)
@click.option(
    "--audit/--no-audit",
    default=True,
    show_default=True,
    help="keep the audit index (strata history, strata story) in the checkpoint database",
)
@click.option(
    "--kinds", metavar="K1,K2", help="kinds that must be SYNCED before /readyz answers 200 (default: all seven)"
)
@db_option
@kafka_options
@fold_options
@health_options("projector")
def project(
    settings: Settings,
    fold: Any,
    health: Any,
    checkpoint_every: int,
    checkpoint_seconds: float,
    stop_at_end: bool,
    audit: bool,
    replica: str | None,
    kinds: str | None,
) -> None:
    """Follow the cache log: restore the newest checkpoint, apply records as they arrive, checkpoint.

    Stops cleanly (with a final checkpoint) on SIGTERM or Ctrl-C.
    """
    import socket
    import threading

    from prometheus_client import REGISTRY

    from strata.log.digests import DigestReporter
    from strata.projector.auditindex.store import AuditIndex
    from strata.projector.queuemetrics import VolcanoCollector
    from strata.projector.runner import ALL_KINDS, Progress, SnapshotOnRequest

    runner = log_runner(settings, fold, quarantine=True)
    on_request = SnapshotOnRequest()
    REGISTRY.register(VolcanoCollector(on_request.request))  # Volcano's queue gauges, from the fold's view
    stop = threading.Event()
    stop_on_signals(stop)
    target = runner.reader.end_offset() if stop_at_end else None

    progress = Progress(0, 0)

    def report(p: Progress) -> None:
        nonlocal progress
        progress = p
        click.echo(f"version {p.version} lag {p.lag} checkpoints {p.checkpoints} bad {p.bad}", err=True)

    newest = max((info.version for info in runner.store.list(runner.identity)), default=0)
    if target is not None and newest >= target:  # nothing to fold (asked without restoring the state)
        stop.set()
    state = runner.follow(
        stop,
        every_records=checkpoint_every,
        every_seconds=checkpoint_seconds,
        report=report,
        report_seconds=1.0 if target is not None else 5.0,
        audit_index=AuditIndex(runner.store.engine) if audit else None,
        digests=DigestReporter(settings, replica or f"projector-{socket.gethostname()}", fold.identity),
        health=health,
        kinds=tuple(k.strip() for k in kinds.split(",")) if kinds else ALL_KINDS,
        on_request=on_request,
        until=target,
    )
    click.echo(
        f"stopped at version {state.version}; longest pause {progress.longest_pause_s * 1000:.1f} ms, "
        f"longest digest {progress.longest_digest_s * 1000:.1f} ms, "
        f"waited {progress.writer_waits_s:.1f} s for the audit writer; "
        f"the stop took {progress.stop_s:.1f} s (final checkpoint, audit index drained)",
        err=True,
    )
    paused = ", ".join(f"{step} {seconds:.2f} s" for step, seconds in progress.paused_s.items())
    click.echo(f"the fold's pauses in all, by step: {paused}", err=True)


@click.command()
@click.option(
    "--at-offset",
    type=click.IntRange(min=0),
    metavar="N",
    help="the cache after the record at offset N (version N+1); default: the log's end now",
)
@click.option(
    "--at",
    "at_time",
    metavar="TIME",
    help="the cache as of an ISO-8601 time: after the last record stamped at or before it",
)
@output_option
@click.option("--digest", is_flag=True, help="print only the SHA-256 digest of the canonical snapshot")
@db_option
@kafka_options
@fold_options
def snapshot(
    settings: Settings, fold: Any, at_offset: int | None, at_time: str | None, output: str, digest: bool
) -> None:
    """Print the snapshot of the cache log, from the newest checkpoint at or below the target."""
    from strata.audit.history import Position, version_at

    if at_offset is not None and at_time is not None:
        raise click.UsageError("give --at-offset or --at, not both")
    at = Position.parse(at_time) if at_time is not None else None  # bad input before Kafka is asked
    runner = log_runner(settings, fold)
    end = runner.reader.end_offset()
    if at_offset is not None:
        end = version_at(runner.reader, Position(offset=at_offset), end)
    elif at is not None:
        end = version_at(runner.reader, at, end)
    _print_snapshot(runner.state_at(end).snapshot(), output, digest)

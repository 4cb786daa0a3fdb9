"""`strata export` and `strata restore`: the cache log as Avro Object Container Files."""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import click

from strata.cli.options import db_option, fold_options, kafka_options, log_runner
from strata.log.config import Settings
from strata.recovery.manifest import CODECS, DEFAULT_RECORDS_PER_FILE


@contextlib.contextmanager
def _progress(what: str) -> Iterator[Callable[[int, int], None] | None]:
    """A progress bar over records on a terminal; None when stderr is a pipe or a file."""
    if not sys.stderr.isatty():
        yield None
        return
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TimeRemainingColumn

    with Progress(
        "[progress.description]{task.description}",
        BarColumn(),
        MofNCompleteColumn(),
        TimeRemainingColumn(),
        transient=True,
    ) as progress:
        task = progress.add_task(what, total=None)

        def update(done: int, total: int) -> None:
            progress.update(task, completed=done, total=total)

        yield update


@click.command("export")
@click.option(
    "--to",
    "directory",
    required=True,
    type=click.Path(file_okay=False, path_type=Path),
    metavar="DIR",
    help="archive directory (created; an existing archive is continued after its last offset)",
)
@click.option("--from", "start", type=click.IntRange(min=0), metavar="OFFSET", help="first offset of a new archive")
@click.option("--to-offset", "stop", type=click.IntRange(min=0), metavar="OFFSET", help="stop before this offset")
@click.option("--codec", type=click.Choice(CODECS), default="zstandard", show_default=True)
@click.option(
    "--records-per-file",
    type=click.IntRange(min=1),
    default=DEFAULT_RECORDS_PER_FILE,
    show_default=True,
    metavar="N",
    help="offsets per file",
)
@click.option("--force", is_flag=True, help="continue an archive of another topic or cluster (a restored log)")
@kafka_options
@fold_options
def export(
    settings: Settings,
    fold: Any,
    directory: Path,
    start: int | None,
    stop: int | None,
    codec: str,
    records_per_file: int,
    force: bool,
) -> None:
    """Write the cache log into an archive directory (Avro container files and manifest.json)."""
    from strata.recovery.archive import export_archive

    with _progress(f"exporting to {directory}") as progress:
        report = export_archive(
            settings,
            directory,
            start=start,
            stop=stop,
            codec=codec,
            records_per_file=records_per_file,
            force=force,
            fold=fold,
            progress=progress,
        )
    if report.next_offset == report.first_offset:
        click.echo(f"nothing to export: {directory} already ends before offset {report.first_offset}", err=True)
    else:
        click.echo(
            f"exported offsets {report.first_offset}..{report.next_offset - 1}: {report.figures()}",
            err=True,
        )


@click.command()
@click.option(
    "--from",
    "directory",
    required=True,
    type=click.Path(file_okay=False, path_type=Path),
    metavar="DIR",
    help="archive directory written by `strata export`",
)
@kafka_options
def restore(settings: Settings, directory: Path) -> None:
    """Rebuild the cache log from an archive, into an EMPTY cache log (a new cluster or topic prefix).

    The archive is verified first. Keys and values are kept; the broker stamps new timestamps.
    """
    from strata.recovery.archive import restore_archive

    with _progress(f"restoring {directory}") as progress:
        report = restore_archive(settings, directory, progress=progress)
    click.echo(
        f"restored {report.next_offset} records into {settings.topic_prefix}cache-log: {report.figures()}", err=True
    )


# ------------------------------------------------------------------------------------- verify
@click.command()
@click.option("--against-cluster", is_flag=True, help="compare the log's snapshot with a fresh LIST of the cluster")
@click.option(
    "--archive",
    type=click.Path(path_type=Path, file_okay=False),
    metavar="DIR",
    help="check an archive: its manifest, every file's SHA-256, and the digests by folding it again",
)
@click.option(
    "--replicas", is_flag=True, help="compare the digests that projectors and replicas reported for the same versions"
)
@click.option("--kubeconfig", metavar="FILE", help="the cluster  [env: KUBECONFIG]")
@db_option
@kafka_options
@fold_options
def verify(settings: Settings, fold: Any, against_cluster: bool, archive: Path | None, replicas: bool) -> None:
    """Check the log against the cluster, an archive against itself, or the readers against each other;
    exit 1 on any difference."""
    if against_cluster + (archive is not None) + replicas != 1:
        raise click.UsageError("give one of --against-cluster, --archive DIR, --replicas")
    if replicas:
        from strata.log.digests import compared_versions, divergences, read_digests

        digests = read_digests(settings)
        found = divergences(digests)
        for d in found:
            who = ", ".join(d.dissenters)
            side = f"disagree with the majority {d.majority[:12]}" if d.majority else "disagree (no majority)"
            shown = " ".join(f"{r}={v[:12]}" for r, v in d.reports.items())
            click.echo(f"version {d.version}: {who} {side}: {shown}")
        readers = len({d.replica for d in digests})
        click.echo(
            f"{len(found)} divergent version(s) among {compared_versions(digests)} compared, from {readers} reader(s)",
            err=True,
        )
        if found:
            sys.exit(1)
        return
    if archive is not None:
        from strata.recovery.archive import verify_archive

        problems = verify_archive(archive)
        for line in problems:
            click.echo(line)
        click.echo(f"{len(problems)} problem(s) in the archive {archive}", err=True)
        if problems:
            sys.exit(1)
        return
    from strata.kubeapi import KubeApi
    from strata.recovery.verify import cluster_snapshot, differences

    runner = log_runner(settings, fold)
    log = runner.state_at(runner.reader.end_offset()).snapshot()
    differing = differences(log.to_json(), cluster_snapshot(KubeApi(settings.kubeconfig), fold))
    for line in differing:
        click.echo(line)
    click.echo(f"{len(differing)} difference(s) between the log at version {log.version} and the cluster", err=True)
    if differing:
        sys.exit(1)

"""`strata ingest`: watch a cluster, or read a recorded history, into the cache log."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from strata.cli.options import (
    health_options,
    kafka_options,
    stop_on_signals,
)
from strata.log.config import Settings


# ------------------------------------------------------------------------------------- ingest
@click.command()
@click.option(
    "--from",
    "trace",
    type=click.Path(dir_okay=False, path_type=Path),
    metavar="TRACE",
    help="publish a recorded trace (JSON lines) instead of watching a cluster",
)
@click.option("--kubeconfig", metavar="FILE", help="cluster to watch  [env: KUBECONFIG]")
@kafka_options
@click.option("--kinds", metavar="KIND,...", help="watch only these kinds (default: all seven)")
@health_options("ingest")
def ingest(settings: Settings, health: Any, trace: Path | None, kinds: str | None) -> None:
    """Publish cluster changes into the cache log: watch a cluster, or publish a recorded trace.

    Watching runs one LIST+WATCH adapter per kind until SIGTERM or Ctrl-C.
    """
    if trace is None:
        _watch_cluster(settings, kinds.split(",") if kinds else None, health)
        return
    from strata.ingest.from_trace import publish_trace

    report = publish_trace(settings, trace)
    for number, error in report.bad:
        click.echo(f"{trace}:{number}: bad record: {error}", err=True)
    click.echo(
        f"published {report.records} records ({len(report.bad)} bad) to the cache log; "
        f"last offset {report.last_offset}",
        err=True,
    )


def _watch_cluster(settings: Settings, kinds: list[str] | None, health: Any) -> None:
    from strata.ingest.watch import Ingest

    ingest_ = Ingest(settings, kinds)
    stop_on_signals(ingest_.stop)
    health.require(ingest_.not_ready)
    ingest_.start()
    announced = False
    while not ingest_.stop.wait(1.0):
        health.beat()
        if not announced and ingest_.synced():
            click.echo(f"synced: {', '.join(a.resource.kind for a in ingest_.adapters)}", err=True)
            announced = True
    ingest_.close()
    if ingest_.errors:
        raise ingest_.errors[0]
    published = sum(a.stats.published for a in ingest_.adapters)
    click.echo(f"stopped; published {published} watch events", err=True)

"""`strata schedule`: the example gang scheduler, one replica per process."""

from __future__ import annotations

import threading
from typing import Any

import click

from strata.cli.options import fold_options, health_options, kafka_options, stop_on_signals
from strata.log.config import Settings


@click.command()
@click.option("--replica", required=True, metavar="NAME", help="this replica's id, written into every BIND")
@click.option("--kubeconfig", metavar="FILE", help="cluster for status writes and events  [env: KUBECONFIG]")
@click.option(
    "--exit-when-idle",
    type=click.IntRange(min=1),
    metavar="N",
    help="stop after N cycles in a row with nothing to bind (for tests and batch runs)",
)
@click.option("--idle-wait", type=float, default=0.5, show_default=True, help="seconds to wait for news when idle")
@click.option("--kinds", metavar="K1,K2", help="kinds that must be SYNCED before the first cycle (default: all seven)")
@kafka_options
@fold_options
@health_options("scheduler")
def schedule(
    settings: Settings,
    fold: Any,
    health: Any,
    replica: str,
    exit_when_idle: int | None,
    idle_wait: float,
    kinds: str | None,
) -> None:
    """Run one replica of the example gang scheduler on the Cache interface.

    Follows the cache log, waits until every kind is SYNCED and the fold has caught up, then
    plans whole gangs by first fit and publishes their BINDs; the fold admits or rejects them.
    Start several with different --replica names on one log: they never double-book a node.
    Stops on SIGTERM or SIGINT.
    """
    from strata.projector.checkpoints.sql import SqlCheckpointStore
    from strata.scheduler.cache import ALL_KINDS, LogCache
    from strata.scheduler.gang import run_cycle, wait_for_change

    stop = threading.Event()
    stop_on_signals(stop)
    wanted = tuple(k.strip() for k in kinds.split(",")) if kinds else ALL_KINDS
    cache = LogCache(settings, replica, SqlCheckpointStore(settings.checkpoint_url), fold, kinds=wanted)
    cache.run(stop)
    health.require(cache.sync_reason)
    click.echo(f"replica {replica}: waiting for {', '.join(wanted)} to sync", err=True)
    if not cache.wait_for_cache_sync(stop):
        return
    idle_cycles = 0
    totals = {"admitted": 0, "rejected": 0}
    while not stop.is_set():
        health.beat()
        report = run_cycle(cache)
        totals["admitted"] += report.admitted
        totals["rejected"] += report.rejected
        if report.idle:
            idle_cycles += 1
            if exit_when_idle is not None and idle_cycles >= exit_when_idle:
                break
            wait_for_change(cache, report.version, stop, idle_wait)
        else:
            idle_cycles = 0
            click.echo(
                f"replica {replica}: version {report.version}: {report.admitted} admitted, {report.rejected} rejected"
                + "".join(f"; {n}x {r}" for r, n in sorted(report.reasons.items())),
                err=True,
            )
    stop.set()
    click.echo(f"replica {replica}: {totals['admitted']} binds admitted, {totals['rejected']} rejected", err=True)

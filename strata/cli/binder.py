"""`strata bind` and `strata evict`: the dispatcher and the command workers."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import click

from strata.cli.options import fold_options, health_options, kafka_options, stop_on_signals
from strata.log.config import Settings

if TYPE_CHECKING:
    from strata.binder.evict import Mode
    from strata.log.topics import Work

_common = [
    click.option(
        "--workers", type=click.IntRange(min=0), default=2, show_default=True, help="workers on the command topic"
    ),
    click.option(
        "--instance",
        metavar="ID",
        help="this process's stable name (default: hostname-pid); a restart with the same ID fences "
        "its predecessor's open transactions and takes over its group membership at once",
    ),
    click.option("--no-dispatch", is_flag=True, help="run no dispatcher (another process does)"),
    click.option("--threads", type=click.IntRange(min=1), default=32, show_default=True, help="concurrent API calls"),
    click.option(
        "--db-url",
        metavar="URL",
        help="checkpoint store the dispatcher starts from  [env: STRATA_DB_URL; default: SQLite under the data dir]",
    ),
    click.option("--kubeconfig", metavar="FILE", help="the cluster  [env: KUBECONFIG]"),
]


def _with_common(command: Any) -> Any:
    for option in reversed(_common):
        command = option(command)
    return command


@click.command()
@_with_common
@kafka_options
@fold_options
@health_options("binder")
def bind(settings: Settings, fold: Any, **options: Any) -> None:
    """Dispatch admitted BINDs and carry them out against the Kubernetes API.

    Runs until SIGTERM or Ctrl-C: the dispatcher, --workers workers on the bind command topic and
    one worker per retry tier (STRATA_RETRY_DELAYS).
    """
    _serve(settings, fold, "bind", mode="eviction", **options)


@click.command()
@click.option(
    "--mode",
    type=click.Choice(["eviction", "volcano"]),
    default="eviction",
    show_default=True,
    help="eviction: the Eviction API (PodDisruptionBudgets respected); "
    "volcano: Ready=False condition then DELETE, as Volcano's evictor (bypasses PDBs)",
)
@_with_common
@kafka_options
@fold_options
@health_options("evictor")
def evict(settings: Settings, fold: Any, mode: Mode, **options: Any) -> None:
    """Carry out applied EVICTs against the Kubernetes API (and dispatch commands, unless --no-dispatch)."""
    _serve(settings, fold, "evict", mode=mode, **options)


def _serve(
    settings: Settings,
    fold: Any,
    work: Work,
    mode: Mode,
    workers: int,
    instance: str | None,
    no_dispatch: bool,
    threads: int,
    health: Any,
) -> None:
    from strata.binder.service import Service, default_instance

    service = Service(
        settings,
        work,
        fold=fold,
        workers=workers,
        instance=instance or default_instance(),
        dispatch=not no_dispatch,
        mode=mode,
        threads=threads,
    )
    stop_on_signals(service.stop)
    health.require(service.not_ready)
    service.start()
    click.echo(f"{work}: running {len(service.parts)} part(s) as instance {service.instance}", err=True)
    while not service.stop.wait(1.0):
        health.beat()
    service.close()
    if service.errors:
        raise service.errors[0]
    click.echo(f"{work}: stopped", err=True)

"""`strata volcano` and `strata volcano-sidecar`: Volcano's own actions and plugins as one active
replica on the cache log (`strata-volcano`, a Go program), with the sidecar that runs Strata's fold
beside it (docs/volcano.md)."""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import click

from strata.cli.options import fold_options, kafka_options, stop_on_signals
from strata.errors import StrataError
from strata.log.config import Settings

replica_option = click.option(
    "--replica", required=True, metavar="NAME", help="the replica's id, written into every BIND_GROUP and EVICT"
)
kinds_option = click.option(
    "--kinds", metavar="K1,K2", help="kinds that must be SYNCED before the first cycle (default: all seven)"
)


# librdkafka's security properties that strata-volcano reads from the same STRATA_KAFKA_*
# variables as the environment gives them (strata-volcano/internal/cachelog/security.go)
GO_SECURITY = (
    "security.protocol",
    "sasl.mechanisms",
    "sasl.username",
    "sasl.password",
    "ssl.ca.location",
    "ssl.certificate.location",
    "ssl.key.location",
    "ssl.key.password",
)


def binary_env(settings: Settings) -> dict[str, str]:
    """The binary's environment: this one, with the Kafka security settings (-X flags included)
    as STRATA_KAFKA_* variables. A password goes by environment, never on the command line, which
    any user of the machine can read; a TLS or SASL setting the binary would ignore is an error."""
    env = os.environ.copy()
    for key, value in settings.kafka.items():
        key = "sasl.mechanisms" if key == "sasl.mechanism" else key  # librdkafka's alias
        if key in GO_SECURITY:
            env["STRATA_KAFKA_" + key.upper().replace(".", "_")] = str(value)
        elif key.startswith(("sasl.", "ssl.")):
            raise StrataError(
                f"strata-volcano does not take the Kafka property {key} (it takes {', '.join(GO_SECURITY)})"
            )
    return env


def _kinds(kinds: str | None) -> tuple[str, ...]:
    from strata.scheduler.cache import ALL_KINDS

    return tuple(k.strip() for k in kinds.split(",") if k.strip()) if kinds else ALL_KINDS


def _start_sidecar(
    settings: Settings, fold: Any, replica: str, kinds: tuple[str, ...], stop: threading.Event, listen: str
) -> Any:
    from strata.projector.checkpoints.sql import SqlCheckpointStore
    from strata.scheduler.sidecar import Sidecar, SidecarCache

    host, _, port = listen.rpartition(":")
    if not host or not port.isdigit():
        raise StrataError(f"--listen wants HOST:PORT, not {listen!r}")
    cache = SidecarCache(settings, replica, SqlCheckpointStore(settings.checkpoint_url), fold, kinds=kinds)
    return Sidecar(cache, stop, host, int(port))


@click.command("volcano-sidecar")
@replica_option
@click.option("--listen", default="127.0.0.1:0", show_default=True, metavar="HOST:PORT", help="where to answer")
@kinds_option
@kafka_options
@fold_options
def volcano_sidecar(settings: Settings, fold: Any, replica: str, listen: str, kinds: str | None) -> None:
    """The fold beside one strata-volcano replica, answering it on localhost.

    Follows the cache log with Strata's fold under the replica's id and answers its version, the
    tasks it has in Binding or Releasing, and its verdict on each of the replica's records by
    offset. Give it the same --scheduler-name and --default-queue as the replica, the binder and
    the projector. Stops on SIGTERM or SIGINT.
    """
    stop = threading.Event()
    stop_on_signals(stop)
    sidecar = _start_sidecar(settings, fold, replica, _kinds(kinds), stop, listen)
    click.echo(f"sidecar of replica {replica}: {sidecar.url}", err=True)
    try:
        while not stop.wait(0.5):
            pass
    finally:
        sidecar.close()


@click.command("volcano")
@replica_option
@click.option("--kubeconfig", metavar="FILE", help="cluster for status writes and events  [env: KUBECONFIG]")
@click.option(
    "--scheduler-conf",
    type=click.Path(exists=True, dir_okay=False),
    metavar="FILE",
    help="vc-scheduler's configuration YAML (actions, tiers of plugins); default: Volcano's",
)
@click.option(
    "--schedule-period", default="1s", show_default=True, metavar="DURATION", help="between cycles (Go syntax)"
)
@click.option(
    "--exit-when-idle",
    type=click.IntRange(min=1),
    metavar="N",
    help="stop after N cycles in a row that bound nothing (for tests and batch runs)",
)
@kinds_option
@click.option(
    "--binary",
    envvar="STRATA_VOLCANO_BIN",
    type=click.Path(exists=True, dir_okay=False),
    metavar="FILE",
    help="the strata-volcano binary  [env: STRATA_VOLCANO_BIN; default: built from strata-volcano/ and cached]",
)
@click.option(
    "--http-port",
    envvar="STRATA_HTTP_PORT",
    type=click.IntRange(0, 65535),
    metavar="PORT",
    help="the replica's /metrics (Volcano's own), /healthz and /readyz (0: any free one)  [default: off]",
)
@click.option("--http-host", envvar="STRATA_HTTP_HOST", default="127.0.0.1", show_default=True, metavar="HOST")
@click.argument("go_args", nargs=-1, metavar="[-- GO FLAGS]")
@kafka_options
@fold_options
def volcano(
    settings: Settings,
    fold: Any,
    replica: str,
    scheduler_conf: str | None,
    schedule_period: str,
    exit_when_idle: int | None,
    kinds: str | None,
    binary: str | None,
    http_port: int | None,
    http_host: str,
    go_args: tuple[str, ...],
) -> None:
    """Run one replica of Volcano's scheduler (its real actions and plugins) on the cache log.

    Starts the sidecar (Strata's fold under this replica's id) and the strata-volcano binary
    beside it; the replica publishes one BIND_GROUP per job and learns each verdict from the
    fold. Start several with different --replica names on one log: they never double-book a
    node and never half-place a gang. Flags after -- go to the binary (e.g. -- -v=3).
    Stops on SIGTERM or SIGINT; exits with the binary's status.
    """
    from strata.schemas.catalog import AVSC_DIR

    env = binary_env(settings)
    if binary is None:
        from strata.dev.stack.volcano import ensure

        binary = str(ensure(log=lambda line: click.echo(line, err=True)))
    stop = threading.Event()
    stop_on_signals(stop)
    wanted = _kinds(kinds)
    sidecar = _start_sidecar(settings, fold, replica, wanted, stop, "127.0.0.1:0")
    argv = [
        binary,
        f"--replica={replica}",
        f"--bootstrap={settings.bootstrap}",
        f"--topic-prefix={settings.topic_prefix}",
        f"--sidecar={sidecar.url}",
        f"--schemas={Path(str(AVSC_DIR))}",
        f"--default-queue={fold.default_queue}",
        f"--schedule-period={schedule_period}",
        f"--kinds={','.join(wanted)}",
        "--exit-with-parent",
        *(f"--scheduler-name={n}" for n in fold.scheduler_names),
    ]
    if settings.kubeconfig:
        argv.append(f"--kubeconfig={settings.kubeconfig}")
    if scheduler_conf:
        argv.append(f"--scheduler-conf={scheduler_conf}")
    if exit_when_idle is not None:
        argv.append(f"--exit-when-idle={exit_when_idle}")
    if http_port is not None:
        argv += [f"--http-port={http_port}", f"--http-host={http_host}"]
    argv += list(go_args)
    logging.getLogger("strata").info("starting %s", " ".join(argv))
    child = subprocess.Popen(argv, stdin=subprocess.DEVNULL, env=env)
    try:
        while child.poll() is None:
            if stop.wait(0.2):
                child.send_signal(signal.SIGTERM)
                try:
                    child.wait(timeout=60)
                except subprocess.TimeoutExpired:
                    child.kill()
                    child.wait()
                break
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
        stop.set()
        sidecar.close()
    if child.returncode != 0:
        sys.exit(child.returncode if child.returncode > 0 else 1)

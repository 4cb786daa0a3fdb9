"""Plumbing shared by the command groups of `strata`: one-line errors, connection and fold options.

Each command group lives in a module of its own and is attached to ``strata.cli.main``.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import os
import re
import signal
import threading
import time
from collections.abc import Callable
from typing import Any

import click
from confluent_kafka import KafkaException

from strata.errors import StrataError
from strata.log.config import DEFAULT_TOPIC_PREFIX, Settings, settings_from

EXIT_ERROR = 1
# what librdkafka says when a broker refuses us, as opposed to being unreachable
_REFUSAL = re.compile(
    r"(SASL authentication error|SSL handshake failed|certificate verify failed|Authentication failed)"
)
_LOG_PREFIX = re.compile(r"^(?:\S+ )?\[rdkafka#[^]]*\] \[thrd:[^]]*\]: (?:\S+: )?")
_LOG_TIMING = re.compile(r" \(after \d+ms in state \w+\)")


class BrokerRefusals(logging.Handler):
    """Keeps the last failed authentication or TLS handshake that librdkafka logged (a wrong
    password, a certificate one side does not trust).

    A client that cannot authenticate ends with "All broker connections are down" or a timeout;
    the CLI adds a recent refusal to such a Kafka error so that its one line names the cause.
    librdkafka never logs a password."""

    RECENT_S = 120.0  # an old refusal, since recovered from, explains nothing

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self._last: tuple[float, str] | None = None

    def emit(self, record: logging.LogRecord) -> None:
        text = record.getMessage()
        if _REFUSAL.search(text):
            self._last = (time.monotonic(), _LOG_TIMING.sub("", _LOG_PREFIX.sub("", text, count=1)))

    def recent(self) -> str | None:
        if self._last is None or time.monotonic() - self._last[0] > self.RECENT_S:
            return None
        return self._last[1]


BROKER_REFUSALS = BrokerRefusals()  # attached to the librdkafka logger by ``strata.cli.main``


class StrataGroup(click.Group):
    """Turns every failure into one line and an exit code, never a traceback."""

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except (click.exceptions.Exit, click.exceptions.Abort, click.ClickException):
            raise
        except Exception as exc:
            if os.environ.get("STRATA_DEBUG"):
                raise
            line = one_line(exc)
            refusal = BROKER_REFUSALS.recent() if isinstance(exc, KafkaException) else None
            if refusal and refusal not in line:
                line = f"{line} (last connection failure: {refusal})"
            click.echo(f"strata: error: {line}", err=True)
            ctx.exit(EXIT_ERROR)


def one_line(exc: BaseException) -> str:
    if isinstance(exc, KafkaException):
        text = f"Kafka: {exc.args[0].str() if exc.args else exc}"
    elif isinstance(exc, (StrataError, OSError)):
        text = str(exc)
    else:
        text = f"{type(exc).__name__}: {exc}"
    return " ".join(text.split()) or type(exc).__name__


def kafka_options(command: Callable[..., Any]) -> Callable[..., Any]:
    """The connection options of every command that talks to Kafka; builds ``settings``."""

    @click.option("--bootstrap", metavar="HOST:PORT", help="Kafka bootstrap servers  [env: STRATA_KAFKA_BOOTSTRAP]")
    @click.option(
        "--topic-prefix",
        metavar="PREFIX",
        help=f"prefix of every topic name  [env: STRATA_TOPIC_PREFIX; default: {DEFAULT_TOPIC_PREFIX}]",
    )
    @click.option("--data-dir", metavar="DIR", help="local state directory  [env: STRATA_DATA_DIR; default: .strata]")
    @click.option(
        "-X",
        "kafka_properties",
        multiple=True,
        metavar="KEY=VALUE",
        help="librdkafka property for every client (SASL/TLS...); overrides "
        "STRATA_KAFKA_SECURITY_PROTOCOL, STRATA_KAFKA_SASL_*, STRATA_KAFKA_SSL_*",
    )
    @functools.wraps(command)
    def wrapper(
        bootstrap: str | None,
        topic_prefix: str | None,
        data_dir: str | None,
        kafka_properties: tuple[str, ...],
        **kwargs: Any,
    ) -> Any:
        settings = settings_from(
            bootstrap=bootstrap,
            topic_prefix=topic_prefix,
            data_dir=data_dir,
            kafka_properties=kafka_properties,
            db_url=kwargs.pop("db_url", None),
            kubeconfig=kwargs.pop("kubeconfig", None),
        )
        return command(settings=settings, **kwargs)

    return wrapper


def fold_options(command: Callable[..., Any]) -> Callable[..., Any]:
    """What the fold's result depends on besides the records (a checkpoint records them too)."""

    @click.option(
        "--scheduler-name",
        "scheduler_names",
        multiple=True,
        metavar="NAME",
        help="a scheduler whose pods the cache accepts (repeatable; default: volcano)",
    )
    @click.option(
        "--default-queue",
        default="default",
        show_default=True,
        metavar="NAME",
        help="queue of a PodGroup that names none",
    )
    @functools.wraps(command)
    def wrapper(scheduler_names: tuple[str, ...], default_queue: str, **kwargs: Any) -> Any:
        from strata.projector.fold.state import FoldConfig

        config = FoldConfig(scheduler_names=scheduler_names or ("volcano",), default_queue=default_queue)
        return command(fold=config, **kwargs)

    return wrapper


db_option = click.option(
    "--db-url",
    metavar="URL",
    help="checkpoint store (SQLAlchemy URL)  [env: STRATA_DB_URL; default: SQLite under the data dir]",
)
output_option = click.option("--output", "-o", type=click.Choice(["json", "table"]), default="json", show_default=True)


def log_runner(settings: Settings, fold: Any, quarantine: bool = False) -> Any:
    from strata.projector.checkpoints.sql import SqlCheckpointStore
    from strata.projector.runner import LogRunner

    return LogRunner(settings, SqlCheckpointStore(settings.checkpoint_url), fold, quarantine=quarantine)


def health_options(component: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """`--http-port`/`--http-host` of a long-running command; passes it ``health`` (a
    ``strata.health.Health``, served when a port is given) instead of the two options."""

    def decorate(command: Callable[..., Any]) -> Callable[..., Any]:
        @click.option(
            "--http-port",
            envvar="STRATA_HTTP_PORT",
            type=click.IntRange(0, 65535),
            metavar="PORT",
            help="serve /metrics, /healthz and /readyz on this port (0: any free one)  "
            "[env: STRATA_HTTP_PORT; default: off]",
        )
        @click.option(
            "--http-host",
            envvar="STRATA_HTTP_HOST",
            default="127.0.0.1",
            show_default=True,
            metavar="HOST",
            help="address the HTTP endpoints bind to (0.0.0.0 in a pod)  [env: STRATA_HTTP_HOST]",
        )
        @functools.wraps(command)
        def wrapper(http_port: int | None, http_host: str, **kwargs: Any) -> Any:
            from strata.health import Health, HealthServer

            health = Health(component)
            if http_port is not None:
                server = HealthServer(health, http_port, http_host)
                logging.getLogger("strata").info("serving /metrics, /healthz, /readyz on %s:%d", http_host, server.port)
                click.echo(f"{component}: http://{http_host}:{server.port}/readyz", err=True)
            return command(health=health, **kwargs)

        return wrapper

    return decorate


def stop_on_signals(stop: threading.Event) -> None:
    """SIGTERM and SIGINT set ``stop``, through a pipe and a thread of their own. A handler runs in
    the main thread between two bytecodes, possibly while that thread holds the event's own lock
    inside ``stop.wait()``: setting the event there waited for ever on that lock (an ingest's
    SIGTERM hung it in CI). A write to a pipe takes no lock."""
    read_end, write_end = os.pipe()
    os.set_blocking(write_end, False)

    def relay() -> None:
        os.read(read_end, 1)
        stop.set()

    def handler(_signum: int, _frame: Any) -> None:
        with contextlib.suppress(BlockingIOError):  # a full pipe: the relay has had one already
            os.write(write_end, b".")

    threading.Thread(target=relay, name="stop-on-signal", daemon=True).start()
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, handler)

"""`strata dev`, `strata demo` and `strata gen`: the development tools' commands (the only product
modules that import ``strata.dev``)."""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable
from datetime import UTC, datetime
from importlib.resources import files
from pathlib import Path
from typing import Any

import click

from strata.cli.log import summary_text
from strata.cli.options import kafka_options
from strata.log.config import Settings, settings_from


# ---------------------------------------------------------------------------------------- dev
@click.group()
def dev() -> None:
    """The local stack (a Kafka broker on 127.0.0.1) for development, tests and the demo."""


def _stack(data_dir: str | None, kafka_port: int) -> Any:
    from strata.dev.stack import Stack

    return Stack(Path(data_dir or os.environ.get("STRATA_DATA_DIR") or ".strata"), kafka_port)


_dev_options = [
    click.option(
        "--data-dir", metavar="DIR", help="where the stack keeps its data  [env: STRATA_DATA_DIR; default: .strata]"
    ),
    click.option("--kafka-port", type=click.IntRange(1024, 65534), default=19092, show_default=True),
]


def dev_options(f: Callable[..., Any]) -> Callable[..., Any]:
    for option in reversed(_dev_options):
        f = option(f)
    return f


@dev.command("up")
@dev_options
@click.option(
    "--kube/--no-kube",
    default=True,
    show_default=True,
    help="etcd and kube-apiserver with Strata's CRDs too (built from Go modules on first use); exports KUBECONFIG",
)
@click.option(
    "--secure",
    is_flag=True,
    help="export the client settings of the SASL_SSL listener (port + 2); the password is read from its 0600 file",
)
def dev_up(data_dir: str | None, kafka_port: int, kube: bool, secure: bool) -> None:
    """Start the stack (or reuse it) and print shell exports: eval "$(strata dev up)"."""
    import shlex

    from strata.log.topics import ensure_topics

    stack = _stack(data_dir, kafka_port)
    env = stack.up(kube=kube)
    settings = settings_from(bootstrap=env["STRATA_KAFKA_BOOTSTRAP"], data_dir=env["STRATA_DATA_DIR"])
    created = [t for t, outcome in ensure_topics(settings).items() if outcome == "created"]
    if created:
        click.echo(f"created {len(created)} topics with prefix {settings.topic_prefix!r}", err=True)
    if secure:
        env |= {k: v for k, v in stack.kafka.secure_env().items() if k != "STRATA_KAFKA_SASL_PASSWORD"}
    for key, value in env.items():
        click.echo(f"export {key}={value}")
    if secure:  # the secret stays in its file: the shell reads it when it evaluates this line
        click.echo(f'export STRATA_KAFKA_SASL_PASSWORD="$(cat {shlex.quote(str(stack.kafka.password_path))})"')


@dev.command("down")
@dev_options
@click.option("--purge", is_flag=True, help="also delete the stack's data (topics, checkpoints)")
def dev_down(data_dir: str | None, kafka_port: int, purge: bool) -> None:
    """Stop the stack (its data stays unless --purge)."""
    stack = _stack(data_dir, kafka_port)
    stopped = stack.down()
    click.echo(f"stopped: {', '.join(stopped)}" if stopped else "nothing was running", err=True)
    if purge:
        click.echo(f"deleted {stack.purge()}", err=True)


@dev.command("status")
@dev_options
def dev_status(data_dir: str | None, kafka_port: int) -> None:
    """Say what runs; exit 3 when something is stopped."""
    status = _stack(data_dir, kafka_port).status()
    for service, state in status.items():
        click.echo(f"{service}: {state}")
    if any(state == "stopped" for state in status.values()):
        sys.exit(3)


# --------------------------------------------------------------------------------------- demo
@click.command()
@click.option(
    "--trace",
    type=click.Path(dir_okay=False, path_type=Path),
    help="trace to publish (default: the sample cluster history shipped with Strata)",
)
@kafka_options
def demo(settings: Settings, trace: Path | None) -> None:
    """Publish a sample cluster history into a fresh cache log, read it back, summarize it."""
    from strata.ingest.from_trace import publish_trace
    from strata.log.topics import ensure_topics

    trace = trace or Path(str(files("strata.dev.samples") / "sample-cluster.jsonl"))
    stamp = datetime.now(UTC).strftime("%Y%m%d-%H%M%S")
    settings = settings.with_(topic_prefix=f"{settings.topic_prefix}demo-{stamp}-{os.getpid()}.")
    started = time.monotonic()
    ensure_topics(settings)
    report = publish_trace(settings, trace)
    click.echo(f"published {report.records} records of {trace.name} ({len(report.bad)} bad, quarantined)")
    click.echo(summary_text(settings, "table"))
    click.echo(
        f"round trip in {time.monotonic() - started:.2f} s; look again with: "
        f"strata log summary --topic-prefix {settings.topic_prefix}"
    )
    click.echo(
        f"see it: strata ui --topic-prefix {settings.topic_prefix}  "
        f"(why a job waits: strata why job ml/train --topic-prefix {settings.topic_prefix})"
    )


# ---------------------------------------------------------------------------------------- gen
@click.command()
@click.option("--nodes", type=click.IntRange(min=1), default=5000, show_default=True)
@click.option("--pods", type=click.IntRange(min=0), default=150_000, show_default=True, help="pods live at the end")
@click.option("--queues", type=click.IntRange(min=1), default=20, show_default=True)
@click.option(
    "--churn",
    type=click.FloatRange(min=0),
    default=1.0,
    show_default=True,
    help="pods that come and go before the end, per live pod",
)
@click.option("--replicas", type=click.IntRange(min=1), default=3, show_default=True, help="scheduler replicas")
@click.option("--seed", type=int, default=1, show_default=True)
@click.option("--output", "-o", "path", type=click.Path(dir_okay=False, path_type=Path), help="default: stdout")
def gen(nodes: int, pods: int, queues: int, churn: float, replicas: int, seed: int, path: Path | None) -> None:
    """Write a synthetic cluster history (trace format) for benchmarks: the same seed, the same bytes."""
    from strata.dev.gen import generate

    out = open(path, "wb") if path else sys.stdout.buffer  # noqa: SIM115 - closed below
    try:
        stats = generate(out, nodes=nodes, pods=pods, queues=queues, churn=churn, seed=seed, replicas=replicas)
    finally:
        if path:
            out.close()
    click.echo(
        f"{stats.records} records, {stats.bytes} bytes; {stats.live_pods} pods live on {stats.nodes} nodes", err=True
    )

"""`strata`: one command line for the whole system.

Every error a user can cause ends in one line on stderr and a non-zero exit; set
STRATA_DEBUG=1 to see the traceback instead.
"""

from __future__ import annotations

import contextlib
import faulthandler
import gc
import json
import logging
import os
import signal
import sys
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from importlib.resources import files
from pathlib import Path
from typing import Any

import click

from strata import __version__
from strata.cliopts import (
    BROKER_REFUSALS,
    StrataGroup,
    db_option,
    fold_options,
    health_options,
    kafka_options,
    log_runner,
    output_option,
    stop_on_signals,
)
from strata.log.config import KAFKA_LOGGER, Settings, settings_from
from strata.log.errors import StrataError
from strata.projector.gctune import tune_for_fold


@click.group(cls=StrataGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, "--version", "-V", prog_name="strata")
def main() -> None:
    """Strata: Volcano's scheduler cache as a deterministic fold of one Kafka log."""
    tune_for_fold()  # most commands fold the log or a trace; the others allocate little
    logging.basicConfig(level=logging.WARNING, format="strata: %(name)s: %(message)s")
    level = os.environ.get("STRATA_LOG_LEVEL", "").upper()
    if level:  # INFO shows the projector's phases (restore, checkpoints, caught up)
        if level not in ("DEBUG", "INFO", "WARNING", "ERROR"):
            raise StrataError(f"STRATA_LOG_LEVEL={level!r}: give DEBUG, INFO, WARNING or ERROR")
        logging.getLogger("strata").setLevel(level)
    # librdkafka logs every refused connection; the failure that matters reaches the user as
    # the command's one-line error (naming a refusal, BROKER_REFUSALS), so its chatter shows
    # only with STRATA_DEBUG.
    KAFKA_LOGGER.addHandler(BROKER_REFUSALS)
    if os.environ.get("STRATA_DEBUG"):
        KAFKA_LOGGER.setLevel(logging.DEBUG)
    else:
        KAFKA_LOGGER.propagate = False


# ---------------------------------------------------------------------------------------- dev
@main.group()
def dev() -> None:
    """The local stack (a Kafka broker on 127.0.0.1) for development, tests and the demo."""


def _stack(data_dir: str | None, kafka_port: int) -> Any:
    from strata.devstack import Stack

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


# ------------------------------------------------------------------------------------- topics
@main.group()
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


# ------------------------------------------------------------------------------------- ingest
@main.command()
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


# ---------------------------------------------------------------------------------------- log
@main.group("log")
def log_group() -> None:
    """Read the cache log back."""


@log_group.command("summary")
@click.option("--output", "-o", type=click.Choice(["table", "json"]), default="table", show_default=True)
@kafka_options
def log_summary(settings: Settings, output: str) -> None:
    """Count the records of the cache log by type and kind, and list the bad ones."""
    click.echo(_summary(settings, output))


def _summary(settings: Settings, output: str) -> str:
    from strata.log.cachelog import CacheLogReader
    from strata.logview import format_summary, summarize

    reader = CacheLogReader(settings)
    summary = summarize(reader.read())
    return json.dumps(summary, indent=2) if output == "json" else format_summary(summary, reader.topic)


@log_group.command("dump")
@click.option("--from-offset", type=click.IntRange(min=0), default=0, show_default=True)
@click.option("--to-offset", type=click.IntRange(min=0), help="stop before this offset (default: the end now)")
@kafka_options
def log_dump(settings: Settings, from_offset: int, to_offset: int | None) -> None:
    """Print the records as trace-format JSON lines (replayable like the original trace)."""
    from strata.log.cachelog import CacheLogReader
    from strata.logview import as_trace_line

    out = sys.stdout.buffer
    for entry in CacheLogReader(settings).read(from_offset, to_offset):
        out.write(as_trace_line(entry.record) + b"\n")


# --------------------------------------------------------------------------------------- demo
@main.command()
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

    trace = trace or Path(str(files("strata.samples") / "sample-cluster.jsonl"))
    stamp = datetime.now(UTC).strftime("%Y%m%d-%H%M%S")
    settings = settings.with_(topic_prefix=f"{settings.topic_prefix}demo-{stamp}-{os.getpid()}.")
    started = time.monotonic()
    ensure_topics(settings)
    report = publish_trace(settings, trace)
    click.echo(f"published {report.records} records of {trace.name} ({len(report.bad)} bad, quarantined)")
    click.echo(_summary(settings, "table"))
    click.echo(
        f"round trip in {time.monotonic() - started:.2f} s; look again with: "
        f"strata log summary --topic-prefix {settings.topic_prefix}"
    )
    click.echo(
        f"see it: strata ui --topic-prefix {settings.topic_prefix}  "
        f"(why a job waits: strata why job ml/train --topic-prefix {settings.topic_prefix})"
    )


# ------------------------------------------------------------------------------------- replay
@main.command()
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
    from strata.archive import archive_bytes, fold_archive
    from strata.projector.replay import StrictStop

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

        from strata.tables import print_snapshot_tables

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


# ---------------------------------------------------------------------------------------- gen
@main.command()
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
    from strata.gen import generate

    out = open(path, "wb") if path else sys.stdout.buffer  # noqa: SIM115 - closed below
    try:
        stats = generate(out, nodes=nodes, pods=pods, queues=queues, churn=churn, seed=seed, replicas=replicas)
    finally:
        if path:
            out.close()
    click.echo(
        f"{stats.records} records, {stats.bytes} bytes; {stats.live_pods} pods live on {stats.nodes} nodes", err=True
    )


# ---------------------------------------------------------------------------- project, snapshot
@main.command()
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

    from strata.digests import DigestReporter
    from strata.projector.auditstore import AuditIndex
    from strata.projector.runner import ALL_KINDS, Progress, SnapshotOnRequest
    from strata.projector.volcanometrics import VolcanoCollector

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


@main.command()
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
    from strata.history import Position, version_at

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


# ------------------------------------------------------------------------------------- verify
@main.command()
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
        from strata.digests import compared_versions, divergences, read_digests

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
        from strata.archive import verify_archive

        problems = verify_archive(archive)
        for line in problems:
            click.echo(line)
        click.echo(f"{len(problems)} problem(s) in the archive {archive}", err=True)
        if problems:
            sys.exit(1)
        return
    from strata.kubeapi import KubeApi
    from strata.verify import cluster_snapshot, differences

    runner = log_runner(settings, fold)
    log = runner.state_at(runner.reader.end_offset()).snapshot()
    differing = differences(log.to_json(), cluster_snapshot(KubeApi(settings.kubeconfig), fold))
    for line in differing:
        click.echo(line)
    click.echo(f"{len(differing)} difference(s) between the log at version {log.version} and the cluster", err=True)
    if differing:
        sys.exit(1)


# Command groups with modules of their own.
from strata.cli_archive import export, restore  # noqa: E402
from strata.cli_audit import diff, history, story  # noqa: E402
from strata.cli_binder import bind, evict  # noqa: E402
from strata.cli_faults import faults  # noqa: E402
from strata.cli_scheduler import schedule  # noqa: E402
from strata.cli_ui import ui  # noqa: E402
from strata.cli_volcano import volcano, volcano_sidecar  # noqa: E402
from strata.cli_why import why  # noqa: E402

for _command in (
    bind,
    evict,
    schedule,
    export,
    restore,
    history,
    story,
    diff,
    faults,
    why,
    ui,
    volcano,
    volcano_sidecar,
):
    main.add_command(_command)


def run() -> None:
    """The `strata` command: ``main``, and an exit that skips the collector's last pass.

    A command that folded the log ends holding millions of objects, which interpreter exit would
    walk once more in a final collection (0.4-0.5 s at 150,000 pods) to free nothing the end of
    the process does not free anyway; frozen, they are left out of it. Only the command's own
    process does this: ``main`` run in-process (tests) keeps its collector as it was.

    SIGQUIT prints every thread's stack to stderr and the command goes on, as the JVM's thread
    dump does: what a process that will not stop is waiting for, before it is killed."""
    faulthandler.register(signal.SIGQUIT, all_threads=True)
    try:
        main()
    finally:
        gc.freeze()


if __name__ == "__main__":
    run()

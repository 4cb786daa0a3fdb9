"""`strata history`, `strata story` and `strata diff`: the audit of the cache log."""

from __future__ import annotations

import json
from typing import Any

import click

from strata.cli.options import db_option, fold_options, kafka_options, log_runner
from strata.log.config import Settings

_position_help = "an offset, or an ISO-8601 time (Kafka's record timestamps)"
output_choice = click.option("--output", "-o", type=click.Choice(["table", "json"]), default="table", show_default=True)


def say(line: str) -> None:
    """A notice of the CLI's (a catch-up of the audit index), on stderr."""
    click.echo(f"strata: {line}", err=True)


def _index(settings: Settings, fold: Any) -> tuple[Any, Any]:
    """The runner and the audit index, the index brought up to the log's end as of now."""
    from strata.audit.history import catch_up
    from strata.projector.auditindex.store import AuditIndex

    runner = log_runner(settings, fold)
    index = AuditIndex(runner.store.engine)
    catch_up(runner, index, runner.reader.end_offset(), say)
    return runner, index


def _history_command(kind: str, what: str) -> click.Command:
    @click.command(kind, help=f"Every record of the cache log about {what}, in log order.")
    @click.argument("name", metavar="NS/NAME" if kind != "node" else "NAME")
    @click.option("--since", metavar="WHEN", help=f"from here on: {_position_help}")
    @click.option("--until", metavar="WHEN", help=f"up to here: {_position_help}")
    @output_choice
    @db_option
    @kafka_options
    @fold_options
    def command(settings: Settings, fold: Any, name: str, since: str | None, until: str | None, output: str) -> None:
        from strata.audit.history import Position, describe, history, subject_of

        # Bad input first: an error after _index's notice about the index would be a second line.
        subject_of(kind, name)
        start, stop = (Position.parse(since) if since else None), (Position.parse(until) if until else None)
        runner, index = _index(settings, fold)
        items = history(index, runner.identity, kind, name, start, stop)
        if output == "json":
            click.echo(json.dumps(items, sort_keys=True, ensure_ascii=False))
            return
        for item in items:
            click.echo(f"{item['offset']:>10}  {item['time']}  {describe(item)}")
        if not items:
            click.echo(f"no record about {kind} {name}", err=True)

    return command


@click.group()
def history() -> None:
    """Histories from the audit index that `strata project` keeps (brought up to the log's end first)."""


history.add_command(_history_command("pod", "a pod (by namespace/name, and by every uid it had)"))
history.add_command(_history_command("job", "a job: its PodGroup and its pods"))
history.add_command(_history_command("node", "a node: its Node and CSINode, and the binds, evictions and pods on it"))


@click.group()
def story() -> None:
    """Stories a person can read, from the audit index."""


@story.command("job")
@click.argument("name", metavar="NS/NAME")
@db_option
@kafka_options
@fold_options
def story_job(settings: Settings, fold: Any, name: str) -> None:
    """A job's scheduling story: its PodGroup and pods, every bind attempt, binds, evictions, waiting time."""
    from strata.audit.history import history as job_history
    from strata.audit.history import story as tell
    from strata.audit.history import subject_of

    subject_of("job", name)  # a bad name is one line, before _index's notice about the index
    runner, index = _index(settings, fold)
    for line in tell(name, job_history(index, runner.identity, "job", name, None, None)):
        click.echo(line)


@click.command()
@click.argument("a", metavar="A")
@click.argument("b", metavar="B")
@output_choice
@db_option
@kafka_options
@fold_options
def diff(settings: Settings, fold: Any, a: str, b: str, output: str) -> None:
    """What changed between the cache at A and at B (each an offset or an ISO-8601 time)."""
    from strata.audit.diff import diff as compare
    from strata.audit.diff import render
    from strata.audit.history import Position, version_at

    positions = [Position.parse(p) for p in (a, b)]  # bad input is told before Kafka is asked
    runner = log_runner(settings, fold)
    end = runner.reader.end_offset()
    versions = [version_at(runner.reader, p, end) for p in positions]
    snapshots = [runner.state_at(v).snapshot().to_json() for v in versions]
    result = compare(*snapshots)
    if output == "json":
        click.echo(json.dumps(result, sort_keys=True, ensure_ascii=False))
    else:
        for line in render(result):
            click.echo(line)

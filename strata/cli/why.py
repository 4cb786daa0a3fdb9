"""`strata why pod|job NS/NAME`: why a task is where it is, or waits, at a version of the cache."""

from __future__ import annotations

import json
from typing import Any

import click

from strata.cli.audit import say
from strata.cli.options import db_option, fold_options, kafka_options
from strata.log.config import Settings

output_choice = click.option("--output", "-o", type=click.Choice(["table", "json"]), default="table", show_default=True)


def _why_command(kind: str, what: str) -> click.Command:
    @click.command(kind, help=f"Why {what} waits, or where it is, at a version of the cache (docs/why.md).")
    @click.argument("name", metavar="NS/NAME")
    @click.option(
        "--at",
        metavar="WHEN",
        help="after the record at this offset, or as of this ISO-8601 time; default: the log's end",
    )
    @output_choice
    @db_option
    @kafka_options
    @fold_options
    def command(settings: Settings, fold: Any, name: str, at: str | None, output: str) -> None:
        from strata.audit.history import Position
        from strata.audit.why import explain, parse_name

        # bad input first, before Kafka is asked and before a notice about the index
        namespace, short = parse_name(kind, name)
        position = Position.parse(at) if at is not None else None
        answer = explain(
            settings,
            kind,
            namespace,
            short,
            position,
            fold,
            notice=say,
        )
        if output == "json":
            click.echo(json.dumps(answer.to_json(), sort_keys=True, ensure_ascii=False))
        else:
            for line in answer.lines():
                click.echo(line)

    return command


@click.group()
def why() -> None:
    """Why a pod or a job is pending, bound or running: the nodes, the gang, the queue, the binds."""


why.add_command(_why_command("pod", "a pod"))
why.add_command(_why_command("job", "a job (its PodGroup's tasks)"))

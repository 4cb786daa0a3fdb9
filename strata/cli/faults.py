"""`strata faults`: run the fault-injection scenarios and print what held."""

from __future__ import annotations

import tempfile
import time
from pathlib import Path

import click

from strata.cli.options import kafka_options
from strata.dev.faults import SCENARIOS
from strata.log.config import Settings


@click.command()
@click.option(
    "--only",
    "only",
    multiple=True,
    metavar="NAME",
    help=f"run only these scenarios (repeatable): {', '.join(SCENARIOS)}",
)
@click.option("--quick", is_flag=True, help="fewer runs per scenario (what the default test suite runs)")
@click.option("--kubeconfig", metavar="FILE", help="the local cluster  [env: KUBECONFIG]")
@kafka_options
def faults(settings: Settings, only: tuple[str, ...], quick: bool) -> None:
    """Inject faults into the real local stack (`strata dev up`) and check that nothing is lost.

    Prints a table: scenario, runs, passed, records lost, duplicates, digest mismatches, negative
    controls caught, time. Exits 1 when any scenario failed or any negative control went unseen.
    """
    from rich.console import Console
    from rich.table import Table

    from strata.dev.faults import FaultContext, FaultResult, scenario
    from strata.errors import StrataError

    names = list(only) or list(SCENARIOS)
    unknown = [n for n in names if n not in SCENARIOS]
    if unknown:
        raise StrataError(f"unknown scenario {unknown[0]!r}; there are: {', '.join(SCENARIOS)}")
    results: list[FaultResult] = []
    with tempfile.TemporaryDirectory(prefix="strata-faults-") as tmp:
        for name in names:
            ctx = FaultContext(settings, Path(tmp) / name, quick, log=lambda m: click.echo(m, err=True))
            ctx.workdir.mkdir(parents=True)
            click.echo(f"scenario {name} ...", err=True)
            started = time.monotonic()
            try:
                result = scenario(name)(ctx)
            except Exception as exc:  # a scenario that breaks is a failed row, not a crash of the table
                result = FaultResult(name, runs=1, notes=[f"{type(exc).__name__}: {exc}"])
            result.seconds = time.monotonic() - started
            results.append(result)
    table = Table(title="strata faults")
    for column in (
        "scenario",
        "runs",
        "passed",
        "records lost",
        "duplicates",
        "digest mismatches",
        "controls",
        "time",
        "notes",
    ):
        table.add_column(column)
    for r in results:
        table.add_row(
            r.scenario,
            str(r.runs),
            str(r.passed),
            str(r.records_lost),
            str(r.duplicates),
            str(r.digest_mismatches),
            r.controls_caught,
            f"{r.seconds:.0f} s",
            "; ".join(r.notes)[:200],
        )
    Console(width=160).print(table)
    if not all(r.ok for r in results):
        raise SystemExit(1)

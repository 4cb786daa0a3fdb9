"""`strata export` and `strata restore`: the cache log as Avro Object Container Files."""

from __future__ import annotations

import click


@click.command("export")
def export() -> None:
    """Write the cache log into an archive directory."""
    raise click.ClickException("not implemented yet")


@click.command()
def restore() -> None:
    """Rebuild the cache log from an archive directory."""
    raise click.ClickException("not implemented yet")

"""`strata bind` and `strata evict`: the dispatcher and the command workers."""

from __future__ import annotations

import click


@click.command()
def bind() -> None:
    """Dispatch admitted BINDs and carry them out against the Kubernetes API."""
    raise click.ClickException("not implemented yet")


@click.command()
def evict() -> None:
    """Carry out applied EVICTs against the Kubernetes API."""
    raise click.ClickException("not implemented yet")

"""`strata schedule`: the example gang scheduler, one replica per process."""

from __future__ import annotations

import click


@click.command()
def schedule() -> None:
    """Run one replica of the example scheduler on the Cache interface."""
    raise click.ClickException("not implemented yet")

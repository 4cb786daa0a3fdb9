"""The command line, the top layer: one module per command group, ``main`` the group of them all
and ``run`` the `strata` command (``strata.cli:run``)."""

from strata.cli.main import main, run

__all__ = ["main", "run"]

"""`python -m strata.cli`: the `strata` command."""

from strata.cli.main import run

run()

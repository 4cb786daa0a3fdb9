"""Strata: Volcano's scheduler cache as an event-sourced fold of one Kafka log."""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("strata")
except PackageNotFoundError:  # running from a source tree that was not installed
    __version__ = "0+unknown"

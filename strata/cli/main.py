"""`strata`: one command line for the whole system; each command group is a module of this package.

Every error a user can cause ends in one line on stderr and a non-zero exit; set
STRATA_DEBUG=1 to see the traceback instead.
"""

from __future__ import annotations

import faulthandler
import gc
import logging
import os
import signal

import click

from strata import __version__
from strata.cli.audit import diff, history, story
from strata.cli.binder import bind, evict
from strata.cli.dev import demo, dev, gen
from strata.cli.faults import faults
from strata.cli.ingest import ingest
from strata.cli.log import log_group, topics
from strata.cli.options import (
    BROKER_REFUSALS,
    StrataGroup,
)
from strata.cli.projector import project, replay, snapshot
from strata.cli.recovery import export, restore, verify
from strata.cli.scheduler import schedule
from strata.cli.ui import ui
from strata.cli.volcano import volcano, volcano_sidecar
from strata.cli.why import why
from strata.errors import StrataError
from strata.log.config import KAFKA_LOGGER
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


# Every command group has a module of its own; their order here is not the help's (sorted).
for _command in (
    topics,
    log_group,
    ingest,
    replay,
    project,
    snapshot,
    verify,
    export,
    restore,
    history,
    story,
    diff,
    why,
    bind,
    evict,
    schedule,
    volcano,
    volcano_sidecar,
    ui,
    dev,
    demo,
    gen,
    faults,
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

"""`strata ui`: the read-only web UI over the cache log and the audit index (docs/ui.md)."""

from __future__ import annotations

import socket
import threading
from typing import Any

import click

from strata.cli.audit import say
from strata.cli.options import db_option, fold_options, kafka_options, log_runner
from strata.log.config import Settings

LOOPBACK = ("127.0.0.1", "localhost", "::1")


@click.command()
@click.option("--host", default="127.0.0.1", show_default=True, help="address to listen on (loopback unless told)")
@click.option("--port", type=click.IntRange(0, 65535), default=8700, show_default=True, help="0: any free port")
@click.option(
    "--token",
    envvar="STRATA_UI_TOKEN",
    metavar="TOKEN",
    help="required on every request when set (open the UI once with ?token=TOKEN)  [env: STRATA_UI_TOKEN]",
)
@click.option(
    "--cache-mb",
    type=click.IntRange(min=0),
    default=512,
    show_default=True,
    help="memory for past versions' snapshots and anchors (beyond the live state and one restored checkpoint)",
)
@click.option(
    "--index/--no-index",
    "keep_index",
    default=True,
    show_default=True,
    help="write the records the UI folds into the audit index where it lacks them (as `strata history` does)",
)
@db_option
@kafka_options
@fold_options
def ui(settings: Settings, fold: Any, host: str, port: int, token: str | None, cache_mb: int, keep_index: bool) -> None:
    """Serve the web UI: the cache at any version (a time slider, live mode), jobs, pods, nodes, replicas."""
    import uvicorn

    from strata.audit.history import catch_up
    from strata.projector.auditindex.store import AuditIndex
    from strata.ui.app import allowed_hosts, create_app
    from strata.ui.source import Source
    from strata.ui.timeline import Timeline

    listener = _listen(host, port)  # a taken port is one line now, not after the catch-up
    runner = log_runner(settings, fold)
    index = AuditIndex(runner.store.engine)
    if keep_index:
        # the pages' histories must reach the version they show
        catch_up(runner, index, runner.reader.end_offset(), say)
    stop = threading.Event()
    timeline = Timeline(runner, index if keep_index else None, budget_bytes=cache_mb << 20)
    timeline.start(stop)
    timeline.wait_ready(timeout_s=3600.0)
    source = Source(settings, runner, index, timeline)
    source.warm()
    app = create_app(source, token=token, hosts=allowed_hosts(host))
    bound = listener.getsockname()
    shown = f"[{bound[0]}]" if ":" in bound[0] else bound[0]
    if host not in LOOPBACK and not token:
        click.echo(f"strata ui: listening on {host} without a token: anyone who reaches it reads the log", err=True)
    click.echo(f"strata ui: http://{shown}:{bound[1]}/ (version {timeline.live_version})", err=True)
    # an open live feed never ends by itself: on Ctrl-C or SIGTERM, connections get 2 s to close
    config = uvicorn.Config(app, log_level="warning", access_log=False, lifespan="off", timeout_graceful_shutdown=2)
    server = uvicorn.Server(config)
    try:
        server.run(sockets=[listener])
    finally:
        stop.set()


def _listen(host: str, port: int) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    sock.listen(128)
    sock.set_inheritable(True)
    return sock

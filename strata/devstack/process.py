"""Background processes of the local stack: start detached, find again by pid file, stop."""

from __future__ import annotations

import hashlib
import json
import os
import signal
import socket
import subprocess
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import ClassVar

from strata.log.errors import StrataError


@dataclass(frozen=True)
class ProcessState:
    pid: int
    marker: str  # a string its command line holds, so a recycled pid is not taken for ours
    port: int
    config: str = ""  # configuration_of() what it was started with; a server started otherwise restarts


def configuration_of(argv: list[str], *files: str) -> str:
    """A digest of how a server is started: its command line and the text of its configuration
    files. `strata dev up` restarts a running server whose digest differs (one rule for all)."""
    return hashlib.sha256(json.dumps([argv, list(files)]).encode()).hexdigest()


def port_open(port: int, host: str = "127.0.0.1") -> bool:
    with socket.socket() as s:
        s.settimeout(0.5)
        return s.connect_ex((host, port)) == 0


def read_state(path: Path) -> ProcessState | None:
    try:
        return ProcessState(**json.loads(path.read_text()))
    except (OSError, ValueError, TypeError):
        return None


def alive(state: ProcessState | None) -> bool:
    """Whether the process of ``state`` runs (and is ours, not a recycled pid)."""
    if state is None or not _running(state.pid):
        return False
    try:
        return state.marker.encode() in Path(f"/proc/{state.pid}/cmdline").read_bytes()
    except OSError:
        return False


def _running(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[-1].split()[0] != "Z"


def start(
    argv: list[str], log_path: Path, state_path: Path, marker: str, port: int, cwd: Path, config: str = ""
) -> ProcessState:
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with open(log_path, "ab") as log:
        # A new session: the process outlives this command and ignores the terminal's signals.
        proc = subprocess.Popen(
            argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, cwd=cwd, start_new_session=True
        )
    state = ProcessState(proc.pid, marker, port, config)
    state_path.write_text(json.dumps(asdict(state)))
    return state


def stop(state_path: Path, timeout_s: float = 30.0) -> bool:
    """Stop the process of ``state_path``; True when one was running."""
    state = read_state(state_path)
    was_running = alive(state)
    if state is not None and was_running:
        os.kill(state.pid, signal.SIGTERM)
        deadline = time.monotonic() + timeout_s
        while alive(state) and time.monotonic() < deadline:
            time.sleep(0.2)
        if alive(state):
            os.kill(state.pid, signal.SIGKILL)
            while alive(state):
                time.sleep(0.1)
    state_path.unlink(missing_ok=True)
    return was_running


def wait_until(ready: Callable[[], bool], what: str, timeout_s: float, state: ProcessState, log_path: Path) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if ready():
            return
        # by pid alone: right after the fork, the command line is not yet the new program's
        if not _running(state.pid):
            raise StrataError(f"{what} exited during start-up; see {log_path}")
        time.sleep(0.2)
    raise StrataError(f"{what} not ready after {timeout_s:g} s; see {log_path}")


@dataclass(frozen=True)
class LocalServer:
    """A server of the local stack that keeps its files under ``<data dir>/<HOME>``."""

    HOME: ClassVar[str]
    data_dir: Path
    port: int

    @property
    def home(self) -> Path:
        return self.data_dir.resolve() / self.HOME

    @property
    def state_path(self) -> Path:
        return self.home / "server.json"

    @property
    def log_path(self) -> Path:
        return self.home / "server.log"

    def running(self) -> ProcessState | None:
        state = read_state(self.state_path)
        return state if alive(state) else None

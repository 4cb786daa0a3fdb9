"""Background processes of the local stack: start detached, find again, stop.

A server is found by its pid file first. When that file is missing or names another process (a
start that was interrupted, two `strata dev up` that raced before the data directory had a lock,
a file deleted by hand), it is found by its command line instead: the program it runs and an
argument naming a file of this data directory (its ``Signature``). Such a process is adopted (its
pid file is written again) rather than reported as a stranger on its own port.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import signal
import socket
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import ClassVar

from strata.errors import StrataError

Log = Callable[[str], None]
LOCK_NAME = "stack.lock"
_LISTEN = "0A"  # the TCP_LISTEN state in /proc/net/tcp


@dataclass(frozen=True)
class ProcessState:
    pid: int
    marker: str  # an argument its command line holds, so a recycled pid is not taken for ours
    port: int
    config: str = ""  # configuration_of() what it was started with; a server started otherwise restarts


@dataclass(frozen=True)
class Signature:
    """How a server of one data directory shows in its command line."""

    program: str  # the file name of argv[0] starts with it (etcd-v3.6.16 for "etcd")
    marker: str  # a path under the data directory: an argument, or the value of an --option=
    also: tuple[str, ...] = ()  # further arguments it must have (the main class of a JVM)

    def matches(self, argv: list[str]) -> bool:
        if not argv or not Path(argv[0]).name.startswith(self.program):
            return False
        return holds(argv, self.marker) and all(arg in argv for arg in self.also)


def holds(argv: list[str], marker: str) -> bool:
    # a whole argument, not a substring: <dir>/.strata must not match <dir>/.strata2
    return any(arg == marker or arg.endswith(f"={marker}") for arg in argv)


def configuration_of(argv: list[str], *files: str) -> str:
    """A digest of how a server is started: its command line and the text of its configuration
    files. `strata dev up` restarts a running server whose digest differs (one rule for all)."""
    return hashlib.sha256(json.dumps([argv, list(files)]).encode()).hexdigest()


def port_open(port: int, host: str = "127.0.0.1") -> bool:
    with socket.socket() as s:
        s.settimeout(0.5)
        return s.connect_ex((host, port)) == 0


_held = threading.local()


@contextlib.contextmanager
def data_dir_lock(data_dir: Path, log: Log | None = None) -> Iterator[None]:
    """One `up` or `down` at a time per data directory, across processes: a second caller waits,
    then finds the first one's servers running. Re-entrant in a thread, because the Stack's `up`
    calls each server's `up`, which takes it too (a second flock of the same file in one process
    would wait for itself)."""
    path = data_dir.resolve() / LOCK_NAME
    held: set[Path] = _held.__dict__.setdefault("paths", set())
    if path in held:
        yield
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    # Python opens files non-inheritable, so the servers started under the lock do not keep it
    with open(path, "ab") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            if log is not None:
                log(f"waiting for another `strata dev up` or `down` on {data_dir} ({path})")
            fcntl.flock(lock, fcntl.LOCK_EX)
        held.add(path)
        try:
            yield
        finally:
            held.discard(path)


def read_state(path: Path) -> ProcessState | None:
    try:
        return ProcessState(**json.loads(path.read_text()))
    except (OSError, ValueError, TypeError):
        return None


def write_state(path: Path, state: ProcessState) -> None:
    # whole or not at all: `dev status` may adopt a server while an `up` writes the same file
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(asdict(state)))
    tmp.rename(path)


def cmdline(pid: int) -> list[str]:
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return []
    return raw.decode(errors="replace").split("\0")[:-1] if raw else []


def alive(state: ProcessState | None) -> bool:
    """Whether the process of ``state`` runs (and is ours, not a recycled pid)."""
    return state is not None and _running(state.pid) and holds(cmdline(state.pid), state.marker)


def _running(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[-1].split()[0] != "Z"


def _pids() -> list[int]:
    return sorted(int(p.name) for p in Path("/proc").iterdir() if p.name.isdigit())


def find(signature: Signature) -> list[int]:
    """The running processes whose command line is ``signature``'s, oldest pid first."""
    return [pid for pid in _pids() if signature.matches(cmdline(pid)) and _running(pid)]


def _listening_sockets() -> dict[str, int]:
    """The TCP sockets that listen, as the link name of their file descriptors -> port."""
    sockets = {}
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            if fields[3] == _LISTEN:
                sockets[f"socket:[{fields[9]}]"] = int(fields[1].rsplit(":", 1)[1], 16)
    return sockets


def _socket_links(pid: int) -> set[str]:
    try:
        fds = list(Path(f"/proc/{pid}/fd").iterdir())
    except OSError:  # gone, or another user's process when we are not root
        return set()
    links = set()
    for fd in fds:
        with contextlib.suppress(OSError):
            links.add(os.readlink(fd))
    return links


def listening_ports(pid: int) -> set[int]:
    sockets = _listening_sockets()
    return {sockets[link] for link in _socket_links(pid) if link in sockets}


def listeners(port: int) -> list[int]:
    """The pids that listen on TCP ``port`` (those we may look at: all of them as root)."""
    links = {link for link, p in _listening_sockets().items() if p == port}
    if not links:
        return []
    return [pid for pid in _pids() if _socket_links(pid) & links]


def describe_listener(port: int) -> str:
    """' (pid N: its command line)' of who listens on ``port``, or '' when that cannot be seen."""
    pids = listeners(port)
    if not pids:
        return ""
    line = " ".join(cmdline(pids[0]))
    return f" (pid {pids[0]}: {line[:120]})"


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
    write_state(state_path, state)
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
    WHAT: ClassVar[str]  # its name in messages
    UP_TIMEOUT_S: ClassVar[float] = 60.0
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

    @property
    def signature(self) -> Signature:
        raise NotImplementedError

    @property
    def ports(self) -> tuple[int, ...]:
        """Every port it listens on; each must be free (or its own) to start it."""
        return (self.port,)

    def running_config(self, argv: list[str]) -> str:
        """The configuration_of() a running server of this home that was started with ``argv``
        (as its configuration files are now); '' where ``up`` does not compare configurations."""
        return ""

    def locked(self, log: Log | None = None) -> contextlib.AbstractContextManager[None]:
        return data_dir_lock(self.data_dir, log)

    def up(self, log: Log = print, timeout_s: float | None = None) -> str:
        """Start the server, or reuse (or adopt) the running one; says which."""
        with self.locked(log):
            return self._up(log, self.UP_TIMEOUT_S if timeout_s is None else timeout_s)

    def _up(self, log: Log, timeout_s: float) -> str:
        raise NotImplementedError

    def down(self) -> bool:
        """Stop the server of this data directory, adopted first when its pid file is lost; True
        when one was running."""
        with self.locked():
            self.running()
            return self._stop()

    def _stop(self) -> bool:
        return stop(self.state_path)

    def running(self, log: Log | None = None) -> ProcessState | None:
        """The running server of this data directory: by its pid file, else by its command line
        (then adopted: the pid file is written again, and ``log`` says so)."""
        state = read_state(self.state_path)
        if alive(state):
            return state
        return self._adopt(log)

    def _adopt(self, log: Log | None) -> ProcessState | None:
        pids = find(self.signature)
        if not pids:
            return None
        ports = {pid: listening_ports(pid) for pid in pids}
        # an orphan beside one still starting: the one that serves our port
        pid = next((pid for pid in pids if self.port in ports[pid]), pids[0])
        state = ProcessState(
            pid, self.signature.marker, min(ports[pid], default=self.port), self.running_config(cmdline(pid))
        )
        self.home.mkdir(parents=True, exist_ok=True)
        write_state(self.state_path, state)
        if log is not None:
            log(f"{self.WHAT} of this data directory runs as pid {pid} without its pid file: adopted it")
        return state

    def check_ports_free(self, hint: str = "") -> None:
        """Raise when a process that is not this data directory's server holds one of its ports."""
        for port in self.ports:
            if port_open(port):
                raise StrataError(f"port {port} is in use by another process{describe_listener(port)}{hint}")

"""Every test below tests/fold/ runs with I/O forbidden to the fold.

A file opened, a socket made, a process started or forked from a frame of a module of
``strata.projector.fold`` raises ``FoldIOError`` there and fails the test, even if the fold
catches the error: the import contracts say what the fold may import, this says what it may do
with what it imported (nothing of the outside world). The test's own I/O (reading a trace, a
replay's file) is not the fold's and goes on; an import that the fold makes reads a module's
source through importlib, which is not the fold's I/O either.
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import strata.projector.fold as fold_package

# the fold's files as their code objects name them: through the strata/projector symlink as
# imported, and as resolved
FOLD_DIRS = tuple(
    {str(Path(fold_package.__file__).parent) + os.sep, str(Path(fold_package.__file__).resolve().parent) + os.sep}
)
EVENTS = frozenset(
    {
        "open",
        "os.listdir",
        "os.scandir",
        "socket.__new__",
        "socket.connect",
        "socket.bind",
        "socket.getaddrinfo",
        "subprocess.Popen",
        "os.system",
        "os.fork",
        "os.forkpty",
        "os.posix_spawn",
        "os.exec",
        "os.spawn",
        "os.startfile",
        "urllib.Request",
    }
)


class FoldIOError(RuntimeError):
    """The fold did I/O."""


_watchers: list[list[str]] = []  # the innermost list records what the fold did


def _fold_frame(frame: Any) -> str | None:
    """The fold's frame among the callers of an audited event (None: not the fold's I/O)."""
    while frame is not None:
        name = frame.f_code.co_filename
        if name.startswith("<frozen importlib"):
            return None  # an import reads a module's source; the fold's own I/O comes through no import
        if name.startswith(FOLD_DIRS):
            return f"{name}:{frame.f_lineno} ({frame.f_code.co_name})"
        frame = frame.f_back
    return None


def _hook(event: str, args: tuple[Any, ...]) -> None:
    if not _watchers or event not in EVENTS:
        return
    where = _fold_frame(sys._getframe(1))
    if where is not None:
        what = f"{event} {args[0]!r}" if args else event
        _watchers[-1].append(f"{what} from {where}")
        raise FoldIOError(f"the fold is pure: {what} from {where}")


sys.addaudithook(_hook)  # hooks cannot be removed; it does nothing while no test watches


@contextlib.contextmanager
def fold_io_forbidden() -> Iterator[list[str]]:
    """Within it, I/O from the fold raises ``FoldIOError``; yields the list of what was tried."""
    seen: list[str] = []
    _watchers.append(seen)
    try:
        yield seen
    finally:
        _watchers.remove(seen)


@pytest.fixture(autouse=True)
def _the_fold_does_no_io() -> Iterator[None]:
    with fold_io_forbidden() as seen:
        yield
    if seen:
        pytest.fail("the fold did I/O:\n" + "\n".join(seen), pytrace=False)

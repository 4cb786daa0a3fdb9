"""The guard of tests/fold/ catches a fold that does I/O: the real replay of a conformance trace,
with one function of the fold given a file or a socket to open, fails under it."""

from __future__ import annotations

import socket
import textwrap
from collections.abc import Callable
from typing import Any

import pytest

from strata.projector.fold import kinds
from strata.projector.replay import replay_file
from tests.fold.conftest import FoldIOError, fold_io_forbidden
from tests.paths import CONFORMANCE

TRACE = CONFORMANCE / "c01.jsonl"
OPEN_A_FILE = "open('/dev/null').close()"
MAKE_A_SOCKET = "__import__('socket').socket(__import__('socket').AF_INET, __import__('socket').SOCK_DGRAM).close()"


def _impure(original: Callable[..., Any], io: str) -> Callable[..., Any]:
    """``original`` doing ``io`` first, compiled as code of the fold's own file (as a change to the
    fold would be): the guard tells the fold's frames by their file."""
    source = textwrap.dedent(f"""
        def impure(*args, **kwargs):
            {io}
            return original(*args, **kwargs)
    """)
    scope: dict[str, Any] = {"original": original}
    exec(compile(source, kinds.__file__, "exec"), scope)
    return scope["impure"]


@pytest.mark.parametrize("io", [OPEN_A_FILE, MAKE_A_SOCKET], ids=["file", "socket"])
def test_a_fold_that_does_io_is_caught(monkeypatch: pytest.MonkeyPatch, io: str):
    # every node's and pod's resources pass through it
    monkeypatch.setattr(kinds, "parse_resources", _impure(kinds.parse_resources, io))
    with fold_io_forbidden() as seen, pytest.raises(FoldIOError):
        replay_file(TRACE)
    assert seen and kinds.__file__ in seen[0]


def test_the_same_replay_of_the_pure_fold_passes():
    with fold_io_forbidden() as seen:
        replay_file(TRACE)
    assert seen == []


def test_the_tests_own_io_is_not_the_folds():
    with fold_io_forbidden() as seen:
        TRACE.read_bytes()
        socket.socket(socket.AF_INET, socket.SOCK_DGRAM).close()
    assert seen == []

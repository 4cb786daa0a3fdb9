"""What Strata's helper processes share: dying with their parent, stepping aside, wide pipes.

A fold hands work to processes of its own (a checkpoint's forked writer, the audit index's
writer, a long read's reader): each dies with the process it serves, so a killed fold leaves
no orphan writing late, and the pipes between them hold a frame's worth.
"""

from __future__ import annotations

import contextlib
import ctypes
import fcntl
import os
import signal
import sys

# The checkpoint child and the audit index's writer share the cores with the fold, whose pace is
# what a reader of the projector waits for: at a lower priority they take the CPU the fold leaves
# them, and catch up when it idles (a backlog of the writer makes the fold wait, so the index
# cannot fall behind without bound). On 2 cores at 5,000 nodes / 150,000 pods this took
# `project --stop-at-end` from 48.6 to 44.6 s (docs/projector.md, run S).
BACKGROUND_NICE = 10
PIPE_BYTES = 1 << 20  # Linux's default ceiling for an unprivileged F_SETPIPE_SZ
_F_SETPIPE_SZ = 1031
_PR_SET_PDEATHSIG = 1


def step_aside() -> None:
    """Lower this process's priority by BACKGROUND_NICE (a background helper of the fold)."""
    os.nice(BACKGROUND_NICE)


def die_with(parent: int) -> None:
    """SIGKILL this process when its parent dies (Linux); exit now if it is gone already."""
    if sys.platform.startswith("linux"):
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    if os.getppid() != parent:
        os._exit(1)


def widen(fd: int) -> None:
    """Give the pipe a frame's room (64 KiB by default); the kernel may refuse: not needed."""
    with contextlib.suppress(OSError):
        fcntl.fcntl(fd, _F_SETPIPE_SZ, PIPE_BYTES)

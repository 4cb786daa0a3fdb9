"""A task's status: one type for the fold, the snapshot, the kinds, the example scheduler and gen.

The statuses a pod derives (``kinds.pod_view``) and the two that only records lay over it
(Binding after an admitted BIND, Releasing after an applied EVICT). How a task moves from one to
the next, and which record moves it, is drawn once, on the ``Cache`` interface
(``strata.scheduler.interface``).
"""

from __future__ import annotations

from enum import StrEnum


class TaskStatus(StrEnum):
    # a StrEnum is its name's string: the canonical JSON and the checkpoints hold the same text
    PENDING = "Pending"
    BINDING = "Binding"
    BOUND = "Bound"
    RUNNING = "Running"
    RELEASING = "Releasing"
    SUCCEEDED = "Succeeded"
    FAILED = "Failed"
    UNKNOWN = "Unknown"


# Volcano's AllocatedStatus: counted in the job's allocation, kept through an update without a node
ALLOCATED = frozenset({TaskStatus.BINDING, TaskStatus.BOUND, TaskStatus.RUNNING})
# on no node's account, whatever node the pod names
OFF_NODE = frozenset({TaskStatus.SUCCEEDED, TaskStatus.FAILED})

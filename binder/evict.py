"""The evict action, in one of two modes.

``eviction`` (default): POST a ``policy/v1`` Eviction. The API server checks every
PodDisruptionBudget that selects the pod and answers 429 while none has room: that is transient
and goes through the retry tiers, so a budget is never exceeded. A pod that is already gone
(404, or another uid under its name) is what an eviction wants: EVICT_SUCCEEDED.

``volcano``: what Volcano's ``defaultEvictor`` does: a ``Ready=False, reason=Evict`` condition on
the pod's status, then a DELETE with the uid as precondition. It **bypasses PodDisruptionBudgets**
(a DELETE is not an eviction) and needs ``pods/status`` patch and ``pods`` delete rights.
"""

from __future__ import annotations

from typing import Any, Literal

from strata.binder.actions import Result, classify, current_pod, guarded, judged_by_pod, patch_condition, pod_path
from strata.kubeapi import Answer, KubeApi
from strata.schemas import EvictCommand

Mode = Literal["eviction", "volcano"]
MODES: tuple[Mode, ...] = ("eviction", "volcano")


class EvictAction:
    def __init__(self, api: KubeApi, mode: Mode = "eviction") -> None:
        self.api = api
        self.mode = mode

    def run(self, command: EvictCommand) -> Result:
        if self.mode == "volcano":
            return guarded(lambda: self._delete(command), "evict")
        return guarded(lambda: self._evict(command), "evict")

    def _evict(self, cmd: EvictCommand) -> Result:
        eviction = {
            "apiVersion": "policy/v1",
            "kind": "Eviction",
            "metadata": {"name": cmd.name, "namespace": cmd.namespace},
            "deleteOptions": {"preconditions": {"uid": cmd.pod_uid}},
        }
        answer = self.api.call("POST", pod_path(cmd.namespace, cmd.name) + "/eviction", eviction, timeout=10.0)
        if answer.status in (200, 201):
            return Result.ok()
        if answer.status == 404:
            return Result.ok("pod already gone")
        if answer.status == 409:
            return self._conflict(cmd, answer.message)
        if answer.status == 500 and "more than one" in answer.message.lower():
            # several PDBs select the pod: a misconfiguration no retry fixes (Eviction API docs)
            return Result.terminal(f"eviction refused: {answer.message}")
        return classify(answer, "eviction refused")

    def _delete(self, cmd: EvictCommand) -> Result:
        condition = {"type": "Ready", "status": "False", "reason": "Evict", "message": cmd.reason or "evicted"}
        patched = patch_condition(self.api, cmd.namespace, cmd.name, cmd.pod_uid, condition)
        if patched.status in (404, 422):  # gone, or another pod (uid) under the name
            return self._gone_or(cmd, classify(patched, "status update refused"))
        if patched.status >= 300:
            return classify(patched, "status update refused")
        options = {"apiVersion": "v1", "kind": "DeleteOptions", "preconditions": {"uid": cmd.pod_uid}}
        answer = self.api.call("DELETE", pod_path(cmd.namespace, cmd.name), options, timeout=10.0)
        if answer.status in (200, 202, 404):
            return Result.ok("" if answer.status != 404 else "pod already gone")
        if answer.status == 409:
            return self._conflict(cmd, answer.message)
        return classify(answer, "delete refused")

    def done_already(self, cmd: EvictCommand) -> Result | None:
        return judged_by_pod(self.api, cmd, _evicted)

    def _conflict(self, cmd: EvictCommand, message: str) -> Result:
        # 409 is mostly the uid precondition: the pod of this command is gone, a new one has its name
        return self._gone_or(cmd, Result.transient(f"conflict: {message}"))

    def _gone_or(self, cmd: EvictCommand, otherwise: Result) -> Result:
        answer, pod = current_pod(self.api, cmd.namespace, cmd.name, cmd.pod_uid)
        return _gone(answer, pod) or otherwise

    def give_up(self, cmd: EvictCommand, reason: str) -> None:
        """Nothing to tell the pod: EVICT_FAILED puts the task back in the cache."""


def _gone(answer: Answer, pod: dict[str, Any] | None) -> Result | None:
    """Success when the command's pod is gone (no pod, or another uid under its name)."""
    return Result.ok("pod already gone") if pod is None and answer.status in (200, 404) else None


def _evicted(answer: Answer, pod: dict[str, Any] | None) -> Result | None:
    """What an earlier eviction leaves: the pod gone or being deleted."""
    if pod is not None and (pod.get("metadata") or {}).get("deletionTimestamp"):
        return Result.ok("pod already being deleted")
    return _gone(answer, pod)

"""The bind action: POST a Binding for one admitted BIND.

Raw requests through ``strata.kubeapi.KubeApi``, not the generated ``create_namespaced_pod_binding``:
the API server answers a binding with a ``Status`` object while the client declares ``V1Binding``
and fails parsing it (``Invalid value for 'target'``) *after* the pod was bound (client issues
#547, #825), which would turn every success into an error.
"""

from __future__ import annotations

from typing import Any

from urllib3.exceptions import HTTPError

from strata.binder.actions import Result, classify, current_pod, guarded, judged_by_pod, patch_condition, pod_path
from strata.kubeapi import Answer, KubeApi
from strata.schemas import BindCommand


class BindAction:
    def __init__(self, api: KubeApi) -> None:
        self.api = api

    def run(self, command: BindCommand) -> Result:
        return guarded(lambda: self._bind(command), "bind")

    def _bind(self, cmd: BindCommand) -> Result:
        binding = {
            "apiVersion": "v1",
            "kind": "Binding",
            # the uid is a precondition: a pod deleted and recreated under the same name since
            # the BIND is another pod, and a stale command must not bind it
            "metadata": {"name": cmd.name, "namespace": cmd.namespace, "uid": cmd.pod_uid},
            "target": {"apiVersion": "v1", "kind": "Node", "name": cmd.node},
        }
        answer = self.api.call("POST", pod_path(cmd.namespace, cmd.name) + "/binding", binding, timeout=10.0)
        if answer.status in (200, 201):
            return Result.ok()
        if answer.status == 404:
            return Result.terminal(f"pod {cmd.namespace}/{cmd.name} is gone")
        if answer.status == 409:
            return self._conflict(cmd, answer.message)
        return classify(answer, "binding refused")

    def done_already(self, cmd: BindCommand) -> Result | None:
        return judged_by_pod(self.api, cmd, lambda answer, pod: _settled(cmd, answer, pod))

    def _conflict(self, cmd: BindCommand, message: str) -> Result:
        # 409 is "already assigned" or a failed uid precondition: look at the pod to tell.
        answer, pod = current_pod(self.api, cmd.namespace, cmd.name, cmd.pod_uid)
        settled = _settled(cmd, answer, pod)
        if settled is not None:
            return settled
        if pod is None:
            return classify(answer, "reading the pod after a conflict")
        return Result.transient(f"conflict: {message}")  # not bound, same uid: a race; try again

    def give_up(self, cmd: BindCommand, reason: str) -> None:
        """Tell the pod's owner why, as Volcano does: PodScheduled=False, reason Unschedulable.

        Only for a pod that still exists unbound (a pod bound elsewhere is scheduled after all)."""
        try:
            _, pod = current_pod(self.api, cmd.namespace, cmd.name, cmd.pod_uid)
            if pod is None or (pod.get("spec") or {}).get("nodeName"):
                return
            condition = {"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": reason}
            patch_condition(self.api, cmd.namespace, cmd.name, cmd.pod_uid, condition)
        except (OSError, HTTPError):
            pass  # best effort: the BIND_FAILED record is what counts


def _settled(cmd: BindCommand, answer: Answer, pod: dict[str, Any] | None) -> Result | None:
    """What the pod as read says of the command, if it settles it: gone, or bound (here or elsewhere)."""
    if pod is None:
        if answer.status in (200, 404):  # another uid under its name, or no pod at all
            return Result.terminal(f"pod {cmd.namespace}/{cmd.name} with uid {cmd.pod_uid} is gone")
        return None
    node = (pod.get("spec") or {}).get("nodeName")
    if node == cmd.node:
        # a command carried out before a crash and delivered again lands here: done already
        return Result.ok("already bound to this node")
    if node:
        return Result.terminal(f"pod is already assigned to node {node}")
    return None

"""What carrying out one command can come to, and how API answers are classified.

Three outcomes, because the worker routes on them: ``ok`` writes the success record; ``transient``
sends the command to the next retry tier (the same call may well work later: the API server is
overloaded, restarting, or a PodDisruptionBudget has no room yet); ``terminal`` sends it to the
dead-letter topic at once and writes the failure record (retrying cannot help: the pod is gone,
an admission policy refuses, the request is invalid).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Literal, Protocol

from urllib3.exceptions import HTTPError

from strata.kubeapi import Answer, KubeApi

Kind = Literal["ok", "transient", "terminal"]


@dataclass(frozen=True, slots=True)
class Result:
    kind: Kind
    reason: str = ""

    @staticmethod
    def ok(reason: str = "") -> Result:
        return Result("ok", reason)

    @staticmethod
    def transient(reason: str) -> Result:
        return Result("transient", reason)

    @staticmethod
    def terminal(reason: str) -> Result:
        return Result("terminal", reason)


class Action(Protocol):
    """Carries out one decoded command; never raises for an API or network failure."""

    def run(self, command: Any) -> Result: ...

    def done_already(self, command: Any) -> Result | None:
        """The result of a command that an earlier attempt may have carried out without writing its
        outcome (a worker killed or its transaction aborted after the API call), read from the pod
        alone; None when the command must be carried out. A read, never a write: a second Binding
        or Eviction that reaches the API server is a duplicate, even when it answers 409."""

    def give_up(self, command: Any, reason: str) -> None:
        """Called once a command goes to the dead-letter topic (best effort, may be repeated)."""


def is_transient_status(status: int) -> bool:
    # 429: rate limited or a PDB without room; 5xx: the server or a webhook it calls failed;
    # 408/504: timeouts. Every other 4xx says the request itself will never work.
    return status in (408, 429) or status >= 500


def classify(answer: Answer, what: str) -> Result:
    if answer.status < 300:
        return Result.ok()
    reason = f"{what}: {answer.status} {answer.message}".strip()
    return Result.transient(reason) if is_transient_status(answer.status) else Result.terminal(reason)


def guarded(call: Callable[[], Result], what: str) -> Result:
    """Network failures (refused, reset, timed out) are transient: the server may be back soon."""
    try:
        return call()
    except (HTTPError, OSError) as exc:
        return Result.transient(f"{what}: {type(exc).__name__}: {exc}"[:500])


def pod_path(namespace: str, name: str) -> str:
    return f"/api/v1/namespaces/{namespace}/pods/{name}"


def current_pod(api: KubeApi, namespace: str, name: str, uid: str) -> tuple[Answer, dict[str, Any] | None]:
    """The pod if it still is the one the command means (same uid), else None with the answer."""
    answer = api.call("GET", pod_path(namespace, name), timeout=10.0)
    body = answer.body
    if answer.status == 200 and isinstance(body, dict) and (body.get("metadata") or {}).get("uid") == uid:
        return answer, body
    return answer, None


def judged_by_pod(
    api: KubeApi, command: Any, judge: Callable[[Answer, dict[str, Any] | None], Result | None]
) -> Result | None:
    """``judge`` on the command's pod as read now (``current_pod``); None when the read fails on the
    network (the action itself will then meet the failure and be classified)."""
    try:
        answer, pod = current_pod(api, command.namespace, command.name, command.pod_uid)
    except (HTTPError, OSError):
        return None
    return judge(answer, pod)


def patch_condition(api: KubeApi, namespace: str, name: str, uid: str, condition: dict[str, str]) -> Answer:
    """Set one pod condition with a strategic-merge patch of pods/status, as Volcano does.

    Conditions merge by ``type``, so others are kept. The uid in the patch is a precondition: an
    object's uid is immutable, so a pod recreated under the same name refuses the patch (422).
    """
    now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    body = {
        "metadata": {"uid": uid},
        "status": {"conditions": [{**condition, "lastTransitionTime": now, "lastProbeTime": None}]},
    }
    return api.call(
        "PATCH",
        pod_path(namespace, name) + "/status",
        body,
        timeout=10.0,
        content_type="application/strategic-merge-patch+json",
    )

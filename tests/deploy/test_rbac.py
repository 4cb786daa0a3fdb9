"""Each component's RBAC manifest (deploy/rbac/) grants what it needs and nothing else, as the real
kube-apiserver's RBAC authorizer decides it (SubjectAccessReview for the ServiceAccount)."""

from __future__ import annotations

import pytest

from strata.kubeapi import KubeApi
from tests.binder.support import eventually
from tests.manifests import apply, load
from tests.paths import REPO

pytestmark = pytest.mark.kube
DEPLOY = REPO / "deploy" / "rbac"

# (verb, group, resource, subresource)
INGEST_NEEDS = [("list", "", "pods", ""), ("watch", "", "nodes", ""), ("watch", "scheduling.volcano.sh", "queues", "")]
SCHEDULER_NEEDS = [
    ("get", "scheduling.volcano.sh", "podgroups", ""),
    ("update", "scheduling.volcano.sh", "podgroups", ""),
    ("get", "scheduling.volcano.sh", "queues", "status"),
    ("update", "scheduling.volcano.sh", "queues", "status"),
    ("create", "", "events", ""),
]
BINDER_NEEDS = [("create", "", "pods", "binding"), ("patch", "", "pods", "status"), ("get", "", "pods", "")]
EVICTOR_NEEDS = [("create", "", "pods", "eviction"), ("get", "", "pods", "")]
EVICTOR_VOLCANO_NEEDS = [("get", "", "pods", ""), ("delete", "", "pods", ""), ("patch", "", "pods", "status")]
NEVER = [
    ("get", "", "secrets", ""),
    ("list", "", "secrets", ""),
    ("create", "", "pods", ""),
    ("update", "", "nodes", ""),
    ("delete", "scheduling.volcano.sh", "queues", ""),
    ("create", "rbac.authorization.k8s.io", "clusterrolebindings", ""),
]
COMPONENTS = {
    "ingest": (INGEST_NEEDS, [*BINDER_NEEDS, *EVICTOR_NEEDS, ("update", "scheduling.volcano.sh", "podgroups", "")]),
    "scheduler": (
        SCHEDULER_NEEDS,
        [*BINDER_NEEDS, *EVICTOR_NEEDS, ("list", "", "pods", ""), ("delete", "", "pods", "")],
    ),
    "binder": (BINDER_NEEDS, [EVICTOR_NEEDS[0], ("delete", "", "pods", ""), SCHEDULER_NEEDS[1]]),
    "evictor": (
        EVICTOR_NEEDS,
        [BINDER_NEEDS[0], SCHEDULER_NEEDS[1], ("update", "", "pods", ""), *EVICTOR_VOLCANO_NEEDS[1:]],
    ),
    "evictor-volcano": (
        EVICTOR_VOLCANO_NEEDS,
        [BINDER_NEEDS[0], EVICTOR_NEEDS[0], SCHEDULER_NEEDS[1], ("update", "", "pods", "")],
    ),
}


def allowed(api: KubeApi, user: str, verb: str, group: str, resource: str, subresource: str) -> bool:
    review = {
        "apiVersion": "authorization.k8s.io/v1",
        "kind": "SubjectAccessReview",
        "spec": {
            "user": user,
            "groups": ["system:serviceaccounts", "system:serviceaccounts:strata", "system:authenticated"],
            "resourceAttributes": {
                "namespace": "t-any",
                "verb": verb,
                "group": group,
                "resource": resource,
                "subresource": subresource,
            },
        },
    }
    return api.request("POST", "/apis/authorization.k8s.io/v1/subjectaccessreviews", review)["status"]["allowed"]


@pytest.mark.parametrize("component", sorted(COMPONENTS))
def test_each_component_gets_what_it_needs_and_nothing_else(kubeconfig: str, component: str):
    path = DEPLOY / f"{component}.yaml"
    if not path.exists():
        pytest.fail(f"{path} is missing")
    api = KubeApi(kubeconfig)
    apply(api, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "strata"}})
    docs = load(path)
    for doc in docs:
        apply(api, doc)
    (account,) = [d["metadata"]["name"] for d in docs if d["kind"] == "ServiceAccount"]
    user = f"system:serviceaccount:strata:{account}"
    needs, refused = COMPONENTS[component]

    def granted() -> None:
        assert [a for a in needs if not allowed(api, user, *a)] == [], "needed but refused"

    # The API server's authorizer learns a new role and binding from its own watch, a moment after
    # they are written (once seen here on the loaded machine): what is needed must be granted within
    # seconds; what is not must then be refused, the role and binding being known by then.
    eventually(granted, timeout_s=20.0)
    assert [a for a in [*refused, *NEVER] if allowed(api, user, *a)] == [], "granted but not needed"

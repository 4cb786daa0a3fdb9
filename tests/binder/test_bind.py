"""The bind path end to end: BIND records in the real broker, Bindings on the real kube-apiserver."""
# ruff: noqa: F811 - pytest fixtures imported from tests.binder.support are parameters here

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest

from strata.binder.service import Service
from strata.log.cachelog import CacheLogWriter
from strata.log.topics import TopicNames
from strata.schemas import Bind, BindCommand, BindFailed, BindSucceeded
from tests.binder.support import (  # noqa: F401 - fixtures
    DELAYS,
    Env,
    check,
    decoded,
    env,
    eventually,
    headers,
    ingest,
    quick_watches,
    read_topic,
    tasks_by_name,
)

pytestmark = [pytest.mark.kafka, pytest.mark.kube]


@pytest.fixture
def binder(env: Env) -> Iterator[Service]:
    service = Service(env.settings, "bind", workers=2, instance=f"t-{uuid.uuid4().hex[:6]}", threads=8)
    service.start()
    yield service
    service.close()
    assert not service.errors, service.errors


def _uid(pod: dict) -> str:
    return pod["metadata"]["uid"]


def _outcomes(env: Env) -> list:
    return env.log.records(BindSucceeded, BindFailed)


def _wait_pending(env: Env, names: set[str]) -> None:
    """Until the fold holds a Pending task for each pod (the watch adapters published them)."""
    eventually(lambda: check(names <= set(env.log.tasks(env.ns))))


def test_admitted_binds_are_carried_out_and_rejected_ones_are_not(env: Env, ingest, binder: Service):
    node = env.node("n1")
    pods = {name: env.pod(name) for name in ("a", "b", "c")}
    _wait_pending(env, set(pods))
    writer = CacheLogWriter(env.settings)
    writer.append(Bind(pod=_uid(pods["a"]), node=node, replica="r1", extensions={"k": "v"}))
    writer.append(Bind(pod=_uid(pods["b"]), node=node, replica="r2"))
    writer.append(Bind(pod=_uid(pods["c"]), node=f"{env.ns}-nowhere", replica="r1"))  # rejected: no such node
    writer.append(Bind(pod=_uid(pods["a"]), node=node, replica="r2"))  # rejected: a is Binding, not Pending
    writer.flush()

    def bound() -> None:
        now = env.pods()
        assert now["a"]["spec"].get("nodeName") == node and now["b"]["spec"].get("nodeName") == node
        tasks = env.log.tasks(env.ns)
        assert tasks["a"]["status"] == "Bound" and tasks["b"]["status"] == "Bound", tasks

    eventually(bound)
    outcomes = _outcomes(env)
    assert sorted((type(r).__name__, r.pod) for r in outcomes) == sorted(
        [("BindSucceeded", _uid(pods["a"])), ("BindSucceeded", _uid(pods["b"]))]
    )
    assert "nodeName" not in env.pods()["c"]["spec"]
    assert env.log.tasks(env.ns)["c"]["status"] == "Pending"
    commands = decoded(read_topic(env.settings, TopicNames(env.settings.topic_prefix).commands("bind")))
    assert sorted(c.name for c in commands) == ["a", "b"]
    a = next(c for c in commands if c.name == "a")
    assert isinstance(a, BindCommand) and a.replica == "r1" and dict(a.extensions) == {"k": "v"}
    assert a.command_id == f"bind@{a.log_offset}" and a.namespace == env.ns


def test_a_pod_gone_or_replaced_since_its_bind_is_dead_lettered(env: Env, ingest):
    node = env.node("n1")
    gone, replaced = env.pod("gone"), env.pod("replaced")
    _wait_pending(env, {"gone", "replaced"})
    writer = CacheLogWriter(env.settings)
    writer.append(Bind(pod=_uid(gone), node=node))
    writer.append(Bind(pod=_uid(replaced), node=node))
    writer.flush()
    # after the BINDs are in the log, before any binder runs: one pod deleted, one recreated
    env.api.request("DELETE", f"/api/v1/namespaces/{env.ns}/pods/gone", {"gracePeriodSeconds": 0})
    env.api.request("DELETE", f"/api/v1/namespaces/{env.ns}/pods/replaced", {"gracePeriodSeconds": 0})
    eventually(lambda: check(env.get_pod("replaced") is None))
    again = env.pod("replaced")
    service = Service(env.settings, "bind", workers=1, instance=f"t-{uuid.uuid4().hex[:6]}", threads=4)
    service.start()
    try:
        eventually(lambda: check(len(_outcomes(env)) == 2, _outcomes(env)))
    finally:
        service.close()
    assert not service.errors
    failed = {r.pod: r.reason for r in _outcomes(env) if isinstance(r, BindFailed)}
    assert set(failed) == {_uid(gone), _uid(replaced)}
    assert "gone" in failed[_uid(gone)]
    # the uid precondition: the new pod of the same name is not bound by the stale command
    assert "nodeName" not in env.get_pod("replaced")["spec"] and _uid(env.get_pod("replaced")) == _uid(again)
    dead = read_topic(env.settings, TopicNames(env.settings.topic_prefix).dead_letter("bind"))
    assert sorted(decoded(dead)[i].name for i in range(2)) == ["gone", "replaced"]
    assert {headers(m)["strata.reason"] for m in dead} == {"terminal"}
    assert {headers(m)["strata.attempt"] for m in dead} == {"1"}


def _policy(env: Env) -> None:
    """A ValidatingAdmissionPolicy that refuses to bind this namespace's pods named denied-*."""
    name = env.ns
    env.api.request(
        "POST",
        "/apis/admissionregistration.k8s.io/v1/validatingadmissionpolicies",
        {
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "ValidatingAdmissionPolicy",
            "metadata": {"name": name},
            "spec": {
                "failurePolicy": "Fail",
                "matchConstraints": {
                    "resourceRules": [
                        {
                            "apiGroups": [""],
                            "apiVersions": ["v1"],
                            "operations": ["CREATE"],
                            "resources": ["pods/binding"],
                        }
                    ]
                },
                "validations": [
                    {"expression": "!object.metadata.name.startsWith('denied-')", "message": "binding denied by policy"}
                ],
            },
        },
    )
    env.api.request(
        "POST",
        "/apis/admissionregistration.k8s.io/v1/validatingadmissionpolicybindings",
        {
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "ValidatingAdmissionPolicyBinding",
            "metadata": {"name": name},
            "spec": {
                "policyName": name,
                "validationActions": ["Deny"],
                "matchResources": {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": env.ns}}},
            },
        },
    )


def test_an_admission_policy_refusal_is_terminal(env: Env, ingest, binder: Service):
    node = env.node("n1")
    _policy(env)
    try:
        probe = env.pod("denied-probe")

        def policy_active() -> None:  # the server compiles a new policy within a moment
            answer = env.api.call(
                "POST",
                f"/api/v1/namespaces/{env.ns}/pods/denied-probe/binding",
                {"apiVersion": "v1", "kind": "Binding", "metadata": {"name": "denied-probe", "uid": _uid(probe)},
                 "target": {"apiVersion": "v1", "kind": "Node", "name": node}},
                dryRun="All",
            )  # fmt: skip
            assert answer.status in (403, 422), answer

        eventually(policy_active)
        denied, fine = env.pod("denied-x"), env.pod("fine")
        _wait_pending(env, {"denied-x", "fine"})
        writer = CacheLogWriter(env.settings)
        writer.append(Bind(pod=_uid(denied), node=node))
        writer.append(Bind(pod=_uid(fine), node=node))
        writer.flush()
        eventually(lambda: check(len(_outcomes(env)) == 2, _outcomes(env)))
        failed = [r for r in _outcomes(env) if isinstance(r, BindFailed)]
        assert [r.pod for r in failed] == [_uid(denied)] and "binding denied by policy" in (failed[0].reason or "")
        assert env.get_pod("fine")["spec"]["nodeName"] == node
        # the fold reverts the Binding overlay: the task is Pending again
        eventually(lambda: check(env.log.tasks(env.ns)["denied-x"]["status"] == "Pending"))
        conditions = {c["type"]: c for c in env.get_pod("denied-x")["status"].get("conditions", [])}
        scheduled = conditions["PodScheduled"]
        assert scheduled["status"] == "False" and scheduled["reason"] == "Unschedulable"
        assert "binding denied by policy" in scheduled["message"]
        dead = read_topic(env.settings, TopicNames(env.settings.topic_prefix).dead_letter("bind"))
        assert [c.name for c in decoded(dead)] == ["denied-x"]
    finally:
        env.api.call("DELETE", f"/apis/admissionregistration.k8s.io/v1/validatingadmissionpolicybindings/{env.ns}")
        env.api.call("DELETE", f"/apis/admissionregistration.k8s.io/v1/validatingadmissionpolicies/{env.ns}")


def _webhook(env: Env) -> str:
    """A webhook for pods/binding in this namespace whose server is not there: the API server answers 500."""
    body = {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingWebhookConfiguration",
        "metadata": {"name": env.ns},
        "webhooks": [
            {
                "name": f"{env.ns}.strata.test",
                "clientConfig": {"url": "https://127.0.0.1:9/validate"},  # the discard port: nobody listens
                "rules": [
                    {"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE"], "resources": ["pods/binding"]}
                ],
                "failurePolicy": "Fail",
                "sideEffects": "None",
                "admissionReviewVersions": ["v1"],
                "timeoutSeconds": 2,
                "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": env.ns}},
            }
        ],
    }
    env.api.request("POST", "/apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations", body)
    return f"/apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations/{env.ns}"


def test_a_failing_webhook_is_retried_through_the_tiers(env: Env, ingest, binder: Service):
    node = env.node("n1")
    names = TopicNames(env.settings.topic_prefix)
    source = names.commands("bind")
    path = _webhook(env)
    try:
        probe = env.pod("probe")
        eventually(
            lambda: check(
                env.api.call(
                    "POST",
                    f"/api/v1/namespaces/{env.ns}/pods/probe/binding",
                    {"apiVersion": "v1", "kind": "Binding", "metadata": {"name": "probe", "uid": _uid(probe)},
                     "target": {"apiVersion": "v1", "kind": "Node", "name": node}},
                    dryRun="All",
                ).status == 500
            )
        )  # fmt: skip
        # left in place: every tier fails, then the DLT and BIND_FAILED
        stuck = env.pod("stuck")
        _wait_pending(env, {"stuck"})
        writer = CacheLogWriter(env.settings)
        writer.append(Bind(pod=_uid(stuck), node=node))
        writer.flush()
        eventually(lambda: check(_outcomes(env), "no outcome"), timeout_s=40)
        assert [type(r).__name__ for r in _outcomes(env)] == ["BindFailed"]
        dead = read_topic(env.settings, names.dead_letter("bind"))
        assert len(dead) == 1
        h = headers(dead[0])
        assert h["strata.attempt"] == "3" and h["strata.reason"] == "exhausted"
        assert h["strata.original.topic"] == source and h["strata.original.partition"] == str(dead[0].partition())
        assert "500" in h["strata.error"]
        for delay in DELAYS:
            hops = read_topic(env.settings, names.retry("bind", delay))
            assert len(hops) == 1 and hops[0].partition() == dead[0].partition()
            assert headers(hops[0])["strata.attempt"] == str(DELAYS.index(delay) + 1)
            assert headers(hops[0])["strata.original.offset"] == h["strata.original.offset"]

        # a later pod: its first attempt fails; the webhook goes away; a retry tier binds it
        later = env.pod("later")
        _wait_pending(env, {"later"})
        writer.append(Bind(pod=_uid(later), node=node))
        writer.flush()
        eventually(lambda: check(read_topic(env.settings, names.retry("bind", DELAYS[0]))[1:], "not retried"))
    finally:
        env.api.call("DELETE", path)
    eventually(lambda: check(env.get_pod("later")["spec"].get("nodeName") == node), timeout_s=30)
    eventually(lambda: check(any(isinstance(r, BindSucceeded) for r in _outcomes(env))))
    assert sorted(type(r).__name__ for r in _outcomes(env)) == ["BindFailed", "BindSucceeded"]


def test_malformed_commands_are_dead_lettered_and_counted_by_strata_bind(env: Env, ingest):
    """Bytes that are no command, and a command of the wrong work, go to the DLT with their reason
    and are counted on `strata bind --metrics-port`; the good command behind them is carried out."""
    import socket
    import subprocess
    import sys
    import urllib.request
    from pathlib import Path

    from confluent_kafka import Producer

    from strata.dev.faults.common import env_for
    from strata.schemas import EvictCommand, encode

    names = TopicNames(env.settings.topic_prefix)
    node = env.node("n1")
    pod = env.pod("good")
    _wait_pending(env, {"good"})
    producer = Producer(env.settings.client_config())
    wrong = EvictCommand(command_id="evict@0", log_offset=0, pod_uid="u", namespace=env.ns, name="x")
    for value in (b"\x00\x01 not avro", encode(wrong)):
        producer.produce(names.commands("bind"), value, key=b"k", partition=0)
    producer.flush(10)
    writer = CacheLogWriter(env.settings)
    writer.append(Bind(pod=_uid(pod), node=node, replica="r1"))
    writer.flush()
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    strata = str(Path(sys.executable).with_name("strata"))
    argv = [strata, "bind", "--instance", f"t-{uuid.uuid4().hex[:6]}", "--http-port", str(port)]
    proc = subprocess.Popen(argv, env=env_for(env.settings), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        eventually(lambda: check(env.pods()["good"]["spec"].get("nodeName") == node), timeout_s=60)
        dead = eventually(lambda: _exactly(read_topic(env.settings, names.dead_letter("bind")), 2), timeout_s=60)
        reasons = sorted(headers(m)["strata.reason"] for m in dead)
        assert reasons == ["malformed", "malformed"]
        errors = sorted(headers(m)["strata.error"].split(":")[0] for m in dead)
        assert errors == ["not-a-command", "not-single-object"], errors
        assert all(headers(m)["strata.original.topic"] == names.commands("bind") for m in dead)

        def counted() -> str:
            text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
            assert f'strata_bad_commands_total{{topic="{names.commands("bind")}"}} 2.0' in text, text
            assert 'strata_command_outcomes_total{outcome="succeeded",work="bind"} 1.0' in text
            return text

        eventually(counted)
    finally:
        proc.terminate()
        _, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err


def _exactly(messages: list, n: int) -> list:
    assert len(messages) == n, messages
    return messages

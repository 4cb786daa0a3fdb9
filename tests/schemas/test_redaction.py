import copy

from strata.schemas import encode, objectjson
from strata.schemas.redaction import LAST_APPLIED, redact
from strata.schemas.trace import parse_line

SECRET = "hunter2-s3cr3t"


def pod():
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": "p",
            "namespace": "ns",
            "uid": "u",
            "annotations": {LAST_APPLIED: f'{{"env":"{SECRET}"}}', "keep": "me"},
            "managedFields": [{"manager": "kubectl", "fieldsV1": {"f:env": SECRET}}],
        },
        "spec": {
            "containers": [
                {
                    "name": "c",
                    "env": [
                        {"name": "TOKEN", "value": SECRET},
                        {"name": "PW", "valueFrom": {"secretKeyRef": {"name": "s", "key": "k"}}},
                    ],
                },
            ],
            "initContainers": [{"name": "i", "env": [{"name": "X", "value": SECRET}]}],
            "ephemeralContainers": [{"name": "e", "env": [{"name": "Y", "value": SECRET}]}],
        },
    }


def test_secret_values_are_dropped_and_references_kept():
    original = pod()
    before = copy.deepcopy(original)
    out = redact(original)
    assert original == before, "redaction must not change its input"
    assert SECRET not in repr(out)
    assert out["metadata"]["annotations"] == {"keep": "me"}
    assert "managedFields" not in out["metadata"]
    assert out["spec"]["containers"][0]["env"] == [
        {"name": "TOKEN"},
        {"name": "PW", "valueFrom": {"secretKeyRef": {"name": "s", "key": "k"}}},
    ]


def test_a_non_string_last_applied_keeps_the_record_bad_without_its_value():
    obj = pod()
    obj["metadata"]["annotations"][LAST_APPLIED] = {"env": SECRET}
    out = redact(obj)
    assert out["metadata"]["annotations"][LAST_APPLIED] is False
    assert SECRET not in repr(out["metadata"])


def test_odd_shapes_pass_untouched():
    for value in (
        None,
        3,
        "x",
        [],
        {"metadata": 5, "spec": []},
        {"spec": {"containers": [5, {"env": "x"}]}},
        {"metadata": {"annotations": [LAST_APPLIED]}},
        {"spec": {"containers": [{"env": [None, 1]}]}},
    ):
        assert redact(value) == value


def test_nothing_secret_reaches_the_encoded_record():
    line = objectjson.dumps({"type": "ADDED", "object": pod()})
    data = encode(parse_line(line, "trace/t:1"))
    assert SECRET.encode() not in data
    assert b"valueFrom" in data

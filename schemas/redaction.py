"""What must never reach the log: secret values that Kubernetes objects commonly carry.

* container ``env[*].value`` (``valueFrom`` stays: it names a Secret, it does not hold one);
* the ``kubectl.kubernetes.io/last-applied-configuration`` annotation (a copy of the whole
  manifest, env values included);
* ``metadata.managedFields`` (field-manager bookkeeping, large and useless to a scheduler).

Redaction copies what it changes and never raises on odd shapes: whether a shape is valid is
the fold's business.
"""

from __future__ import annotations

from typing import Any

LAST_APPLIED = "kubectl.kubernetes.io/last-applied-configuration"
CONTAINER_LISTS = ("containers", "initContainers", "ephemeralContainers")
# An annotation value of the wrong JSON type makes the record bad (cache-semantics.md, section 1).
# Dropping such a value would turn a bad record into a good one, so it becomes another non-string
# that carries nothing; a string value (the normal case) is dropped.
_NON_STRING_PLACEHOLDER = False


def redact(obj: Any) -> Any:
    """A copy of ``obj`` without secret values; ``obj`` itself is left as it was."""
    if not isinstance(obj, dict):
        return obj
    out = dict(obj)
    metadata = obj.get("metadata")
    if isinstance(metadata, dict):
        out["metadata"] = _redact_metadata(metadata)
    spec = obj.get("spec")
    if isinstance(spec, dict) and any(isinstance(spec.get(k), list) for k in CONTAINER_LISTS):
        out["spec"] = _redact_pod_spec(spec)
    return out


def _redact_metadata(metadata: dict[str, Any]) -> dict[str, Any]:
    if "managedFields" not in metadata and not _has_last_applied(metadata):
        return metadata
    meta = {k: v for k, v in metadata.items() if k != "managedFields"}
    annotations = metadata.get("annotations")
    if isinstance(annotations, dict) and LAST_APPLIED in annotations:
        value = annotations[LAST_APPLIED]
        kept = {k: v for k, v in annotations.items() if k != LAST_APPLIED}
        if value is not None and not isinstance(value, str):
            kept[LAST_APPLIED] = _NON_STRING_PLACEHOLDER
        meta["annotations"] = kept
    return meta


def _has_last_applied(metadata: dict[str, Any]) -> bool:
    annotations = metadata.get("annotations")
    return isinstance(annotations, dict) and LAST_APPLIED in annotations


def _redact_pod_spec(spec: dict[str, Any]) -> dict[str, Any]:
    out = dict(spec)
    for key in CONTAINER_LISTS:
        containers = spec.get(key)
        if isinstance(containers, list):
            out[key] = [_redact_container(c) for c in containers]
    return out


def _redact_container(container: Any) -> Any:
    if not isinstance(container, dict) or not isinstance(container.get("env"), list):
        return container
    env = [{k: v for k, v in e.items() if k != "value"} if isinstance(e, dict) else e for e in container["env"]]
    return {**container, "env": env}

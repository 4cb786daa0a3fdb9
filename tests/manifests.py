"""Apply the manifests Strata ships (deploy/) to the test cluster: ``strata.dev.stack.manifests``,
where the rbac fault scenario finds it too."""

from __future__ import annotations

from strata.dev.stack.manifests import RBAC, apply, load

__all__ = ["RBAC", "apply", "load"]

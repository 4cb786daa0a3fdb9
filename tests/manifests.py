"""Apply the manifests Strata ships (deploy/) to the test cluster: ``strata.devstack.manifests``,
where the rbac fault scenario finds it too."""

from __future__ import annotations

from strata.devstack.manifests import RBAC, apply, load

__all__ = ["RBAC", "apply", "load"]

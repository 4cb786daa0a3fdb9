"""A kubeconfig per component (its RBAC manifest applied, a token of its ServiceAccount):
``strata.dev.stack.manifests``, where the rbac fault scenario finds it too."""

from __future__ import annotations

from strata.dev.stack.manifests import COMPONENTS, DEPLOY, apply_component, component_kubeconfig

__all__ = ["COMPONENTS", "DEPLOY", "apply_component", "component_kubeconfig"]

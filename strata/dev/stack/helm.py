"""Helm for the chart in deploy/helm/strata: the client built from its Go module and cached by
version (``build.HELM``, like etcd and kube-apiserver), and the two calls the tests make of it,
``lint`` and ``template``."""

from __future__ import annotations

import subprocess
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import yaml

from strata.dev.stack.build import HELM, Log, ensure
from strata.errors import StrataError

# deploy/ is not in the wheel (it holds only strata/): the chart is read from a checkout
CHART = Path(__file__).resolve().parents[3] / "deploy" / "helm" / "strata"


def helm(log: Log = print) -> Path:
    """The helm binary, built first when the cache lacks it (about 1.5 min on 2 cores)."""
    return ensure(HELM, log)


def run(args: Sequence[str], log: Log = print, check: bool = True) -> subprocess.CompletedProcess[str]:
    result = subprocess.run([str(helm(log)), *args], capture_output=True, text=True, timeout=120)
    if check and result.returncode != 0:
        raise StrataError(f"helm {args[0]} failed: {result.stderr.strip() or result.stdout.strip()}")
    return result


def lint(values: Sequence[Path] = (), chart: Path = CHART) -> subprocess.CompletedProcess[str]:
    """``helm lint --strict``: warnings fail too. Not checked: the caller reads the verdict."""
    return run(["lint", "--strict", str(chart), *_values(values)], check=False)


def template(
    release: str,
    namespace: str,
    values: Sequence[Path] = (),
    set_values: Sequence[str] = (),
    chart: Path = CHART,
) -> list[dict[str, Any]]:
    """The objects ``helm template`` renders, hooks included, parsed."""
    args = ["template", release, str(chart), "--namespace", namespace, *_values(values)]
    for item in set_values:
        args += ["--set", item]
    return [doc for doc in yaml.safe_load_all(run(args).stdout) if doc]


def _values(values: Sequence[Path]) -> list[str]:
    return [arg for path in values for arg in ("--values", str(path))]

"""vc-scheduler, Volcano's own scheduler (``volcano.sh/volcano/cmd/scheduler`` at v1.10.0), built
from the Go module proxy and cached like etcd and kube-apiserver: the reference that
``bench/volcano_bench.py --scale`` runs beside ``strata-volcano`` on the same objects.

The wrapper module ``strata/dev/stack/go/vc-scheduler/`` requires ``volcano.sh/volcano v1.10.0``
with the replace directives of Volcano's own go.mod (its ``k8s.io/*`` staging modules at their
published ``v0.30.2``); its go.sum pins the rest, so a build never runs ``go mod tidy`` and is
independent of ``strata-volcano/``'s go.mod (which lacks some of ``cmd/scheduler``'s own imports,
``go.uber.org/automaxprocs`` among them). ``build.ensure`` does the build (``-mod=readonly
-trimpath``, ``CGO_ENABLED=0``, ``GOTOOLCHAIN`` as for the other binaries, one build at a time
under a lock) into ``$XDG_CACHE_HOME/strata/bin/vc-scheduler-v1.10.0``; ``-X`` sets the version
Volcano's Makefile sets, so ``vc-scheduler --version`` names it. ``VC_SCHEDULER_BIN`` names a
built one instead.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from strata.dev.stack import build
from strata.errors import StrataError

BINARY_ENV = "VC_SCHEDULER_BIN"


@dataclass(frozen=True)
class _VcScheduler(build.GoBinary):
    def ldflags(self) -> str:
        return f"-s -w -X volcano.sh/volcano/pkg/version.Version={self.version}"


VC_SCHEDULER = _VcScheduler("vc-scheduler", "volcano.sh/volcano/cmd/scheduler", "volcano.sh/volcano")


def ensure(log: build.Log = print) -> Path:
    """The path of vc-scheduler v1.10.0, built first when the cache lacks it (or the one
    ``VC_SCHEDULER_BIN`` names)."""
    given = os.environ.get(BINARY_ENV)
    if given:
        if not os.access(given, os.X_OK):
            raise StrataError(f"{BINARY_ENV}={given} is no executable file")
        return Path(given)
    return build.ensure(VC_SCHEDULER, log)

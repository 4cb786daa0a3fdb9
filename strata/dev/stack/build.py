"""etcd and kube-apiserver for the local stack, and helm for the chart's tests, built from Go
modules and cached by version.

Each binary has a small wrapper module in ``strata/dev/stack/go/<name>/`` (go.mod, go.sum and a
tools.go that imports the main package), committed so a build needs neither ``go mod tidy`` nor
a choice of versions: the go.mod pins them. ``go build`` runs in a copy of that module with
``CGO_ENABLED=0 -trimpath``; the binary lands in ``$XDG_CACHE_HOME/strata/bin/<name>-<version>``
(``~/.cache`` by default), outside the clone, so a fresh clone reuses it. A cold build of
kube-apiserver takes minutes (see docs/local-stack.md); later starts only look the file up.
"""

from __future__ import annotations

import fcntl
import os
import re
import shlex
import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from importlib.resources import files
from importlib.resources.abc import Traversable
from pathlib import Path

from strata.dev.stack.kafka import cache_root
from strata.errors import StrataError

Log = Callable[[str], None]
GO_MODULES = files("strata.dev.stack") / "go"
# where the official Go tarball installs itself, for a PATH that lacks it
GO_FALLBACK = Path("/usr/local/go/bin/go")
# The go.mod files say which Go they need (their go line); "auto" lets an older local Go fetch
# that toolchain through the module proxy instead of failing. An explicit GOTOOLCHAIN wins.
DEFAULT_GOTOOLCHAIN = "auto"
LOG_TAIL_LINES = 40


@dataclass(frozen=True)
class GoBinary:
    name: str  # the file name, and the wrapper module's directory under go/
    package: str  # the main package that `go build` compiles
    module: str  # the module whose version (a require of the wrapper's go.mod) names the binary

    @property
    def wrapper(self) -> Traversable:  # files() of an installed package need not be a Path
        return GO_MODULES / self.name

    @property
    def version(self) -> str:
        gomod = (self.wrapper / "go.mod").read_text()
        m = re.search(rf"^\s*(?:require\s+)?{re.escape(self.module)}\s+(v\S+)", gomod, re.M)
        assert m, f"go/{self.name}/go.mod does not require {self.module}"
        return m.group(1)

    @property
    def path(self) -> Path:
        return bin_dir() / f"{self.name}-{self.version}"

    @property
    def log_path(self) -> Path:
        return bin_dir() / f"{self.name}-{self.version}.build.log"

    def ldflags(self) -> str:
        flags = ["-s", "-w"]
        if self.name == "kube-apiserver":
            # what kubernetes' hack/lib/version.sh sets; without them the server says v0.0.0-master
            major, minor = self.version.lstrip("v").split(".")[:2]
            values = {
                "gitVersion": self.version,
                "gitMajor": major,
                "gitMinor": minor,
                "gitTreeState": "clean",
                "buildDate": "1970-01-01T00:00:00Z",
            }
            for pkg in ("k8s.io/component-base/version", "k8s.io/client-go/pkg/version"):
                flags += [f"-X {pkg}.{key}={value}" for key, value in values.items()]
        if self.name == "helm":
            flags += _helm_ldflags(self)
        return " ".join(flags)


ETCD = GoBinary("etcd", "go.etcd.io/etcd/server/v3", "go.etcd.io/etcd/server/v3")
KUBE_APISERVER = GoBinary("kube-apiserver", "k8s.io/kubernetes/cmd/kube-apiserver", "k8s.io/kubernetes")
HELM = GoBinary("helm", "helm.sh/helm/v3/cmd/helm", "helm.sh/helm/v3")


def _helm_ldflags(binary: GoBinary) -> list[str]:
    # what helm's Makefile sets: without them `helm version` says v3.NN and `helm template` assumes
    # Kubernetes 1.20 (.Capabilities.KubeVersion) instead of the client-go it was built with
    gomod = (binary.wrapper / "go.mod").read_text()
    m = re.search(r"^\s*k8s\.io/client-go\s+v0\.(\d+)\.", gomod, re.M)
    assert m, f"go/{binary.name}/go.mod does not require k8s.io/client-go"
    flags = [
        f"-X helm.sh/helm/v3/internal/version.{key}={value}"
        for key, value in (("version", binary.version), ("gitTreeState", "clean"))
    ]
    for pkg in ("helm.sh/helm/v3/pkg/lint/rules", "helm.sh/helm/v3/pkg/chartutil"):
        flags += [f"-X {pkg}.k8sVersionMajor=1", f"-X {pkg}.k8sVersionMinor={m.group(1)}"]
    return flags


def bin_dir() -> Path:
    return cache_root() / "bin"


def go() -> str:
    exe = shutil.which("go") or (str(GO_FALLBACK) if GO_FALLBACK.exists() else None)
    if exe is None:
        raise StrataError("Go (the go command) is needed once to build etcd, kube-apiserver and helm; install Go 1.26+")
    return exe


def built(binary: GoBinary) -> bool:
    return os.access(binary.path, os.X_OK)


def ensure(binary: GoBinary, log: Log = print) -> Path:
    """The path of ``binary``, built first when the cache lacks it."""
    if built(binary):
        return binary.path
    bin_dir().mkdir(parents=True, exist_ok=True)
    # one build at a time per binary: a second caller waits, then finds the file
    with open(bin_dir() / f".{binary.name}-{binary.version}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not built(binary):
            _build(binary, log)
    return binary.path


def _build(binary: GoBinary, log: Log) -> None:
    exe = go()
    log(f"building {binary.name} {binary.version} with Go into {binary.path} (minutes when Go's caches are cold)")
    started = time.monotonic()
    env = {
        **os.environ,
        "CGO_ENABLED": "0",
        "GOTOOLCHAIN": os.environ.get("GOTOOLCHAIN") or DEFAULT_GOTOOLCHAIN,
    }
    with tempfile.TemporaryDirectory(dir=bin_dir(), prefix=f".{binary.name}-") as tmp:
        work = Path(tmp) / "module"
        work.mkdir()
        for name in ("go.mod", "go.sum", "tools.go"):
            (work / name).write_text((binary.wrapper / name).read_text())
        out = Path(tmp) / binary.name
        # -mod=readonly: the committed go.mod and go.sum are the truth; go only downloads what they name
        argv = [
            exe,
            "build",
            "-mod=readonly",
            "-trimpath",
            "-ldflags",
            binary.ldflags(),
            "-o",
            str(out),
            binary.package,
        ]
        result = subprocess.run(argv, cwd=work, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        lines = result.stdout.strip().splitlines()
        binary.log_path.write_text("\n".join([shlex.join(argv), *lines[-LOG_TAIL_LINES:]]) + "\n")
        if result.returncode != 0 or not out.exists():
            # the last message line: hints are indented, package headers start with "#"
            messages = [line for line in lines if line.strip() and not line[0].isspace() and line[0] != "#"]
            last = messages[-1][:300] if messages else f"go build exited with {result.returncode}"
            raise StrataError(f"building {binary.name} {binary.version} failed: {last} (see {binary.log_path})")
        out.rename(binary.path)  # atomic: a binary in the cache is always a whole one
    log(f"built {binary.name} {binary.version} in {time.monotonic() - started:.0f} s")

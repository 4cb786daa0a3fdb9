"""strata-volcano, Strata's own Go program (Volcano's actions and plugins on the cache log), built
from this repository's ``strata-volcano/`` module and cached like etcd and kube-apiserver.

Third-party binaries are named by their version (``build.GoBinary``); this one has no release, so
the cache key is a hash of its sources: every ``.go`` file (tests aside), ``go.mod`` and
``go.sum``. ``go build -mod=readonly -trimpath`` runs in the module's own directory with
``CGO_ENABLED=0``; the binary lands in ``$XDG_CACHE_HOME/strata/bin/strata-volcano-<hash>``, so an
unchanged tree reuses it and an edited one builds anew. A cold build takes minutes (Volcano,
client-go and kube-scheduler's plugins); the Go build cache makes a rebuild after an edit quick.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import shlex
import subprocess
import tempfile
import time
from pathlib import Path

from strata.dev.stack.build import DEFAULT_GOTOOLCHAIN, LOG_TAIL_LINES, Log, bin_dir, go
from strata.errors import StrataError

NAME = "strata-volcano"
PACKAGE = "./cmd/strata-volcano"
# strata/dev/stack/volcano.py -> the repository's root, where strata-volcano/ sits beside strata/
SOURCE_DIR = Path(__file__).resolve().parents[3] / NAME
BINARY_ENV = "STRATA_VOLCANO_BIN"


def source_dir() -> Path:
    if not (SOURCE_DIR / "go.mod").is_file():
        raise StrataError(
            f"{NAME}'s sources are not beside this installation ({SOURCE_DIR}); "
            f"pass --binary or set {BINARY_ENV} to a built {NAME}"
        )
    return SOURCE_DIR


def _sources(src: Path) -> list[Path]:
    found = [src / "go.mod", src / "go.sum"]
    found += [p for p in src.rglob("*.go") if not p.name.endswith("_test.go")]
    return sorted(p for p in found if p.is_file())


def source_hash(src: Path | None = None) -> str:
    """A hash of what the binary is built from: each source's path and contents."""
    src = src or source_dir()
    digest = hashlib.sha256()
    for path in _sources(src):
        digest.update(path.relative_to(src).as_posix().encode() + b"\0")
        digest.update(path.read_bytes() + b"\0")
    return digest.hexdigest()[:16]


def binary_path(src: Path | None = None) -> Path:
    return bin_dir() / f"{NAME}-{source_hash(src)}"


def ensure(log: Log = print, src: Path | None = None) -> Path:
    """The path of the strata-volcano binary of these sources, built first when the cache lacks it
    (or the one ``STRATA_VOLCANO_BIN`` names)."""
    given = os.environ.get(BINARY_ENV)
    if given:
        if not os.access(given, os.X_OK):
            raise StrataError(f"{BINARY_ENV}={given} is no executable file")
        return Path(given)
    src = src or source_dir()
    path = binary_path(src)
    if os.access(path, os.X_OK):
        return path
    bin_dir().mkdir(parents=True, exist_ok=True)
    # one build at a time: a second caller waits, then finds the file
    with open(bin_dir() / f".{path.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not os.access(path, os.X_OK):
            _build(src, path, log)
    return path


def _build(src: Path, path: Path, log: Log) -> None:
    exe = go()
    log(f"building {NAME} from {src} into {path} (minutes when Go's caches are cold)")
    started = time.monotonic()
    env = {
        **os.environ,
        "CGO_ENABLED": "0",
        "GOTOOLCHAIN": os.environ.get("GOTOOLCHAIN") or DEFAULT_GOTOOLCHAIN,
        "GOFLAGS": "-buildvcs=false",
    }
    log_path = path.with_name(path.name + ".build.log")
    with tempfile.TemporaryDirectory(dir=bin_dir(), prefix=f".{NAME}-") as tmp:
        out = Path(tmp) / NAME
        # -mod=readonly: the committed go.mod and go.sum are the truth; go only downloads what they name
        argv = [exe, "build", "-mod=readonly", "-trimpath", "-ldflags", "-s -w", "-o", str(out), PACKAGE]
        result = subprocess.run(argv, cwd=src, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        lines = result.stdout.strip().splitlines()
        log_path.write_text("\n".join([shlex.join(argv), *lines[-LOG_TAIL_LINES:]]) + "\n")
        if result.returncode != 0 or not out.exists():
            messages = [line for line in lines if line.strip() and not line[0].isspace() and line[0] != "#"]
            last = messages[-1][:300] if messages else f"go build exited with {result.returncode}"
            raise StrataError(f"building {NAME} failed: {last} (see {log_path})")
        out.rename(path)  # atomic: a binary in the cache is always a whole one
    log(f"built {NAME} in {time.monotonic() - started:.0f} s")

"""Strata's container image, and the local images that stand in for pulled ones, built with podman.

No image registry is reachable here, and pip inside a build cannot reach the package index, so:

- **the base image** ``localhost/strata-base:bookworm`` is made locally: ``debootstrap
  --variant=minbase`` of Debian 12 with Python 3.11 from the machine's own Debian mirror, slimmed
  (no apt lists or caches, docs, man pages, translations), then ``podman import``. Its root file
  system is kept as a tarball under ``$XDG_CACHE_HOME/strata/image/`` (outside the clone, like the
  Go binaries of ``build.py``), so a fresh clone, or a podman store that lost the image, imports it
  in seconds instead of running debootstrap again;
- **the wheelhouse**: ``pip wheel`` of pyproject.toml's dependencies and build requirements, on the
  host, cached by their hash; the Dockerfile's build then runs with ``--network none``;
- **strata-volcano**: the Go binary the local stack builds and caches (``dev.stack.volcano``), given
  to the build as its own context, so the Dockerfile's Go stage (which needs a Go image) is skipped;
- **Kafka and PostgreSQL** for compose.yaml: ``localhost/strata-kafka:<version>`` from the Maven
  jars the local stack runs (``kafka.ensure_jars``) plus kafka-tools for the health check, and
  ``localhost/strata-postgres:15`` from Debian's package (``deploy/compose/``).

podman runs with ``deploy/compose/containers.conf`` (through ``CONTAINERS_CONF``), its ulimits
lowered to this process's hard limits when they are lower. Builds are serialized by a file lock,
and podman's layer cache makes a repeated build with unchanged inputs take seconds.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import re
import resource
import shutil
import subprocess
import sys
import tempfile
import time
import tomllib
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from strata.dev.stack.kafka import DEPENDENCY_PLUGIN, RESOURCES, cache_root, ensure_jars, kafka_version
from strata.errors import StrataError

Log = Callable[[str], None]
SUITE = "bookworm"  # Debian 12: Python 3.11, the version Strata's wheels are built for
BASE_TAG = f"localhost/strata-base:{SUITE}"
BASE_PACKAGES = ("python3", "python3-venv", "ca-certificates")
# what no container of these images reads; removing it takes the base from 275 MB to 133 MB
SLIMMED = ("var/cache/apt", "var/lib/apt/lists", "usr/share/doc", "usr/share/man", "usr/share/info", "usr/share/locale")
POSTGRES_TAG = "localhost/strata-postgres:15"
LOG_TAIL_LINES = 40
BUILD_TIMEOUT_S = 1800.0


def image_dir() -> Path:
    return cache_root() / "image"


def kafka_tag() -> str:
    return f"localhost/strata-kafka:{kafka_version()}"


def image_name(repo: Path) -> str:
    """``strata:<version of pyproject.toml>``: what compose.yaml and the Helm chart run."""
    return f"strata:{pyproject(repo)['project']['version']}"


def pyproject(repo: Path) -> dict[str, Any]:
    with (repo / "pyproject.toml").open("rb") as f:
        return tomllib.load(f)


# ----------------------------------------------------------------------------------- podman
def containers_conf(repo: Path) -> Path:
    """deploy/compose/containers.conf, its default ulimits lowered to this process's hard limits."""
    text = (repo / "deploy" / "compose" / "containers.conf").read_text()
    hard = {"nofile": resource.RLIMIT_NOFILE, "nproc": resource.RLIMIT_NPROC}

    def clamp(m: re.Match[str]) -> str:
        limit = resource.getrlimit(hard[m.group(1)])[1]
        value = int(m.group(2)) if limit == resource.RLIM_INFINITY else min(int(m.group(2)), limit)
        return f"{m.group(1)}={value}:{value}"

    rendered = re.sub(r"\b(nofile|nproc)=(\d+):\d+", clamp, text)
    path = image_dir() / "containers.conf"
    path.parent.mkdir(parents=True, exist_ok=True)
    if not path.exists() or path.read_text() != rendered:
        path.write_text(rendered)
    return path


def podman_env(repo: Path) -> dict[str, str]:
    return {**os.environ, "CONTAINERS_CONF": str(containers_conf(repo))}


def podman(repo: Path, *args: str, timeout: float = 300.0, check: bool = True) -> subprocess.CompletedProcess[str]:
    """``podman ARGS`` with the project's containers.conf; a failure is one line naming the command."""
    result = subprocess.run(
        ["podman", *args], env=podman_env(repo), capture_output=True, text=True, timeout=timeout, check=False
    )
    if check and result.returncode != 0:
        raise StrataError(f"podman {' '.join(args[:2])} failed: {last_line(result.stderr or result.stdout)}")
    return result


def image_exists(repo: Path, tag: str) -> bool:
    return podman(repo, "image", "exists", tag, check=False).returncode == 0


def image_size(repo: Path, tag: str) -> int:
    return int(podman(repo, "image", "inspect", "--format", "{{.Size}}", tag).stdout.strip())


def problem() -> str | None:
    """Why podman cannot build or run the images here, in one line; None when it can."""
    if shutil.which("podman") is None:
        return "podman is not installed (Debian: apt-get install podman runc)"
    try:
        info = subprocess.run(["podman", "info"], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"podman does not start: {exc}"
    if info.returncode != 0:
        return f"podman does not work here: {last_line(info.stderr)}"
    if (image_dir() / f"base-{SUITE}.tar").exists():
        return None
    if shutil.which("debootstrap") is None:
        return "debootstrap is not installed (Debian: apt-get install debootstrap); it makes the base image"
    if os.geteuid() != 0:
        return "the base image is made with debootstrap, which needs root"
    return None


def last_line(text: str) -> str:
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    return lines[-1][:300] if lines else "no output"


@contextmanager
def _build_lock() -> Iterator[None]:
    """One build at a time on this machine: a second test session waits, then finds the images."""
    image_dir().mkdir(parents=True, exist_ok=True)
    with open(image_dir() / ".build.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


# -------------------------------------------------------------------------------- the base
def debian_mirror() -> str:
    """The Debian mirror this machine's apt uses (STRATA_DEBIAN_MIRROR wins)."""
    if os.environ.get("STRATA_DEBIAN_MIRROR"):
        return os.environ["STRATA_DEBIAN_MIRROR"]
    for path in sorted(Path("/etc/apt").glob("sources.list.d/*.sources")):
        for stanza in path.read_text().split("\n\n"):
            fields = dict(re.findall(r"^(\w+):\s*(.+)$", stanza, re.M))
            if SUITE in fields.get("Suites", "").split() and fields.get("URIs"):
                return fields["URIs"].split()[0]
    sources = Path("/etc/apt/sources.list")
    text = sources.read_text() if sources.exists() else ""
    m = re.search(rf"^deb\s+(?:\[[^]]*\]\s+)?(\S+)\s+{SUITE}\s", text, re.M)
    if m:
        return m.group(1)
    raise StrataError(f"no Debian {SUITE} mirror in /etc/apt; name one with STRATA_DEBIAN_MIRROR")


def ensure_base(repo: Path, log: Log = print) -> str:
    """The local base image's tag, imported from the cached root file system, made first if need be."""
    with _build_lock():
        if image_exists(repo, BASE_TAG):
            return BASE_TAG
        tarball = image_dir() / f"base-{SUITE}.tar"
        if not tarball.exists():
            _debootstrap(tarball, log)
        podman(repo, "import", "--change", 'CMD ["/bin/sh"]', str(tarball), BASE_TAG)
        log(f"imported {BASE_TAG} from {tarball}")
    return BASE_TAG


def _debootstrap(tarball: Path, log: Log) -> None:
    mirror = debian_mirror()
    log(f"making the base image's root file system with debootstrap from {mirror} (a minute or two)")
    started = time.monotonic()
    build_log = tarball.with_suffix(".build.log")
    with tempfile.TemporaryDirectory(dir=tarball.parent, prefix=".base-") as tmp:
        rootfs = Path(tmp) / "rootfs"
        argv = ["debootstrap", "--variant=minbase", f"--include={','.join(BASE_PACKAGES)}", SUITE, str(rootfs), mirror]
        _run_logged(argv, build_log, "debootstrap")
        _slim(rootfs)
        partial = Path(tmp) / "rootfs.tar"
        tar = ["tar", "--numeric-owner", "-C", str(rootfs), "-cf", str(partial), "."]
        _run_logged(tar, build_log.with_suffix(".tar.log"), "tar")
        partial.rename(tarball)  # atomic: a tarball in the cache is always a whole one
    log(f"made {tarball} in {time.monotonic() - started:.0f} s")


def _slim(rootfs: Path) -> None:
    for path in SLIMMED:
        for child in (rootfs / path).glob("*"):
            shutil.rmtree(child) if child.is_dir() and not child.is_symlink() else child.unlink()
    # update-alternatives links a man page of each alternative, and fails without its folder
    for section in range(1, 9):
        (rootfs / "usr/share/man" / f"man{section}").mkdir(parents=True, exist_ok=True)


def _run_logged(argv: list[str], log_path: Path, what: str, env: dict[str, str] | None = None) -> None:
    """Run ``argv``; keep the last lines of its output in ``log_path``; a failure names that file."""
    result = subprocess.run(
        argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env, timeout=BUILD_TIMEOUT_S
    )
    lines = result.stdout.strip().splitlines()
    log_path.write_text("\n".join([" ".join(argv), *lines[-LOG_TAIL_LINES:]]) + "\n")
    if result.returncode != 0:
        raise StrataError(f"{what} failed: {last_line(result.stdout)} (see {log_path})")


# --------------------------------------------------------------------- Strata's own image
def requirements(repo: Path) -> list[str]:
    """What the image's build installs: the dependencies and the build backend of pyproject.toml."""
    meta = pyproject(repo)
    return sorted({*meta["project"]["dependencies"], *meta["build-system"]["requires"]})


def ensure_wheelhouse(repo: Path, log: Log = print) -> Path:
    """A folder of wheels for everything the image's build installs, made by ``pip wheel`` here."""
    if sys.version_info[:2] != (3, 11):
        raise StrataError("the wheelhouse is built with this Python, which must be the base image's 3.11")
    reqs = requirements(repo)
    key = hashlib.sha256("\n".join(reqs).encode()).hexdigest()[:12]
    wheelhouse = image_dir() / f"wheelhouse-{key}"
    with _build_lock():
        if (wheelhouse / ".complete").exists():
            return wheelhouse
        log(f"building the wheelhouse of {len(reqs)} requirements into {wheelhouse}")
        with tempfile.TemporaryDirectory(dir=image_dir(), prefix=".wheelhouse-") as tmp:
            out = Path(tmp) / "wheels"
            argv = [sys.executable, "-m", "pip", "wheel", "--quiet", "--wheel-dir", str(out), *reqs]
            _run_logged(argv, image_dir() / "wheelhouse.build.log", "pip wheel")
            (out / ".complete").write_text("\n".join(reqs) + "\n")
            out.rename(wheelhouse)
    return wheelhouse


def build_image(repo: Path, base: str, wheelhouse: Path, log: Log = print) -> str:
    """Build the repository's Dockerfile on ``base`` from ``wheelhouse`` and the cached
    strata-volcano binary, with no network; its tag."""
    tag = image_name(repo)
    volcano_dir = volcano_context(log)
    started = time.monotonic()
    with _build_lock():
        contexts = [f"wheelhouse={wheelhouse}", f"strata-volcano={volcano_dir}"]
        _podman_build(
            repo,
            ["--network", "none", *(option for c in contexts for option in ("--build-context", c))],
            {"BASE_IMAGE": base, "PIP_NO_INDEX": "1"},
            tag,
            repo / "Dockerfile",
            repo,
        )
    log(f"built {tag} on {base} in {time.monotonic() - started:.1f} s")
    return tag


def volcano_context(log: Log = print) -> Path:
    """A folder holding only ``strata-volcano``, the binary of this repository's sources (built
    when the cache lacks it): what the Dockerfile's stage of that name would have built."""
    from strata.dev.stack import volcano

    binary = volcano.ensure(log)
    folder = image_dir() / f"volcano-{binary.name}"
    with _build_lock():
        if not (folder / volcano.NAME).exists():
            tmp = Path(tempfile.mkdtemp(dir=image_dir(), prefix=".volcano-"))
            _link_or_copy(binary, tmp / volcano.NAME)
            tmp.chmod(0o755)
            tmp.rename(folder)  # atomic: the folder always holds the whole binary
    return folder


def _podman_build(
    repo: Path, options: list[str], args: dict[str, str], tag: str, dockerfile: Path, context: Path
) -> None:
    argv = ["podman", "build", *options, "--tag", tag, "--file", str(dockerfile)]
    for name, value in args.items():
        argv += ["--build-arg", f"{name}={value}"]
    name = tag.rsplit("/", 1)[-1].replace(":", "-")
    before = _image_id(repo, tag)
    _run_logged([*argv, str(context)], image_dir() / f"{name}.build.log", f"building {tag}", env=podman_env(repo))
    if before and before != _image_id(repo, tag):
        # the image this tag named before, and the layers only it used: each change of Strata's
        # code would otherwise leave a copy of the 200 MB venv behind
        podman(repo, "rmi", before, check=False)


def _image_id(repo: Path, tag: str) -> str | None:
    found = podman(repo, "image", "inspect", "--format", "{{.Id}}", tag, check=False)
    if found.returncode != 0:
        return None
    return found.stdout.strip() or None


# -------------------------------------------------------------- Kafka and PostgreSQL images
def kafka_tools_jar(log: Log = print) -> Path:
    """kafka-tools of the broker's version (BrokerApiVersionsCommand), fetched with Maven once."""
    version = kafka_version()
    jar = cache_root() / f"kafka-{version}" / "tools" / f"kafka-tools-{version}.jar"
    if jar.exists():
        return jar
    mvn = shutil.which("mvn")
    if mvn is None:
        raise StrataError("Maven (mvn) is needed once to fetch kafka-tools; install it (apt-get install maven)")
    log(f"fetching kafka-tools {version} with Maven")
    with tempfile.TemporaryDirectory() as tmp:
        argv = [
            mvn, "-B", "-q", f"{DEPENDENCY_PLUGIN}:copy",
            f"-Dartifact=org.apache.kafka:kafka-tools:{version}", f"-DoutputDirectory={tmp}",
        ]  # fmt: skip
        _run_logged(argv, image_dir() / "kafka-tools.fetch.log", "Maven (kafka-tools)")
        jar.parent.mkdir(parents=True, exist_ok=True)
        shutil.move(str(Path(tmp) / jar.name), jar)
    return jar


def ensure_kafka_image(repo: Path, base: str, log: Log = print) -> str:
    jars = [*sorted(ensure_jars(log).glob("*.jar")), kafka_tools_jar(log)]
    tag = kafka_tag()
    with _build_lock(), tempfile.TemporaryDirectory(dir=image_dir(), prefix=".kafka-context-") as tmp:
        context = Path(tmp)
        shutil.copytree(repo / "deploy" / "compose" / "kafka", context, dirs_exist_ok=True)
        (context / "log4j2.properties").write_text((RESOURCES / "log4j2.properties").read_text())
        (context / "libs").mkdir()
        for jar in jars:
            _link_or_copy(jar, context / "libs" / jar.name)
        _podman_build(repo, [], {"BASE_IMAGE": base}, tag, context / "Dockerfile", context)
    return tag


def _link_or_copy(source: Path, target: Path) -> None:
    try:
        os.link(source, target)  # the cache and the context share a file system: no 60 MB copy
    except OSError:
        shutil.copy2(source, target)


def ensure_postgres_image(repo: Path, base: str) -> str:
    context = repo / "deploy" / "compose" / "postgres"
    with _build_lock():
        _podman_build(repo, [], {"BASE_IMAGE": base}, POSTGRES_TAG, context / "Dockerfile", context)
    return POSTGRES_TAG

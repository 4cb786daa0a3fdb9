"""Strata's container image and compose.yaml, built and run with podman (docs/container.md).

A session fixture makes the local base image (debootstrap, cached under ~/.cache/strata/image),
the wheelhouse, and the image of the repository's Dockerfile with no network. The tests run the
CLI inside it, run it against the local stack's broker and PostgreSQL (host networking), and bring
compose.yaml up with podman-compose, Kafka and PostgreSQL swapped for images built here
(deploy/compose/local-images.yaml). Where podman cannot run, every test that needs it is skipped with the reason.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from strata.dev.stack import image
from strata.log.config import Settings
from strata.log.topics import drop_topics
from tests.cli.test_cli import run
from tests.conftest import TEST_PREFIX
from tests.paths import REPO, SAMPLE

TRACES = sorted((REPO / "tests" / "conformance").glob("c0*.jsonl"))
COMPOSE_FILES = ["-f", str(REPO / "compose.yaml"), "-f", str(REPO / "deploy" / "compose" / "local-images.yaml")]
HEALTHY_TIMEOUT_S = 300.0
MAX_IMAGE_BYTES = 450_000_000  # 397 MB measured (strata-volcano: 52 MB); kubernetes.aio would add 68 MB

PROBLEM = image.problem()
needs_podman = pytest.mark.skipif(PROBLEM is not None, reason=f"no containers here: {PROBLEM}")


def _log(message: str) -> None:
    print(message, file=sys.stderr)


@pytest.fixture(scope="session")
def base() -> str:
    tag = image.ensure_base(REPO, _log)
    probe = image.podman(REPO, "run", "--rm", "--network", "none", tag, "true", check=False)
    if probe.returncode != 0:
        pytest.skip(f"podman cannot run a container here: {image.last_line(probe.stderr)}")
    return tag


@pytest.fixture(scope="session")
def strata_image(base: str) -> str:
    return image.build_image(REPO, base, image.ensure_wheelhouse(REPO, _log), _log)


def in_image(
    tag: str, *args: str, options: tuple[str, ...] = ("--network", "none")
) -> subprocess.CompletedProcess[str]:
    return image.podman(REPO, "run", "--rm", *options, tag, *args, check=False, timeout=600)


def digest_here(trace: Path, *more: str) -> str:
    out = run("replay", "--digest", str(trace), *more)
    assert out.returncode == 0, out.stderr
    return out.stdout.strip()


# ------------------------------------------------------------------------------ the image
def test_the_dockerfile_copies_every_package():
    """Each top-level package folder (a symlink in strata/) is copied and let into the context."""
    linked = {path.name for path in (REPO / "strata").iterdir() if path.is_symlink()}
    copied = set(re.findall(r"^COPY (\S+) /src/\1$", (REPO / "Dockerfile").read_text(), re.M))
    admitted = {line[1:] for line in (REPO / ".dockerignore").read_text().splitlines() if line.startswith("!")}
    assert linked >= {"schemas", "ingest", "projector", "binder", "scheduler"}
    assert linked | {"strata"} <= copied <= admitted


@needs_podman
def test_the_image_runs_the_cli_as_user_10001_without_build_tools(strata_image: str):
    version = in_image(strata_image, "--version")
    assert version.returncode == 0, version.stderr
    assert version.stdout == run("--version").stdout
    help_ = in_image(strata_image, "schedule", "--help")
    assert help_.returncode == 0 and "--replica NAME" in help_.stdout, help_.stderr
    user = in_image(strata_image, "-c", "id -u; id -g", options=("--network", "none", "--entrypoint", "sh"))
    assert user.stdout.split() == ["10001", "10001"], user.stderr
    # as root, to see every folder: no pip, no compiler, nothing of the build stage (the base's own
    # /usr/share/python-wheels, ensurepip's, stays: it is the base image's)
    leftovers = "find /opt /root /tmp /var/lib/strata \\( -name '*.whl' -o -name pip -o -name 'pip-*' \\) -print -quit"
    probe = f'! python -m pip --version && ! command -v gcc cc make && test ! -e /src && test -z "$({leftovers})"'
    root = in_image(strata_image, "-c", probe, options=("--network", "none", "--entrypoint", "sh", "--user", "0"))
    assert root.returncode == 0, root.stdout + root.stderr
    # every package of Strata's, schedule's among them
    packages = "strata.scheduler.cache, strata.binder.service, strata.ingest.watch, strata.projector.checkpoints.sql"
    imported = in_image(
        strata_image, "-c", f"import {packages}", options=("--network", "none", "--entrypoint", "python")
    )
    assert imported.returncode == 0, imported.stderr


@needs_podman
def test_the_image_is_labelled_and_small(strata_image: str):
    (meta,) = json.loads(image.podman(REPO, "image", "inspect", strata_image).stdout)
    config = meta["Config"]
    version = image.pyproject(REPO)["project"]["version"]
    assert config["Labels"]["org.opencontainers.image.version"] == version
    assert config["Labels"]["org.opencontainers.image.title"] == "strata"
    assert config["Entrypoint"] == ["strata"] and config["User"] == "10001:10001"
    size = image.image_size(REPO, strata_image)
    _log(f"{strata_image}: {size / 1e6:.0f} MB")
    assert size < MAX_IMAGE_BYTES


@needs_podman
def test_replay_in_the_image_gives_the_hosts_digests(strata_image: str):
    loop = 'for f in "$@"; do strata replay --digest "$f" || exit 1; done'
    mounted = [f"/traces/{t.name}" for t in TRACES]
    options = ("--network", "none", "-v", f"{TRACES[0].parent}:/traces:ro", "--entrypoint", "sh")
    inside = in_image(strata_image, "-c", loop, "sh", *mounted, options=options)
    assert inside.returncode == 0, inside.stderr
    here = [digest_here(t) for t in TRACES]
    assert inside.stdout.split() == here
    # negative control: the comparison tells traces apart
    assert len(set(here)) == len(here)


# ------------------------------------------------------------- the image and the local stack
@pytest.fixture
def image_prefix(broker: Settings) -> Iterator[str]:
    prefix = f"{TEST_PREFIX}img-{uuid.uuid4().hex[:10]}."
    yield prefix
    drop_topics(broker.with_(topic_prefix=prefix))


@needs_podman
@pytest.mark.kafka
@pytest.mark.postgres
def test_the_image_ingests_projects_and_snapshots_against_the_local_stack(
    strata_image: str, broker: Settings, image_prefix: str, postgres_database: str
):
    options = (
        "--network", "host",
        "-e", f"STRATA_KAFKA_BOOTSTRAP={broker.bootstrap}",
        "-e", f"STRATA_TOPIC_PREFIX={image_prefix}",
        "-e", f"STRATA_DB_URL={postgres_database}",
        "-v", f"{SAMPLE.parent}:/records:ro",
    )  # fmt: skip
    for args in (["topics", "create"], ["ingest", "--from", f"/records/{SAMPLE.name}"], ["project", "--stop-at-end"]):
        out = in_image(strata_image, *args, options=options)
        assert out.returncode == 0, f"{args}: {out.stderr}"
    assert "stopped at version 27" in out.stderr
    snapshot = in_image(strata_image, "snapshot", "--digest", options=options)
    assert snapshot.returncode == 0, snapshot.stderr
    assert snapshot.stdout.strip() == digest_here(SAMPLE)
    # negative control: one record less is another snapshot
    assert snapshot.stdout.strip() != digest_here(SAMPLE, "--until", "26")


@needs_podman
@pytest.mark.kafka
@pytest.mark.kube
def test_the_image_watches_a_cluster_through_a_mounted_kubeconfig(
    strata_image: str, broker: Settings, image_prefix: str, kubeconfig: str, tmp_path: Path
):
    """The command of compose.yaml's `cluster` profile: `strata ingest` with a kubeconfig mounted
    read-only and readable by the image's user alone, against the local kube-apiserver."""
    port = _free_port()
    options = (
        "--network", "host",
        "-e", f"STRATA_KAFKA_BOOTSTRAP={broker.bootstrap}",
        "-e", f"STRATA_TOPIC_PREFIX={image_prefix}",
        "-e", "KUBECONFIG=/etc/strata/kubeconfig",
        "-v", f"{_readable_by_the_image(kubeconfig, tmp_path)}:/etc/strata/kubeconfig:ro",
    )  # fmt: skip
    assert in_image(strata_image, "topics", "create", options=options).returncode == 0
    name = f"strata-ingest-{uuid.uuid4().hex[:8]}"
    image.podman(REPO, "run", "-d", "--name", name, *options, strata_image, "ingest", "--http-port", str(port))
    try:
        _wait_ready(f"http://127.0.0.1:{port}/readyz", name)
    finally:
        image.podman(REPO, "rm", "-f", "-t", "5", name, check=False)
    summary = run(
        "log",
        "summary",
        "-o",
        "json",
        env={"STRATA_KAFKA_BOOTSTRAP": broker.bootstrap, "STRATA_TOPIC_PREFIX": image_prefix},
    )
    assert json.loads(summary.stdout)["by_type"]["SYNCED"] == 7, summary.stderr


@needs_podman
@pytest.mark.kafka
@pytest.mark.kube
def test_the_image_runs_volcano_replicas_with_its_own_binary(
    strata_image: str, broker: Settings, image_prefix: str, kubeconfig: str, tmp_path: Path
):
    """`strata volcano` in the image starts the strata-volcano binary the image carries (the
    image has no Go sources to build one from): on the sample's log, with the local
    kube-apiserver's kubeconfig for its status writes, the replica syncs, serves Volcano's own
    metrics, and stops clean."""
    options = (
        "--network", "host",
        "-e", f"STRATA_KAFKA_BOOTSTRAP={broker.bootstrap}",
        "-e", f"STRATA_TOPIC_PREFIX={image_prefix}",
        "-e", "KUBECONFIG=/etc/strata/kubeconfig",
        "-v", f"{_readable_by_the_image(kubeconfig, tmp_path)}:/etc/strata/kubeconfig:ro",
        "-v", f"{SAMPLE.parent}:/records:ro",
    )  # fmt: skip
    for args in (["topics", "create"], ["ingest", "--from", f"/records/{SAMPLE.name}"]):
        out = in_image(strata_image, *args, options=options)
        assert out.returncode == 0, f"{args}: {out.stderr}"
    found = in_image(
        strata_image,
        "-c",
        "command -v strata-volcano; echo $STRATA_VOLCANO_BIN",
        options=("--network", "none", "--entrypoint", "sh"),
    )
    assert found.stdout.split() == ["/opt/strata/bin/strata-volcano"] * 2, found.stderr
    port = _free_port()
    name = f"strata-volcano-{uuid.uuid4().hex[:8]}"
    replica = ("volcano", "--replica", "img-0", "--http-port", str(port), "--schedule-period", "200ms")
    image.podman(REPO, "run", "-d", "--name", name, *options, strata_image, *replica)
    try:
        _wait_ready(f"http://127.0.0.1:{port}/readyz", name)
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as answer:
            metrics = answer.read().decode()
        assert "volcano_e2e_scheduling_latency_milliseconds" in metrics  # Volcano's own
        stopped = image.podman(REPO, "stop", "-t", "30", name, check=False)
        assert stopped.returncode == 0, stopped.stderr
        waited = image.podman(REPO, "wait", name, check=False)
        logs = image.podman(REPO, "logs", name, check=False)
        assert waited.stdout.strip() == "0", logs.stdout + logs.stderr
    finally:
        image.podman(REPO, "rm", "-f", "-t", "5", name, check=False)
    # the replica built its cache from the sample's log: every record of it, SYNCED ones included
    assert re.search(r"img-0: synced at version 2[0-9] ", logs.stdout + logs.stderr), logs.stderr


def _readable_by_the_image(kubeconfig: str, tmp_path: Path) -> Path:
    """A copy of ``kubeconfig`` readable by the image's user alone (owner 10001, mode 0400)."""
    mounted = tmp_path / "kubeconfig"
    shutil.copyfile(kubeconfig, mounted)
    os.chown(mounted, 10001, 10001)
    mounted.chmod(0o400)
    return mounted


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _wait_ready(url: str, container: str, timeout_s: float = 90.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(url, timeout=2) as answer:
                if answer.status == 200:
                    return
        except OSError:
            pass
        time.sleep(0.5)
    logs = image.podman(REPO, "logs", "--tail", "20", container, check=False)
    raise AssertionError(f"{url} not ready after {timeout_s:.0f} s: {logs.stdout}{logs.stderr}")


# --------------------------------------------------------------------------- compose.yaml
def compose_file() -> dict:
    return yaml.safe_load((REPO / "compose.yaml").read_text())


def default_services() -> list[str]:
    """The services `up` starts without a profile (podman-compose 1.0.3 ignores profiles)."""
    return [name for name, spec in compose_file()["services"].items() if not spec.get("profiles")]


def checked_services() -> list[str]:
    return [name for name in default_services() if compose_file()["services"][name]["healthcheck"].get("test")]


def strata_health_command() -> str:
    return compose_file()["services"]["project"]["healthcheck"]["test"][1]


@pytest.fixture(scope="session")
def service_images(base: str) -> list[str]:
    return [image.ensure_kafka_image(REPO, base, _log), image.ensure_postgres_image(REPO, base)]


def podman_compose(project: str, *args: str, log: Path) -> subprocess.CompletedProcess[str]:
    argv = ["podman-compose", "-p", project, *COMPOSE_FILES, *args]
    result = subprocess.run(argv, cwd=REPO, env=image.podman_env(REPO), capture_output=True, text=True, timeout=600)
    with log.open("a") as f:
        f.write(f"$ {' '.join(argv)}\n{result.stdout}{result.stderr}\n")
    return result


def containers(project: str) -> dict[str, dict]:
    """The project's containers by service: State and ExitCode (podman ps --format json)."""
    out = image.podman(REPO, "ps", "-a", "--filter", f"label=io.podman.compose.project={project}", "--format", "json")
    return {c["Labels"]["com.docker.compose.service"]: c for c in json.loads(out.stdout or "[]")}


def wait_healthy(project: str, timeout_s: float = HEALTHY_TIMEOUT_S) -> float:
    """Seconds until every checked service passes its health check and both jobs have exited 0.
    The checks are run from here: podman schedules them with systemd timers, and no systemd runs."""
    started = time.monotonic()
    pending = set(checked_services())
    jobs = set(default_services()) - pending
    while time.monotonic() - started < timeout_s:
        pending = {s for s in pending if not _passes(containers(project).get(s))}
        states = containers(project)
        failed_jobs = {j for j in jobs if states[j]["State"] == "exited" and states[j]["ExitCode"] != 0}
        done_jobs = {j for j in jobs if states[j]["State"] == "exited" and states[j]["ExitCode"] == 0}
        if not pending and done_jobs == jobs:
            return time.monotonic() - started
        if failed_jobs and time.monotonic() - started > timeout_s / 2:
            break  # restart: on-failure brings a job back; still failing this late, it will not succeed
        time.sleep(2)
    names = ", ".join(sorted(pending | (jobs - done_jobs)))
    raise AssertionError(f"not healthy after {time.monotonic() - started:.0f} s: {names}")


def _passes(container: dict | None) -> bool:
    if container is None or container["State"] != "running":
        return False
    return image.podman(REPO, "healthcheck", "run", container["Names"][0], check=False).returncode == 0


def test_compose_names_this_version_and_overrides_only_kafka_and_postgres():
    spec = compose_file()
    strata_services = [name for name, s in spec["services"].items() if s["image"].startswith("strata:")]
    assert {spec["services"][name]["image"] for name in strata_services} == {image.image_name(REPO)}
    assert {"project", "bind", "evict", "topics", "records", "ingest"} <= set(strata_services)
    assert sum(1 for name in strata_services if spec["services"][name]["command"][0] == "schedule") == 2
    override = yaml.safe_load((REPO / "deploy" / "compose" / "local-images.yaml").read_text())
    assert override["services"] == {
        "kafka": {"image": image.kafka_tag()},
        "postgres": {"image": image.POSTGRES_TAG},
    }
    # the same releases: Kafka of the local stack's POM, PostgreSQL of Debian 12's major version
    assert spec["services"]["kafka"]["image"].split(":")[1] == image.kafka_tag().split(":")[1]
    assert spec["services"]["postgres"]["image"].split(":")[1] == image.POSTGRES_TAG.split(":")[1]


@needs_podman
def test_the_strata_health_check_fails_without_a_server(strata_image: str):
    name = f"strata-health-{uuid.uuid4().hex[:8]}"
    options = ["--network", "none", "--entrypoint", "sleep", "--health-cmd", strata_health_command()]
    image.podman(REPO, "run", "-d", "--name", name, *options, strata_image, "60")
    try:
        check = image.podman(REPO, "healthcheck", "run", name, check=False)
        assert check.returncode != 0 and "unhealthy" in check.stdout + check.stderr
    finally:
        image.podman(REPO, "rm", "-f", "-t", "0", name, check=False)


@needs_podman
@pytest.mark.skipif(shutil.which("podman-compose") is None, reason="podman-compose is not installed (Debian's package)")
def test_compose_runs_the_whole_service_and_down_leaves_nothing(
    strata_image: str, service_images: list[str], tmp_path: Path
):
    project = f"stratatest{uuid.uuid4().hex[:8]}"
    log = tmp_path / "compose.log"
    try:
        up = podman_compose(project, "up", "-d", *default_services(), log=log)
        assert up.returncode == 0, log.read_text()[-3000:]
        _log(f"compose: every service healthy after {wait_healthy(project):.0f} s")
        _assert_snapshot_is_the_replay_of_the_log(project, tmp_path)
    except BaseException:
        _dump_logs(project, log)
        raise
    finally:
        down = podman_compose(project, "down", "-v", log=log)
        # podman-compose 1.0.3 leaves the project's network behind
        image.podman(REPO, "network", "rm", f"{project}_default", check=False)
    assert down.returncode == 0, log.read_text()[-3000:]
    assert containers(project) == {}
    volumes = image.podman(REPO, "volume", "ls", "--filter", f"label=io.podman.compose.project={project}", "-q")
    assert volumes.stdout.strip() == ""


def _exec_reading_the_log(container: str, *argv: str) -> subprocess.CompletedProcess[str]:
    """``podman exec`` of a command that reads the log, asked again twice when the compose
    network answers "All broker connections are down" (seen once in CI on a loaded machine, the
    projector beside it healthy); any other failure, or a third one, fails the test."""
    for attempt in range(3):
        done = image.podman(REPO, "exec", container, *argv, check=False)
        if done.returncode == 0 or "broker connections are down" not in done.stderr or attempt == 2:
            break
        _log(f"compose: {argv[1]} met a broker that was away; asking again")
        time.sleep(5)
    assert done.returncode == 0, done.stderr[-2000:]
    return done


def _assert_snapshot_is_the_replay_of_the_log(project: str, tmp_path: Path) -> None:
    projector = containers(project)["project"]["Names"][0]
    dump = _exec_reading_the_log(projector, "strata", "log", "dump")
    records = tmp_path / "records.jsonl"
    records.write_text(dump.stdout)
    count = len(dump.stdout.splitlines())
    # the records job published the sample first; the binder may have appended outcomes since
    sample_records = len(SAMPLE.read_text().splitlines())
    assert digest_here(records, "--until", str(sample_records)) == digest_here(SAMPLE)
    at = _exec_reading_the_log(projector, "strata", "snapshot", "--digest", "--at-offset", str(count - 1))
    assert at.stdout.strip() == digest_here(records)
    assert at.stdout.strip() != digest_here(records, "--until", str(count - 1))  # negative control


def _dump_logs(project: str, log: Path) -> None:
    with log.open("a") as f:
        for service, container in sorted(containers(project).items()):
            logs = image.podman(REPO, "logs", "--tail", "15", container["Names"][0], check=False)
            f.write(f"--- {service} ({container['State']}, exit {container['ExitCode']})\n{logs.stdout}{logs.stderr}")
    _log(log.read_text()[-6000:])


def _containers(doc: dict) -> list[dict]:
    spec = doc.get("spec") or {}
    pod = (spec.get("template") or {}).get("spec") or spec.get("jobTemplate", {}).get("spec", {}).get(
        "template", {}
    ).get("spec", {})
    return [*(pod.get("initContainers") or []), *(pod.get("containers") or [])]


def test_every_command_line_the_chart_renders_exists_in_the_images_cli(strata_image: str):
    """The chart runs this image: its image name is the chart's default, and every container's
    command line, with --help appended, parses in the image's CLI (an unknown option or command
    fails before --help is reached)."""
    from strata.dev.stack import helm

    rendered = [*helm.template("rel", "strata")]
    for values in sorted((helm.CHART / "ci").glob("*-values.yaml")):
        rendered += helm.template("rel", "strata", [values])
    lines = {tuple([*c.get("command", []), *c.get("args", [])]) for d in rendered for c in _containers(d)}
    images = {c["image"] for d in rendered for c in _containers(d)}
    assert images == {strata_image.removeprefix("localhost/")}, (images, strata_image)
    assert len(lines) >= 7 and all(line[0] == "strata" for line in lines), lines
    assert {line[1] for line in lines} >= {"schedule", "volcano"}
    for line in sorted(lines):
        done = in_image(strata_image, *line[1:], "--help")
        assert done.returncode == 0 and "Usage: strata" in done.stdout, (line, done.stderr)
    wrong = in_image(strata_image, "project", "--no-such-option", "--help")
    assert wrong.returncode != 0 and "No such option" in wrong.stderr

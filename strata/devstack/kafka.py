"""A single-node Apache Kafka 4.x broker (KRaft, combined broker+controller) on 127.0.0.1.

No tarball and no Docker: Maven copies the broker's jars from Maven Central into a cache keyed
by the Kafka version (``$XDG_CACHE_HOME/strata/kafka-<version>/libs``), so a fresh clone reuses
them; storage is formatted with ``kafka.tools.StorageTool`` and ``kafka.Kafka`` runs on the JDK
with a small heap. Data, logs and the pid file live under the data directory.
"""

from __future__ import annotations

import base64
import os
import re
import shutil
import subprocess
import tempfile
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from importlib.resources import files
from pathlib import Path

from confluent_kafka.admin import AdminClient

from strata.devstack import process
from strata.errors import StrataError

Log = Callable[[str], None]
RESOURCES = files("strata.devstack")
POM = RESOURCES / "kafka-pom.xml"
DEPENDENCY_PLUGIN = "org.apache.maven.plugins:maven-dependency-plugin:3.8.1"
JVM_OPTS = [
    "-Xms256m",
    "-Xmx512m",
    # start-up and CPU savers for a 2-core machine: a test broker never needs C2 or G1
    "-XX:+UseSerialGC",
    "-XX:TieredStopAtLevel=1",
    "-Djava.awt.headless=true",
    "-Djava.net.preferIPv4Stack=true",
]


def kafka_version() -> str:
    m = re.search(r"<kafka.version>([^<]+)</kafka.version>", POM.read_text())
    assert m, "kafka-pom.xml names no kafka.version"
    return m.group(1)


def cache_root() -> Path:
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "strata"


def ensure_jars(log: Log = print) -> Path:
    """The directory of the broker's jars, fetched with Maven on first use."""
    libs = cache_root() / f"kafka-{kafka_version()}" / "libs"
    if (libs / ".complete").exists():
        return libs
    mvn = shutil.which("mvn")
    if mvn is None:
        raise StrataError("Maven (mvn) is needed once to fetch the Kafka jars; install it (apt-get install maven)")
    log(f"fetching Apache Kafka {kafka_version()} jars with Maven into {libs}")
    libs.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=libs.parent) as tmp:
        pom = Path(tmp) / "pom.xml"
        pom.write_text(POM.read_text())
        out = Path(tmp) / "libs"
        result = subprocess.run(
            [
                mvn,
                "-B",
                "-q",
                "-f",
                str(pom),
                f"{DEPENDENCY_PLUGIN}:copy-dependencies",
                "-DincludeScope=runtime",
                f"-DoutputDirectory={out}",
            ],
            capture_output=True,
            text=True,
        )
        if result.returncode != 0:
            tail = (result.stdout + result.stderr).strip().splitlines()[-1:] or ["no output"]
            raise StrataError(f"Maven could not fetch the Kafka jars: {tail[0]}")
        (out / ".complete").write_text(kafka_version())
        if libs.exists():
            shutil.rmtree(libs)
        out.rename(libs)
    return libs


def java() -> str:
    home = os.environ.get("JAVA_HOME")
    exe = str(Path(home) / "bin" / "java") if home else shutil.which("java")
    if not exe or not Path(exe).exists():
        raise StrataError("a Java 17+ runtime (java) is needed to run the Kafka broker")
    return exe


@dataclass(frozen=True)
class KafkaBroker:
    data_dir: Path
    port: int = 19092

    @property
    def controller_port(self) -> int:
        return self.port + 1

    @property
    def home(self) -> Path:
        return self.data_dir.resolve() / "kafka"

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def state_path(self) -> Path:
        return self.home / "broker.json"

    @property
    def log_path(self) -> Path:
        return self.home / "broker.log"

    def running(self) -> process.ProcessState | None:
        state = process.read_state(self.state_path)
        return state if process.alive(state) else None

    def ready(self) -> bool:
        if not process.port_open(self.port):
            return False
        try:
            # log_level 0: a refused connection while the broker starts is expected, not news
            AdminClient({"bootstrap.servers": self.bootstrap, "log_level": 0}).list_topics(timeout=2)
            return True
        except Exception:
            return False

    def up(self, log: Log = print, timeout_s: float = 90.0) -> str:
        """Start the broker, or reuse the running one; says which."""
        state = self.running()
        if state is not None:
            if state.port != self.port:
                raise StrataError(f"a broker of this data directory already runs on port {state.port}")
            process.wait_until(self.ready, "Kafka", timeout_s, state, self.log_path)
            return f"kafka {kafka_version()} already running (pid {state.pid}) at {self.bootstrap}"
        for port in (self.port, self.controller_port):
            if process.port_open(port):
                raise StrataError(f"port {port} is in use by another process; choose another with --kafka-port")
        libs = ensure_jars(log)
        self.home.mkdir(parents=True, exist_ok=True)
        (self.home / "log4j2.properties").write_text((RESOURCES / "log4j2.properties").read_text())
        (self.home / "server.properties").write_text(self._server_properties())
        classpath = f"{libs}/*"
        jvm = [
            java(),
            *JVM_OPTS,
            f"-Dlog4j2.configurationFile={self.home / 'log4j2.properties'}",
            f"-Dkafka.logs.dir={self.home / 'logs'}",
            "-cp",
            classpath,
        ]
        started = time.monotonic()
        if not (self.home / "data" / "meta.properties").exists():
            cluster_id = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=").replace("-", "A")
            result = subprocess.run(
                [
                    *jvm,
                    "kafka.tools.StorageTool",
                    "format",
                    "-t",
                    cluster_id,
                    "-c",
                    str(self.home / "server.properties"),
                    "--ignore-formatted",
                ],
                capture_output=True,
                text=True,
            )
            if result.returncode != 0:
                raise StrataError(f"formatting Kafka storage failed: {(result.stderr or result.stdout).strip()[-300:]}")
        state = process.start(
            [*jvm, "kafka.Kafka", str(self.home / "server.properties")],
            self.log_path,
            self.state_path,
            marker=str(self.home / "server.properties"),
            port=self.port,
            cwd=self.home,
        )
        process.wait_until(self.ready, "Kafka", timeout_s, state, self.log_path)
        took = time.monotonic() - started
        return f"kafka {kafka_version()} started in {took:.1f} s (pid {state.pid}) at {self.bootstrap}"

    def down(self) -> bool:
        return process.stop(self.state_path)

    def _server_properties(self) -> str:
        props = {
            "process.roles": "broker,controller",
            "node.id": "1",
            "controller.quorum.voters": f"1@127.0.0.1:{self.controller_port}",
            "listeners": f"PLAINTEXT://127.0.0.1:{self.port},CONTROLLER://127.0.0.1:{self.controller_port}",
            "advertised.listeners": f"PLAINTEXT://127.0.0.1:{self.port}",
            "inter.broker.listener.name": "PLAINTEXT",
            "controller.listener.names": "CONTROLLER",
            "listener.security.protocol.map": "CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT",
            "log.dirs": str(self.home / "data"),
            "num.partitions": "1",
            "default.replication.factor": "1",
            "offsets.topic.replication.factor": "1",
            "offsets.topic.num.partitions": "3",
            "transaction.state.log.replication.factor": "1",
            "transaction.state.log.min.isr": "1",
            "transaction.state.log.num.partitions": "3",
            "share.coordinator.state.topic.replication.factor": "1",
            "share.coordinator.state.topic.min.isr": "1",
            "group.initial.rebalance.delay.ms": "0",
            # a binder killed inside a transaction on the cache log holds back read_committed
            # readers until its transaction times out: abort such transactions promptly
            "transaction.abort.timed.out.transaction.cleanup.interval.ms": "1000",
            # Strata creates every topic itself with explicit settings; a typo must not create one.
            "auto.create.topics.enable": "false",
            "num.network.threads": "2",
            "num.io.threads": "2",
        }
        return "".join(f"{k}={v}\n" for k, v in props.items())

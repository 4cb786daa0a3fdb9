"""A single-node Apache Kafka 4.x broker (KRaft, combined broker+controller) on 127.0.0.1.

No tarball and no Docker: Maven copies the broker's jars from Maven Central into a cache keyed
by the Kafka version (``$XDG_CACHE_HOME/strata/kafka-<version>/libs``), so a fresh clone reuses
them; storage is formatted with ``kafka.tools.StorageTool`` and ``kafka.Kafka`` runs on the JDK
with a small heap. Data, logs and the pid file live under the data directory.

Besides the PLAINTEXT listener (``port``) the broker has a SASL_SSL listener ``SECURE`` on
``port + 2`` (SCRAM-SHA-512, user ``strata``): its CA, server certificate and PKCS12 keystore are
made once with the openssl command under ``<home>/pki``, beside the SCRAM password and the
keystore password (random, mode 0600). The credential is upserted with the Admin API through
the PLAINTEXT listener, so it also reaches storage that was formatted before the listener
existed. A running broker whose ``server.properties`` differs from the one ``up`` would write
is restarted once (its data stays), which is how an existing install gets a new listener.
"""

from __future__ import annotations

import base64
import os
import re
import secrets
import shutil
import subprocess
import tempfile
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from importlib.resources import files
from pathlib import Path

from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import (
    AdminClient,
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialUpsertion,
)

from strata.dev.stack import process
from strata.dev.stack.pki import LocalCA
from strata.errors import StrataError
from strata.log.config import kafka_properties_from_env

Log = Callable[[str], None]
RESOURCES = files("strata.dev.stack")
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
SECURE_LISTENER = "SECURE"
SCRAM_MECHANISM = "SCRAM-SHA-512"
SCRAM_USER = "strata"
SCRAM_ITERATIONS = 8192


def kafka_version() -> str:
    m = re.search(r"<kafka.version>([^<]+)</kafka.version>", POM.read_text())
    assert m, "kafka-pom.xml names no kafka.version"
    return m.group(1)


def cache_root() -> Path:
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "strata"


_LOG4J = RESOURCES / "log4j2.properties"


def jvm_command(home: Path, libs: Path) -> list[str]:
    """The JVM command line of a broker whose files live in ``home`` (logging settings, logs/)."""
    return [
        java(),
        *JVM_OPTS,
        f"-Dlog4j2.configurationFile={home / 'log4j2.properties'}",
        f"-Dkafka.logs.dir={home / 'logs'}",
        "-cp",
        f"{libs}/*",
    ]


def _configuration(version: str, jvm_opts: list[str], properties: str, log4j: str) -> str:
    # what it runs, not where this machine keeps java and the jars (a stable digest everywhere)
    return process.configuration_of([version, *jvm_opts], properties, log4j)


def new_cluster_id() -> str:
    """A KRaft cluster id: 16 random bytes, URL-safe base64 without padding (and no leading '-')."""
    return base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=").replace("-", "A")


def format_storage(jvm: list[str], properties: Path, cluster_id: str) -> None:
    """Format a broker's storage for ``cluster_id`` (once; an already formatted one is kept)."""
    argv = [*jvm, "kafka.tools.StorageTool", "format", "-t", cluster_id, "-c", str(properties), "--ignore-formatted"]
    result = subprocess.run(argv, capture_output=True, text=True)
    if result.returncode != 0:
        raise StrataError(f"formatting Kafka storage failed: {(result.stderr or result.stdout).strip()[-300:]}")


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


def _write_secret(path: Path, text: str) -> None:
    """Write ``text`` to a new file of mode 0600 (never readable by others, not even briefly)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(text)
    path.chmod(0o600)  # an existing file keeps its mode through O_CREAT


def java() -> str:
    home = os.environ.get("JAVA_HOME")
    exe = str(Path(home) / "bin" / "java") if home else shutil.which("java")
    if not exe or not Path(exe).exists():
        raise StrataError("a Java 17+ runtime (java) is needed to run the Kafka broker")
    return exe


@dataclass(frozen=True)
class KafkaBroker(process.LocalServer):
    HOME = "kafka"
    WHAT = "Kafka"
    UP_TIMEOUT_S = 90.0
    port: int = 19092

    @property
    def controller_port(self) -> int:
        return self.port + 1

    @property
    def secure_port(self) -> int:
        return self.port + 2

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def secure_bootstrap(self) -> str:
        return f"127.0.0.1:{self.secure_port}"

    @property
    def pki(self) -> Path:
        return self.home / "pki"

    @property
    def ca_path(self) -> Path:
        return self.pki / "ca.pem"

    @property
    def password_path(self) -> Path:
        """The SCRAM password of the user ``strata`` (mode 0600)."""
        return self.pki / "scram-password"

    @property
    def keystore_path(self) -> Path:
        return self.pki / "server.p12"

    @property
    def keystore_password_path(self) -> Path:
        return self.pki / "keystore-password"

    def secure_env(self) -> dict[str, str]:
        """Client settings for the SASL_SSL listener as Strata's environment variables, the password
        included (read from its 0600 file): secret, so never print or log the result."""
        return {
            "STRATA_KAFKA_BOOTSTRAP": self.secure_bootstrap,
            "STRATA_KAFKA_SECURITY_PROTOCOL": "SASL_SSL",
            "STRATA_KAFKA_SASL_MECHANISMS": SCRAM_MECHANISM,
            "STRATA_KAFKA_SASL_USERNAME": SCRAM_USER,
            "STRATA_KAFKA_SASL_PASSWORD": self.password_path.read_text().strip(),
            "STRATA_KAFKA_SSL_CA_LOCATION": str(self.ca_path),
        }

    def secure_client_config(self) -> dict[str, str]:
        """librdkafka properties for the SASL_SSL listener (secret: the password is in it)."""
        env = self.secure_env()
        return {"bootstrap.servers": env["STRATA_KAFKA_BOOTSTRAP"], **kafka_properties_from_env(env)}

    @property
    def state_path(self) -> Path:
        return self.home / "broker.json"

    @property
    def log_path(self) -> Path:
        return self.home / "broker.log"

    @property
    def signature(self) -> process.Signature:
        return process.Signature("java", str(self.home / "server.properties"), also=("kafka.Kafka",))

    @property
    def ports(self) -> tuple[int, ...]:
        return (self.port, self.controller_port, self.secure_port)

    def running_config(self, argv: list[str]) -> str:
        classpath = argv[argv.index("-cp") + 1] if "-cp" in argv[:-1] else ""
        version = re.search(r"kafka-([^/]+)/libs/\*$", classpath)
        try:
            files = (Path(argv[-1]).read_text(), (self.home / "log4j2.properties").read_text())
        except OSError:
            return ""
        # as _up computes it: JVM_OPTS come first on the command line (jvm_command)
        return _configuration(version.group(1) if version else "", argv[1 : 1 + len(JVM_OPTS)], *files)

    def ready(self) -> bool:
        if not process.port_open(self.port):
            return False
        try:
            # log_level 0: a refused connection while the broker starts is expected, not news
            AdminClient({"bootstrap.servers": self.bootstrap, "log_level": 0}).list_topics(timeout=2)
            return True
        except Exception:
            return False

    def _up(self, log: Log, timeout_s: float) -> str:
        """Start the broker, or reuse the running one; says which.

        A running broker whose configuration differs from what this version writes (a new
        listener, say) is restarted with the new one; its data stays."""
        self.home.mkdir(parents=True, exist_ok=True)
        self._ensure_pki(log)
        properties = self._server_properties()
        config = _configuration(kafka_version(), JVM_OPTS, properties, _LOG4J.read_text())
        restarted = ""
        state = self.running(log)
        if state is not None:
            if state.port != self.port:
                raise StrataError(f"a broker of this data directory already runs on port {state.port}")
            if state.config == config:
                process.wait_until(self.ready, "Kafka", timeout_s, state, self.log_path)
                self._ensure_scram(log)
                return f"kafka {kafka_version()} already running (pid {state.pid}) at {self.bootstrap}"
            log(f"Kafka's configuration changed ({self.home / 'server.properties'}): restarting the broker")
            self.down()
            restarted = " (restarted: configuration changed)"
        self.check_ports_free("; choose another with --kafka-port")
        (self.home / "log4j2.properties").write_text(_LOG4J.read_text())
        _write_secret(self.home / "server.properties", properties)  # it holds the keystore password
        jvm = jvm_command(self.home, ensure_jars(log))
        argv = [*jvm, "kafka.Kafka", str(self.home / "server.properties")]
        started = time.monotonic()
        if not (self.home / "data" / "meta.properties").exists():
            format_storage(jvm, self.home / "server.properties", new_cluster_id())
        state = process.start(
            argv,
            self.log_path,
            self.state_path,
            marker=self.signature.marker,
            port=self.port,
            cwd=self.home,
            config=config,
        )
        process.wait_until(self.ready, "Kafka", timeout_s, state, self.log_path)
        self._ensure_scram(log)
        took = time.monotonic() - started
        return f"kafka {kafka_version()} started in {took:.1f} s (pid {state.pid}) at {self.bootstrap}{restarted}"

    def _ensure_pki(self, log: Log) -> None:
        """The CA, the server's certificate and PKCS12 keystore, and the passwords, once."""
        pki = self.pki
        names = (self.ca_path, self.keystore_path, self.keystore_password_path, self.password_path)
        if all(path.exists() for path in names):
            return
        log(f"making a local CA, the SASL_SSL listener's keystore and the SCRAM password in {pki}")
        pki.mkdir(parents=True, exist_ok=True)
        pki.chmod(0o700)
        if not self.password_path.exists():
            _write_secret(self.password_path, secrets.token_urlsafe(24))
        _write_secret(self.keystore_password_path, secrets.token_urlsafe(24))
        ca = LocalCA(pki, "ca.pem", "/CN=strata-kafka-local-ca", "the local Kafka broker's certificates")
        ca.create()
        ca.sign("server", "/CN=strata-kafka", "serverAuth", "IP:127.0.0.1,DNS:localhost")
        # the password from its file: never on a command line
        ca.run(
            "pkcs12", "-export", "-in", "server.crt", "-inkey", "server.key", "-certfile", "ca.pem",
            "-name", "kafka", "-out", "server.p12.tmp", "-passout", f"file:{self.keystore_password_path.name}",
        )  # fmt: skip
        for path in pki.iterdir():
            if path.suffix in (".key", ".tmp"):
                path.chmod(0o600)
        (pki / "server.p12.tmp").rename(self.keystore_path)  # last: its presence means "all made"

    def _ensure_scram(self, log: Log, timeout_s: float = 30.0) -> None:
        """The SCRAM-SHA-512 credential of ``strata`` with the password of its file, set through
        the PLAINTEXT listener (the Admin API), then checked by logging in through SASL_SSL."""
        admin = AdminClient({"bootstrap.servers": self.bootstrap, "log_level": 0})
        if self._has_credential(admin) and self._can_log_in():
            return
        upsertion = UserScramCredentialUpsertion(
            SCRAM_USER,
            ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, SCRAM_ITERATIONS),
            self.password_path.read_text().strip().encode(),
        )
        try:
            for future in admin.alter_user_scram_credentials([upsertion], request_timeout=15).values():
                future.result()
        except KafkaException as e:
            raise StrataError(f"could not set the SCRAM credential of {SCRAM_USER!r}: {e.args[0].str()}") from None
        log(f"set the {SCRAM_MECHANISM} credential of {SCRAM_USER!r} for the SASL_SSL listener")
        deadline = time.monotonic() + timeout_s
        while not self._can_log_in():
            if time.monotonic() > deadline:
                raise StrataError(
                    f"the SASL_SSL listener at {self.secure_bootstrap} refuses {SCRAM_USER!r}; see {self.log_path}"
                )
            time.sleep(0.5)

    def _has_credential(self, admin: AdminClient) -> bool:
        try:
            futures = admin.describe_user_scram_credentials([SCRAM_USER], request_timeout=15)
            # one future per user named (a single future answers a request for all users)
            assert isinstance(futures, dict)
            (description,) = futures.values()
            infos = description.result().scram_credential_infos
        except KafkaException as e:
            if e.args[0].code() == KafkaError.RESOURCE_NOT_FOUND:
                return False
            raise StrataError(f"could not read the SCRAM credential of {SCRAM_USER!r}: {e.args[0].str()}") from None
        return any(info.mechanism == ScramMechanism.SCRAM_SHA_512 for info in infos)

    def _can_log_in(self) -> bool:
        admin = AdminClient({**self.secure_client_config(), "log_level": 0})
        try:
            admin.list_topics(timeout=3)
            return True
        except KafkaException as e:
            error = e.args[0]
            if isinstance(error, KafkaError) and error.code() not in (
                KafkaError._TRANSPORT,
                KafkaError._TIMED_OUT,
                KafkaError._AUTHENTICATION,
                KafkaError.SASL_AUTHENTICATION_FAILED,
            ):
                raise StrataError(f"the SASL_SSL listener at {self.secure_bootstrap}: {error.str()}") from None
            return False

    def _server_properties(self) -> str:
        secure = f"listener.name.{SECURE_LISTENER.lower()}"
        keystore_password = self.keystore_password_path.read_text().strip()
        props = {
            "process.roles": "broker,controller",
            "node.id": "1",
            "controller.quorum.voters": f"1@127.0.0.1:{self.controller_port}",
            "listeners": (
                f"PLAINTEXT://127.0.0.1:{self.port},CONTROLLER://127.0.0.1:{self.controller_port},"
                f"{SECURE_LISTENER}://127.0.0.1:{self.secure_port}"
            ),
            "advertised.listeners": f"PLAINTEXT://127.0.0.1:{self.port},{SECURE_LISTENER}://127.0.0.1:{self.secure_port}",
            "inter.broker.listener.name": "PLAINTEXT",
            "controller.listener.names": "CONTROLLER",
            "listener.security.protocol.map": f"CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT,{SECURE_LISTENER}:SASL_SSL",
            # the SECURE listener: SCRAM-SHA-512 over TLS; the credentials live in the metadata log
            "sasl.enabled.mechanisms": SCRAM_MECHANISM,
            f"{secure}.{SCRAM_MECHANISM.lower()}.sasl.jaas.config": (
                "org.apache.kafka.common.security.scram.ScramLoginModule required;"
            ),
            f"{secure}.ssl.keystore.type": "PKCS12",
            f"{secure}.ssl.keystore.location": str(self.keystore_path),
            f"{secure}.ssl.keystore.password": keystore_password,
            f"{secure}.ssl.key.password": keystore_password,
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

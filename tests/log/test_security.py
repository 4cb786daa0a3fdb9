"""The broker's SASL_SSL listener (SCRAM-SHA-512, a local CA): the pass-through of security settings
end to end, and no secret in files others can read, in `strata dev up`'s output or in logs."""

from __future__ import annotations

import os
import stat
import subprocess
from pathlib import Path

import pytest

from strata.dev.faults import FaultContext, scenario
from strata.dev.stack.kafka import KafkaBroker
from strata.log.config import Settings
from tests.cli.test_cli import STRATA, run


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_the_pki_and_the_passwords_are_made_once_and_private(tmp_path):
    broker = KafkaBroker(tmp_path, 29092)
    broker._ensure_pki(log=lambda _msg: None)
    assert _mode(broker.pki) == 0o700
    for secret in (broker.password_path, broker.keystore_password_path, broker.keystore_path, broker.pki / "ca.key"):
        assert _mode(secret) == 0o600, secret
    password = broker.password_path.read_text()
    assert len(password) >= 32 and password != broker.keystore_password_path.read_text()
    broker._ensure_pki(log=lambda _msg: pytest.fail("made again"))
    assert broker.password_path.read_text() == password
    properties = broker._server_properties()
    assert "listeners=PLAINTEXT://127.0.0.1:29092,CONTROLLER://127.0.0.1:29093,SECURE://127.0.0.1:29094\n" in properties
    assert "listener.security.protocol.map=CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT,SECURE:SASL_SSL\n" in properties
    assert "inter.broker.listener.name=PLAINTEXT\n" in properties
    assert "sasl.enabled.mechanisms=SCRAM-SHA-512\n" in properties
    assert password not in properties  # the SCRAM password lives in the metadata log, salted


def _local_broker(settings: Settings) -> KafkaBroker:
    return KafkaBroker(settings.data_dir, int(settings.bootstrap.rsplit(":", 1)[-1]))


@pytest.mark.kafka
def test_dev_up_prints_no_password_and_secure_exports_read_it_from_its_file(broker: Settings):
    local = _local_broker(broker)
    if not local.running():
        pytest.skip("the broker is not the local stack's")
    secrets = (local.password_path.read_text().strip(), local.keystore_password_path.read_text().strip())
    assert _mode(local.password_path) == 0o600 and _mode(local.home / "server.properties") == 0o600
    env = {"STRATA_DATA_DIR": str(broker.data_dir)}
    port = ("--kafka-port", str(local.port))
    plain = run("dev", "up", "--no-kube", *port, env=env)
    assert plain.returncode == 0, plain.stderr
    secure = run("dev", "up", "--no-kube", "--secure", *port, env=env)
    assert secure.returncode == 0, secure.stderr
    for out in (plain, secure):
        assert not any(s in out.stdout + out.stderr for s in secrets)
    assert f"export STRATA_KAFKA_BOOTSTRAP={local.bootstrap}" in plain.stdout.splitlines()
    assert "SASL" not in plain.stdout
    exports = secure.stdout.splitlines()
    assert f"export STRATA_KAFKA_BOOTSTRAP={local.secure_bootstrap}" in exports
    assert "export STRATA_KAFKA_SECURITY_PROTOCOL=SASL_SSL" in exports
    assert f"export STRATA_KAFKA_SSL_CA_LOCATION={local.ca_path}" in exports
    shell = subprocess.run(
        ["bash", "-c", f'eval "$({STRATA} dev up --no-kube --secure --kafka-port {local.port} 2>/dev/null)"; '
         'printf %s "$STRATA_KAFKA_SASL_USERNAME:$STRATA_KAFKA_SASL_PASSWORD"'],
        capture_output=True, text=True, env={**os.environ, **env}, timeout=60,
    )  # fmt: skip
    assert shell.stdout == f"strata:{secrets[0]}"


@pytest.mark.kafka
def test_the_sasl_ssl_scenario(broker: Settings, tmp_path):
    if not _local_broker(broker).running():
        pytest.skip("the broker is not the local stack's")
    result = scenario("kafka-sasl")(FaultContext(broker, tmp_path, quick=True, log=lambda _msg: None))
    assert result.ok, result.notes
    assert result.runs == 8 and result.digest_mismatches == 0

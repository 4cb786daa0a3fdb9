"""The local stack's lock and how it finds its own servers, on etcd (the cheapest server) in a data
directory and on ports of the test's own: the shared stack on the default ports is not touched.

Two `up` at once must leave one server with a right pid file; a server of this data directory that
lost its pid file is adopted; a stranger on the port, even an etcd of another data directory, is
reported, not adopted."""

from __future__ import annotations

import os
import random
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from strata.dev.stack import Stack, build, process
from strata.dev.stack.etcd import EtcdServer
from strata.dev.stack.kafka import JVM_OPTS, KafkaBroker, jvm_command
from strata.errors import StrataError

UP = "import sys; from pathlib import Path; from strata.dev.stack.etcd import EtcdServer; " \
    "print(EtcdServer(Path(sys.argv[1]), int(sys.argv[2])).up(log=lambda m: print(m, file=sys.stderr)))"  # fmt: skip


def free_port_pair() -> int:
    """A port p such that p and p + 1 are free (etcd's client and peer ports), below the kernel's
    ephemeral range, where another test's outgoing connection could take p + 1 in the meantime."""
    low, _ = map(int, Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split())
    for _ in range(100):
        port = random.randrange(20000, low - 1)
        if all(bindable(p) for p in (port, port + 1)):
            return port
    raise AssertionError("no two adjacent free ports")


def bindable(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


@pytest.fixture(scope="module")
def etcd_binary() -> Path:
    # `strata dev up` (--kube by default) has built it before the tests run; else it is built once
    return build.ensure(build.ETCD, log=lambda _m: None)


@pytest.fixture
def etcd(tmp_path: Path, etcd_binary: Path) -> Iterator[EtcdServer]:
    server = EtcdServer(tmp_path / "stack", free_port_pair())
    yield server
    server.down()
    for pid in process.find(server.signature):  # whatever a failed test left of this data directory
        os.kill(pid, signal.SIGKILL)


def up_in_a_process(server: EtcdServer) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-c", UP, str(server.data_dir), str(server.port)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def test_two_ups_at_once_start_one_server_and_both_succeed(etcd: EtcdServer):
    ups = [up_in_a_process(etcd) for _ in range(2)]
    outcomes = [up.communicate(timeout=60) for up in ups]
    assert [up.returncode for up in ups] == [0, 0], outcomes
    said = sorted(
        "started" if " started in " in out else "reused" if " already running " in out else out for out, _ in outcomes
    )
    assert said == ["reused", "started"], outcomes
    (pid,) = process.find(etcd.signature)
    state = process.read_state(etcd.state_path)
    assert state is not None and state.pid == pid and state.port == etcd.port
    assert etcd.ready()


def test_a_second_up_waits_for_the_lock(etcd: EtcdServer):
    with process.data_dir_lock(etcd.data_dir):
        waiting = up_in_a_process(etcd)
        time.sleep(2.0)
        # the check that can fail: without the lock it would have started etcd by now
        assert waiting.poll() is None and not process.find(etcd.signature)
    out, err = waiting.communicate(timeout=60)
    assert waiting.returncode == 0, err
    assert "waiting for another `strata dev up`" in err and " started in " in out


def test_a_server_without_its_pid_file_is_adopted_reported_and_stopped(etcd: EtcdServer):
    etcd.up(log=lambda _m: None)
    (pid,) = process.find(etcd.signature)
    etcd.state_path.unlink()
    said: list[str] = []
    assert "already running" in etcd.up(log=said.append)
    assert said == [f"etcd of this data directory runs as pid {pid} without its pid file: adopted it"]
    state = process.read_state(etcd.state_path)
    assert state is not None and (state.pid, state.port) == (pid, etcd.port)

    # a pid file naming another process (a start that failed after an `up` raced it) is no better
    process.write_state(etcd.state_path, process.ProcessState(os.getpid(), etcd.signature.marker, etcd.port))
    stack = Stack(etcd.data_dir, etcd_port=etcd.port)
    assert stack.status()["etcd"] == f"running (pid {pid}) at {etcd.url}"

    etcd.state_path.unlink()
    assert etcd.down() and not process.find(etcd.signature) and not etcd.state_path.exists()


def test_a_stranger_on_the_port_is_an_error_that_names_it(etcd: EtcdServer):
    with socket.socket() as stranger:
        stranger.bind(("127.0.0.1", etcd.port))
        stranger.listen()
        with pytest.raises(StrataError) as error:
            etcd.up(log=lambda _m: None)
    assert str(error.value).startswith(f"port {etcd.port} is in use by another process (pid {os.getpid()}: ")
    assert not process.find(etcd.signature)


def test_an_etcd_of_another_data_directory_is_not_adopted(etcd: EtcdServer, tmp_path: Path):
    other = EtcdServer(tmp_path / "other", etcd.port)
    other.up(log=lambda _m: None)
    try:
        with pytest.raises(StrataError, match=f"port {etcd.port} is in use by another process .*etcd"):
            etcd.up(log=lambda _m: None)
        assert etcd.running() is None and not etcd.state_path.exists()
    finally:
        other.down()


def test_the_signature_needs_the_program_and_a_whole_argument():
    signature = process.Signature("etcd", "/d/.strata/etcd/data")
    assert signature.matches(["/c/etcd-v3.6.16", "--data-dir=/d/.strata/etcd/data"])
    assert not signature.matches(["/c/etcd-v3.6.16", "--data-dir=/d/.strata/etcd/data2"])
    assert not signature.matches(["/usr/bin/etcdctl-x", "--endpoints=x"])
    assert not signature.matches(["/bin/cat", "/d/.strata/etcd/data"])
    kafka = process.Signature("java", "/d/kafka/server.properties", also=("kafka.Kafka",))
    # the storage formatter names the same file, and must not be taken for the broker
    assert not kafka.matches(["/j/bin/java", "kafka.tools.StorageTool", "format", "-c", "/d/kafka/server.properties"])


def test_an_adopted_broker_keeps_its_configuration(tmp_path: Path):
    """An adopted Kafka is not restarted: the digest read off its command line and files is the
    one `up` computes from what it would write (else every adoption would cost a restart)."""
    broker = KafkaBroker(tmp_path)
    broker.home.mkdir(parents=True)
    properties, log4j = "listeners=PLAINTEXT://127.0.0.1:1\n", "rootLogger.level=WARN\n"
    (broker.home / "server.properties").write_text(properties)
    (broker.home / "log4j2.properties").write_text(log4j)
    version = "4.1.1"
    argv = [*jvm_command(broker.home, tmp_path / f"kafka-{version}" / "libs"), "kafka.Kafka"]
    argv.append(str(broker.home / "server.properties"))
    wanted = process.configuration_of([version, *JVM_OPTS], properties, log4j)
    assert broker.running_config(argv) == wanted
    (broker.home / "server.properties").write_text(properties + "num.io.threads=3\n")
    assert broker.running_config(argv) != wanted  # changed since: `up` restarts it

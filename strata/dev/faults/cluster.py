"""A three-broker Kafka cluster on 127.0.0.1 for the broker-loss scenario (one JVM per broker).

Each broker is a KRaft combined broker and controller; together they form a controller quorum of
three, with replication factor 3 and min.insync.replicas 2 for every internal topic, as a small
production cluster would. Built from the same Maven jars as the local stack's single broker.
"""

from __future__ import annotations

import os
import signal
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from confluent_kafka.admin import AdminClient

from strata.dev.faults.common import until
from strata.dev.stack import process
from strata.dev.stack.kafka import RESOURCES, ensure_jars, format_storage, jvm_command, new_cluster_id
from strata.errors import StrataError

BASE_PORT = 29192  # brokers 29192..29194, controllers 29292..29294


@dataclass(frozen=True)
class ThreeBrokers:
    home: Path

    @property
    def bootstrap(self) -> str:
        return ",".join(f"127.0.0.1:{BASE_PORT + i}" for i in range(3))

    def _dir(self, i: int) -> Path:
        return self.home / f"broker-{i + 1}"

    def _props(self, i: int) -> str:
        voters = ",".join(f"{n + 1}@127.0.0.1:{BASE_PORT + 100 + n}" for n in range(3))
        props = {
            "process.roles": "broker,controller",
            "node.id": str(i + 1),
            "controller.quorum.voters": voters,
            "listeners": f"PLAINTEXT://127.0.0.1:{BASE_PORT + i},CONTROLLER://127.0.0.1:{BASE_PORT + 100 + i}",
            "advertised.listeners": f"PLAINTEXT://127.0.0.1:{BASE_PORT + i}",
            "inter.broker.listener.name": "PLAINTEXT",
            "controller.listener.names": "CONTROLLER",
            "listener.security.protocol.map": "CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT",
            "log.dirs": str(self._dir(i) / "data"),
            "default.replication.factor": "3",
            "min.insync.replicas": "2",
            "offsets.topic.replication.factor": "3",
            "offsets.topic.num.partitions": "3",
            "transaction.state.log.replication.factor": "3",
            "transaction.state.log.min.isr": "2",
            "transaction.state.log.num.partitions": "3",
            "share.coordinator.state.topic.replication.factor": "3",
            "share.coordinator.state.topic.min.isr": "2",
            "group.initial.rebalance.delay.ms": "0",
            "auto.create.topics.enable": "false",
            "unclean.leader.election.enable": "false",
            "num.network.threads": "2",
            "num.io.threads": "2",
        }
        return "".join(f"{k}={v}\n" for k, v in props.items())

    def _jvm(self, i: int) -> list[str]:
        return jvm_command(self._dir(i), ensure_jars(lambda _m: None))

    def format(self) -> None:
        cluster_id = new_cluster_id()
        for i in range(3):
            d = self._dir(i)
            d.mkdir(parents=True, exist_ok=True)
            (d / "log4j2.properties").write_text((RESOURCES / "log4j2.properties").read_text())
            (d / "server.properties").write_text(self._props(i))
            format_storage(self._jvm(i), d / "server.properties", cluster_id)

    def start(self, i: int) -> None:
        d = self._dir(i)
        process.start(
            [*self._jvm(i), "kafka.Kafka", str(d / "server.properties")],
            d / "broker.log",
            d / "broker.json",
            marker=str(d / "server.properties"),
            port=BASE_PORT + i,
            cwd=d,
        )

    def kill(self, i: int) -> None:
        """SIGKILL: no clean shutdown, as a machine that dies."""
        state = process.read_state(self._dir(i) / "broker.json")
        if state is not None and process.alive(state):
            os.kill(state.pid, signal.SIGKILL)

    def stop(self, i: int) -> None:
        process.stop(self._dir(i) / "broker.json")

    def wait_ready(self, timeout_s: float = 120.0) -> None:
        """Every broker answers and sees the other two."""

        def ready() -> bool:
            brokers = AdminClient({"bootstrap.servers": self.bootstrap, "log_level": 0}).list_topics(timeout=3).brokers
            return len(brokers) == 3 and all(process.port_open(BASE_PORT + i) for i in range(3))

        if not until(ready, timeout_s, every_s=0.5, tolerate=(Exception,)):  # an exception: not up yet
            raise StrataError(f"the three-broker cluster is not ready after {timeout_s:g} s")

    def stop_all(self) -> None:
        """SIGTERM to the three at once, as a whole cluster shut down: one after another, the last
        ones wait out their controlled shutdown without a quorum."""
        with ThreadPoolExecutor(3) as pool:
            list(pool.map(self.stop, range(3)))

    def down(self) -> None:
        self.stop_all()

"""Settings shared by every command: flags first, then environment variables, then defaults.

Kafka security settings pass through untouched: ``STRATA_KAFKA_SECURITY_PROTOCOL``,
``STRATA_KAFKA_SASL_*`` and ``STRATA_KAFKA_SSL_*`` become librdkafka's ``security.protocol``,
``sasl.*`` and ``ssl.*`` (``STRATA_KAFKA_SASL_MECHANISMS`` -> ``sasl.mechanisms``), and any
``-X key=value`` flag sets a librdkafka property directly, overriding the environment.
"""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from types import MappingProxyType
from typing import Any

from strata.errors import StrataError

DEFAULT_BOOTSTRAP = "127.0.0.1:19092"
DEFAULT_TOPIC_PREFIX = "strata."
DEFAULT_DATA_DIR = ".strata"
KAFKA_LOGGER = logging.getLogger("strata.kafka")
_PASS_THROUGH_ENV = re.compile(r"^STRATA_KAFKA_(SECURITY_PROTOCOL|SASL_[A-Z0-9_]+|SSL_[A-Z0-9_]+)$")
_TOPIC_PREFIX = re.compile(r"^[A-Za-z0-9._-]*$")

ClientConfig = dict[str, Any]
"""librdkafka properties: strings, numbers and booleans, and objects such as the logger."""


@dataclass(frozen=True)
class Settings:
    bootstrap: str = DEFAULT_BOOTSTRAP
    topic_prefix: str = DEFAULT_TOPIC_PREFIX
    data_dir: Path = Path(DEFAULT_DATA_DIR)
    db_url: str | None = None
    kubeconfig: str | None = None
    kafka: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))
    """librdkafka properties passed to every client (security settings and -X flags)."""
    replication_factor: int = 1
    min_insync_replicas: int = 1
    command_partitions: int = 6
    retry_delays_s: tuple[int, ...] = (1, 10, 60)
    digest_every: int = 50_000  # readers report their digest at every multiple of this version

    def __post_init__(self) -> None:
        if not _TOPIC_PREFIX.match(self.topic_prefix) or len(self.topic_prefix) > 200:
            raise StrataError(f"topic prefix {self.topic_prefix!r} may hold only letters, digits, '.', '_' and '-'")

    @property
    def checkpoint_url(self) -> str:
        """The checkpoint store: STRATA_DB_URL, else SQLite under the data directory."""
        return self.db_url or f"sqlite:///{(self.data_dir / 'strata.db').resolve()}"

    def client_config(self, **overrides: object) -> ClientConfig:
        """librdkafka configuration for any client of this deployment."""
        # librdkafka's own log lines go through Python logging (the CLI shows warnings on stderr)
        return {"bootstrap.servers": self.bootstrap, "logger": KAFKA_LOGGER, **self.kafka, **overrides}

    def with_(self, **changes: Any) -> Settings:
        return replace(self, **changes)


def kafka_properties_from_env(environ: Mapping[str, str]) -> dict[str, str]:
    props = {}
    for name, value in environ.items():
        if _PASS_THROUGH_ENV.match(name):
            props[name.removeprefix("STRATA_KAFKA_").lower().replace("_", ".")] = value
    return props


def parse_properties(pairs: tuple[str, ...] | list[str]) -> dict[str, str]:
    props = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            raise StrataError(f"-X takes key=value, got {pair!r}")
        props[key.strip()] = value
    return props


def settings_from(
    *,
    bootstrap: str | None = None,
    topic_prefix: str | None = None,
    data_dir: str | None = None,
    db_url: str | None = None,
    kubeconfig: str | None = None,
    kafka_properties: tuple[str, ...] = (),
    environ: Mapping[str, str] | None = None,
) -> Settings:
    """Settings from explicit values (flags) over ``environ`` (default: the process environment)."""
    env = os.environ if environ is None else environ
    kafka = kafka_properties_from_env(env) | parse_properties(kafka_properties)
    return Settings(
        bootstrap=bootstrap or env.get("STRATA_KAFKA_BOOTSTRAP") or DEFAULT_BOOTSTRAP,
        topic_prefix=topic_prefix if topic_prefix is not None else env.get("STRATA_TOPIC_PREFIX", DEFAULT_TOPIC_PREFIX),
        data_dir=Path(data_dir or env.get("STRATA_DATA_DIR") or DEFAULT_DATA_DIR),
        db_url=db_url or env.get("STRATA_DB_URL") or None,
        kubeconfig=kubeconfig or env.get("KUBECONFIG") or None,
        kafka=MappingProxyType(kafka),
        replication_factor=_positive_int(env, "STRATA_REPLICATION_FACTOR", 1),
        min_insync_replicas=_positive_int(env, "STRATA_MIN_INSYNC_REPLICAS", 1),
        command_partitions=_positive_int(env, "STRATA_COMMAND_PARTITIONS", 6),
        retry_delays_s=_delays(env, "STRATA_RETRY_DELAYS", (1, 10, 60)),
        digest_every=_positive_int(env, "STRATA_DIGEST_EVERY", 50_000),
    )


def _delays(env: Mapping[str, str], name: str, default: tuple[int, ...]) -> tuple[int, ...]:
    """Fixed retry delays in seconds, one retry topic each: "1,10,60"."""
    text = env.get(name)
    if not text:
        return default
    try:
        delays = tuple(int(part) for part in text.split(","))
    except ValueError:
        delays = ()
    if not delays or any(d < 1 for d in delays) or len(set(delays)) != len(delays):
        raise StrataError(f"{name} must list distinct positive seconds like 1,10,60, got {text!r}")
    return delays


def _positive_int(env: Mapping[str, str], name: str, default: int) -> int:
    text = env.get(name)
    if not text:
        return default
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise StrataError(f"{name} must be a positive integer, got {text!r}")
    return value

"""A Prometheus server on 127.0.0.1 that scrapes the processes of the local stack every second.

Debian's ``prometheus`` package (``scripts/bootstrap.sh`` installs it; the package's own service
stays off), our own configuration, storage and port. What it scrapes is discovered from files:
each ``<data dir>/prometheus/targets/<name>.json`` is one target group, written by
``register_target`` for a process that serves ``/metrics`` and removed by ``unregister_target``;
Prometheus notices a change within a second, without a restart. ``query`` runs PromQL.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from strata.dev.stack import process
from strata.errors import StrataError

Log = Callable[[str], None]
HOME = "prometheus"
# a test store: a day of one-second samples of a few processes is a few MB; the size cap is a backstop
RETENTION = ("--storage.tsdb.retention.time=1d", "--storage.tsdb.retention.size=256MB")
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*")


def targets_dir(data_dir: Path) -> Path:
    """Where the stack's Prometheus looks for target files (``*.json``)."""
    return Path(data_dir).resolve() / HOME / "targets"


def register_target(
    data_dir: Path, name: str, port: int, labels: Mapping[str, str] | None = None, host: str = "127.0.0.1"
) -> Path:
    """Have the stack's Prometheus scrape ``http://host:port/metrics`` as ``job=name`` (unless
    ``labels`` names another job), with ``labels`` on every series; returns the target file.

    Registering ``name`` again replaces its target. Prometheus picks the file up within a second."""
    if not _NAME.fullmatch(name):
        raise ValueError(f"a target name is letters, digits, '_', '.' and '-': {name!r}")
    group = [{"targets": [f"{host}:{port}"], "labels": {"job": name, **(labels or {})}}]
    directory = targets_dir(data_dir)
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"{name}.json"
    # renamed into place: Prometheus must never read half a file (the temporary name is not *.json)
    tmp = directory / f".{name}.{os.getpid()}.tmp"
    tmp.write_text(json.dumps(group, indent=1))
    tmp.rename(path)
    return path


def unregister_target(data_dir: Path, name: str) -> bool:
    """Stop scraping ``name``; True when it was registered. Its series go stale (vanish from
    instant queries) at the next file refresh."""
    path = targets_dir(data_dir) / f"{name}.json"
    existed = path.exists()
    path.unlink(missing_ok=True)
    return existed


def query(url: str, promql: str, timeout_s: float = 10.0) -> list[dict[str, Any]]:
    """The result of an instant PromQL query (``/api/v1/query``): for a vector, one
    ``{"metric": {labels}, "value": [time, "text"]}`` per series; an empty list when none matches."""
    address = f"{url.rstrip('/')}/api/v1/query?{urllib.parse.urlencode({'query': promql})}"
    try:
        with urllib.request.urlopen(address, timeout=timeout_s) as resp:
            answer = json.load(resp)
    except urllib.error.HTTPError as e:  # a bad query is a 400 with Prometheus' reason in the body
        answer = _json_or_none(e.read()) or {"error": f"HTTP {e.code}"}
    except (OSError, ValueError) as e:
        raise StrataError(f"Prometheus at {url} did not answer {promql!r}: {e}") from None
    if answer.get("status") != "success":
        raise StrataError(f"Prometheus rejected {promql!r}: {answer.get('error', answer)}")
    data = answer["data"]
    if data["resultType"] in ("scalar", "string"):  # one [time, "text"]: a row as a series has it
        return [{"metric": {}, "value": data["result"]}]
    return list(data["result"])


def _json_or_none(body: bytes) -> dict[str, Any] | None:
    try:
        parsed = json.loads(body)
    except ValueError:
        return None
    return parsed if isinstance(parsed, dict) else None


def ready(url: str) -> bool:
    try:
        with urllib.request.urlopen(f"{url}/-/ready", timeout=2) as resp:
            return bool(resp.status == 200)
    except (OSError, urllib.error.URLError):
        return False


def executable() -> str | None:
    return shutil.which("prometheus")


@dataclass(frozen=True)
class PrometheusServer(process.LocalServer):
    HOME = HOME
    WHAT = "Prometheus"
    port: int = 19090

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def storage(self) -> Path:
        return self.home / "data"

    @property
    def config_path(self) -> Path:
        return self.home / "prometheus.yml"

    @property
    def signature(self) -> process.Signature:
        return process.Signature("prometheus", str(self.storage))

    def installed(self) -> bool:
        return executable() is not None

    def ready(self) -> bool:
        return process.port_open(self.port) and ready(self.url)

    def scrape_config(self) -> str:
        config = {
            "global": {"scrape_interval": "1s", "scrape_timeout": "1s", "evaluation_interval": "1s"},
            "scrape_configs": [
                {
                    # the default job of a target group that names none (register_target always does)
                    "job_name": "strata",
                    "file_sd_configs": [
                        {"files": [str(targets_dir(self.data_dir) / "*.json")], "refresh_interval": "1s"}
                    ],
                }
            ],
        }
        return yaml.safe_dump(config, sort_keys=False)

    def _flags(self) -> list[str]:
        return [
            f"--config.file={self.config_path}",
            f"--storage.tsdb.path={self.storage}",
            *RETENTION,
            f"--web.listen-address=127.0.0.1:{self.port}",
            "--log.level=warn",
        ]

    def running_config(self, argv: list[str]) -> str:
        try:
            return process.configuration_of(argv[1:], self.config_path.read_text())
        except OSError:
            return ""

    def _up(self, log: Log, timeout_s: float) -> str:
        """Start Prometheus, or reuse the running one (restarted when its flags or scrape
        configuration differ from this version's); says which."""
        config = process.configuration_of(self._flags(), self.scrape_config())
        state = self.running(log)
        if state is not None and state.config == config:
            process.wait_until(self.ready, "Prometheus", timeout_s, state, self.log_path)
            return f"prometheus already running (pid {state.pid}) at {self.url}"
        if state is not None:
            log(f"Prometheus (pid {state.pid}) runs with another configuration than this version's: restarting it")
            self.down()
        exe = executable()
        if exe is None:
            raise StrataError("Prometheus is not installed; install the Debian package prometheus")
        self.check_ports_free()
        return self._start(exe, config, timeout_s)

    def _start(self, exe: str, config: str, timeout_s: float) -> str:
        targets_dir(self.data_dir).mkdir(parents=True, exist_ok=True)
        self.config_path.write_text(self.scrape_config())
        started = time.monotonic()
        state = process.start(
            [exe, *self._flags()],
            self.log_path,
            self.state_path,
            marker=self.signature.marker,
            port=self.port,
            cwd=self.home,
            config=config,
        )
        process.wait_until(self.ready, "Prometheus", timeout_s, state, self.log_path)
        took = time.monotonic() - started
        return f"prometheus started in {took:.1f} s (pid {state.pid}) at {self.url}"

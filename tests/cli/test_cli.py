"""The command line as a user meets it: real processes, one-line errors, no tracebacks."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

STRATA = str(Path(sys.executable).with_name("strata"))


def run(*args: str, env: dict | None = None, timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run(
        [STRATA, *args], capture_output=True, text=True, timeout=timeout, env={**os.environ, **(env or {})}
    )


def test_help_and_version():
    out = run("--help")
    assert out.returncode == 0
    for command in ("replay", "ingest", "project", "snapshot", "dev", "topics", "log", "demo"):
        assert command in out.stdout
    version = run("--version")
    assert version.returncode == 0 and version.stdout.startswith("strata, version ")


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["ingest", "--from", "/nonexistent/trace.jsonl"], "cannot read trace /nonexistent/trace.jsonl"),
        (["ingest", "--kubeconfig", "/nonexistent/kubeconfig"], "cannot load kubeconfig /nonexistent/kubeconfig"),
        (["ingest", "--kinds", "Pod,Deployment"], "unknown kind 'Deployment'"),
        (["replay", "x.jsonl", "--digest"], "cannot read trace x.jsonl"),
        (["topics", "list", "--topic-prefix", "no spaces"], "topic prefix 'no spaces'"),
        (["topics", "list", "-X", "oops"], "-X takes key=value"),
        (["log", "summary", "--bootstrap", "127.0.0.1:1"], "Kafka: Failed to get watermark offsets"),
    ],
)
def test_errors_are_one_line(args, message):
    out = run(*args)
    assert out.returncode == 1, out
    lines = out.stderr.splitlines()
    assert len(lines) == 1, out.stderr
    assert lines[0].startswith("strata: error: ") and message in lines[0], lines[0]
    assert "Traceback" not in out.stderr


def test_usage_errors_exit_2():
    out = run("log", "dump", "--from-offset", "-3")
    assert out.returncode == 2 and "Traceback" not in out.stderr

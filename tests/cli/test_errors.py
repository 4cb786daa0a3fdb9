"""Malformed CLI input: the `strata` executable exits non-zero with one line, never a traceback.

An error is exactly one line on stderr starting ``strata: error:`` and exit code 1; option syntax
that click itself refuses is its usage error, exit code 2. Cases that need a cache log to exist
run against the real broker.
"""

from __future__ import annotations

import os
import subprocess

import pytest

from strata.log.config import Settings
from tests.cli.test_cli import run
from tests.cli.test_log import env_of
from tests.paths import CONFORMANCE

CONFORMANCE = CONFORMANCE
UNREACHABLE = {"STRATA_KAFKA_BOOTSTRAP": "127.0.0.1:1"}  # no broker: an error must come before Kafka


def one_error_line(out: subprocess.CompletedProcess, message: str = "") -> str:
    assert out.returncode == 1, (out.returncode, out.stderr)
    assert "Traceback" not in out.stderr, out.stderr
    lines = out.stderr.splitlines()
    assert len(lines) == 1, out.stderr
    assert lines[0].startswith("strata: error: "), lines[0]
    assert message in lines[0], lines[0]
    return lines[0]


def usage_error(out: subprocess.CompletedProcess, message: str = "") -> None:
    assert out.returncode == 2, (out.returncode, out.stderr)
    assert "Traceback" not in out.stderr, out.stderr
    assert message in out.stderr, out.stderr


# ------------------------------------------------------------------------------------ bad paths
@pytest.mark.parametrize("command", [["replay"], ["replay", "--digest"], ["ingest", "--from"]])
def test_a_missing_trace(command, tmp_path):
    missing = tmp_path / "nope.jsonl"
    one_error_line(run(*command, str(missing), env=UNREACHABLE), f"cannot read trace {missing}")


@pytest.mark.parametrize("command", [["replay"], ["restore", "--from"]])
def test_a_directory_that_is_no_archive(command, tmp_path):
    (tmp_path / "stray.txt").write_text("not an archive\n")
    one_error_line(run(*command, str(tmp_path), env=UNREACHABLE), "is no archive")


def test_ingest_from_a_directory_is_a_usage_error(tmp_path):
    usage_error(run("ingest", "--from", str(tmp_path), env=UNREACHABLE), "is a directory")


def test_verify_of_a_directory_that_is_no_archive_reports_a_problem(tmp_path):
    out = run("verify", "--archive", str(tmp_path), env=UNREACHABLE)
    assert out.returncode == 1 and "Traceback" not in out.stderr + out.stdout
    assert "problem" in out.stdout + out.stderr


@pytest.mark.parametrize(
    "path",
    [
        "/etc/passwd/trace.jsonl",  # a path through a file
        "/proc/self/mem",  # opens, but reading fails (EIO), even for root
    ],
)
@pytest.mark.parametrize("command", [["replay"], ["ingest", "--from"]])
def test_an_unreadable_trace(command, path):
    one_error_line(run(*command, path, env=UNREACHABLE), f"cannot read trace {path}")


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads a file of mode 000")
def test_a_trace_without_read_permission(tmp_path):
    trace = tmp_path / "secret.jsonl"
    trace.write_bytes((CONFORMANCE / "example.jsonl").read_bytes())
    trace.chmod(0)
    one_error_line(run("replay", str(trace)), "Permission denied")


# ----------------------------------------------------------------------- unknown names, options
@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["ingest", "--kinds", "Pods"], "unknown kind 'Pods'"),
        (["ingest", "--kinds", "Pod,,Node"], "unknown kind ''"),
        (["faults", "--only", "nope"], "unknown scenario 'nope'"),
        (["history", "pod", "noslash"], "a pod is named NAMESPACE/NAME, not 'noslash'"),
        (["history", "job", "a/b/c"], "a job is named NAMESPACE/NAME"),
        (["story", "job", "noslash"], "a job is named NAMESPACE/NAME"),
        (["history", "pod", "ns/p", "--since", "yesterday"], "'yesterday' is neither an offset nor an ISO-8601"),
        (["diff", "x", "y"], "'x' is neither an offset nor an ISO-8601 time"),
        (["diff", "0", "2026-13-45"], "'2026-13-45' is neither an offset nor an ISO-8601 time"),
        (["snapshot", "--at", "notatime"], "'notatime' is neither an offset nor an ISO-8601 time"),
    ],
)
def test_unknown_names_and_bad_positions(args, message):
    one_error_line(run(*args, env=UNREACHABLE), message)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["snapshot", "--at-offset", "-1"], "-1 is not in the range"),
        (["snapshot", "--at-offset", "x"], "'x' is not a valid integer"),
        (["replay", str(CONFORMANCE / "c01.jsonl"), "--until", "-5"], "-5 is not in the range"),
        (["log", "dump", "--from-offset", "-3"], "-3 is not in the range"),
        (["history", "pods", "a/b"], "No such command 'pods'"),
        (["topics", "list", "-X"], "requires an argument"),
        (["replay"], "Missing argument"),
    ],
)
def test_option_syntax_is_a_usage_error(args, message):
    usage_error(run(*args, env=UNREACHABLE), message)


# -------------------------------------------------------------------------- bad env, bad -X pairs
@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("STRATA_RETRY_DELAYS", "0"),
        ("STRATA_RETRY_DELAYS", "1,1"),
        ("STRATA_RETRY_DELAYS", "abc"),
        ("STRATA_DIGEST_EVERY", "0"),
        ("STRATA_DIGEST_EVERY", "x"),
        ("STRATA_REPLICATION_FACTOR", "x"),
        ("STRATA_COMMAND_PARTITIONS", "-1"),
        ("STRATA_TOPIC_PREFIX", "no spaces"),
    ],
)
def test_bad_environment(name, value):
    one_error_line(run("topics", "list", env={name: value}), name if name != "STRATA_TOPIC_PREFIX" else "prefix")


@pytest.mark.parametrize("pair", ["oops", "=value", "", "key"])
def test_bad_x_pairs(pair):
    one_error_line(run("topics", "list", "-X", pair), "-X takes key=value")


@pytest.mark.parametrize(
    ("pair", "message"),
    [
        ("no.such.property=1", 'No such configuration property: "no.such.property"'),
        ("security.protocol=bogus", 'Invalid value "bogus" for configuration property "security.protocol"'),
    ],
)
def test_x_pairs_librdkafka_refuses(pair, message):
    one_error_line(run("log", "summary", "-X", pair), message)


# ----------------------------------------------------------------------------- against a real log
@pytest.mark.kafka
def test_bad_offsets_against_a_real_log(kafka: Settings):
    env = env_of(kafka)
    assert run("ingest", "--from", str(CONFORMANCE / "example.jsonl"), env=env).returncode == 0
    one_error_line(run("snapshot", "--at-offset", "5", env=env), "offset 5 is beyond the log's end (5 records)")
    one_error_line(run("snapshot", "--at-offset", "9" * 30, env=env), "beyond the log's end")
    one_error_line(run("diff", "0", "99", env=env), "offset 99 is beyond the log's end")
    one_error_line(run("diff", "x", "y", env=env), "'x' is neither an offset nor an ISO-8601 time")
    # the index lags the log, which `history` notes on stderr: a bad name must still be one line
    one_error_line(run("history", "pod", "noslash", env=env), "a pod is named NAMESPACE/NAME")
    one_error_line(run("story", "job", "noslash", env=env), "a job is named NAMESPACE/NAME")
    usage_error(run("snapshot", "--at-offset", "-1", env=env), "-1 is not in the range")

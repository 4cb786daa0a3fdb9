"""kafka-sasl: the whole path through the broker's SASL_SSL listener (SCRAM-SHA-512, the local CA).

Every step is a `strata` process configured only by the environment (STRATA_KAFKA_BOOTSTRAP,
STRATA_KAFKA_SECURITY_PROTOCOL, STRATA_KAFKA_SASL_*, STRATA_KAFKA_SSL_CA_LOCATION), so what is
tested is the pass-through of security settings: topics, ingest of a conformance trace, the
projector, and a snapshot whose digest must equal the offline replay's. Then the failures: a
wrong password and a PLAINTEXT client on the secure port must each end in one line on stderr,
without a traceback and without the password. Finally no output of any process, and not the
broker's log, may hold the password.
"""

from __future__ import annotations

import os
import subprocess
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from strata.dev.faults import FaultContext, FaultResult, Verdict
from strata.dev.faults.common import STRATA
from strata.log.topics import drop_topics

NAME = "kafka-sasl"
REPO = Path(__file__).resolve().parents[3]
TRACE = REPO / "tests" / "conformance" / "c03.jsonl"
# a failing client gives up after this long (librdkafka retries a refused login until its timeout)
FAIL_TIMEOUT_S = 60.0


class _Runner:
    """Runs `strata` with a clean environment and keeps every output for the final scan."""

    def __init__(self, base_env: dict[str, str]) -> None:
        self.base_env = base_env
        self.outputs: list[str] = []

    def __call__(self, *args: str, env: dict[str, str], timeout: float = 120.0) -> subprocess.CompletedProcess:
        try:
            out = subprocess.run(
                [STRATA, *args],
                capture_output=True,
                text=True,
                timeout=timeout,
                env={**self.base_env, **env},
                cwd=REPO,
            )
        except subprocess.TimeoutExpired as e:
            text = [x.decode() if isinstance(x, bytes) else (x or "") for x in (e.stdout, e.stderr)]
            self.outputs.extend(text)
            return subprocess.CompletedProcess(e.cmd, -9, text[0], text[1] + f"\n(timed out after {timeout:g} s)")
        self.outputs += [out.stdout, out.stderr]
        return out


def _clean_environ() -> dict[str, str]:
    """The process environment without any Kafka, topic, database or debug setting of its own."""
    drop = ("STRATA_KAFKA_", "STRATA_TOPIC_PREFIX", "STRATA_DB_URL", "STRATA_DEBUG", "STRATA_DATA_DIR")
    return {k: v for k, v in os.environ.items() if not k.startswith(drop)}


def run(ctx: FaultContext) -> FaultResult:
    from strata.dev.stack.kafka import KafkaBroker

    result = FaultResult(NAME)
    port = int(ctx.settings.bootstrap.rsplit(":", 1)[-1])
    broker = KafkaBroker(ctx.settings.data_dir, port)
    ctx.log(broker.up(log=ctx.log))  # reuses the running broker; makes the PKI and credential when missing
    secure = broker.secure_env()
    password = secure["STRATA_KAFKA_SASL_PASSWORD"]
    prefix = f"faults-sasl-{uuid.uuid4().hex[:12]}."
    workdir = ctx.workdir / "kafka-sasl"
    workdir.mkdir(parents=True, exist_ok=True)
    common = {"STRATA_TOPIC_PREFIX": prefix, "STRATA_DATA_DIR": str(workdir)}
    strata = _Runner(_clean_environ())

    def check(what: str, ok: bool, detail: str = "") -> bool:
        result.runs += 1
        if ok:
            result.passed += 1
        else:
            result.notes.append(f"{what}: {detail.strip()[-300:]}" if detail else what)
        ctx.log(f"{NAME}: {'ok  ' if ok else 'FAIL'} {what}")
        return ok

    try:
        env = {**secure, **common}
        out = strata("topics", "create", env=env)
        if check("topics create through SASL_SSL", out.returncode == 0, out.stderr):
            out = strata("ingest", "--from", str(TRACE), env=env)
            check("ingest --from c03.jsonl through SASL_SSL", out.returncode == 0, out.stderr)
            out = strata("project", "--stop-at-end", "--replica", "faults-sasl", env=env)
            check("project --stop-at-end through SASL_SSL", out.returncode == 0, out.stderr)
            snapshot = strata("snapshot", "--digest", env=env)
            replay = strata("replay", str(TRACE), "--digest", env=common)
            verdict = _same_digest(snapshot, replay)
            result.digest_mismatches += verdict.mismatches
            check("snapshot --digest equals replay --digest", verdict.clean, "; ".join(verdict.problems))
            wrong_digest = subprocess.CompletedProcess(snapshot.args, 0, "0" * 64 + "\n", "")
            result.control("a snapshot digest unlike replay's", _same_digest(wrong_digest, replay))

        # the two refusals side by side: `log summary` asks the broker (`topics list` does not) and
        # gives up after about 10 s
        wrong = f"wrong-{uuid.uuid4().hex}"
        plain = {"STRATA_KAFKA_BOOTSTRAP": broker.secure_bootstrap, **common}
        with ThreadPoolExecutor(2) as pool:
            refused = pool.submit(
                strata, "log", "summary", env={**env, "STRATA_KAFKA_SASL_PASSWORD": wrong}, timeout=FAIL_TIMEOUT_S
            )
            cleartext = pool.submit(strata, "log", "summary", env=plain, timeout=FAIL_TIMEOUT_S)
            out = refused.result()
            check(
                "a wrong password fails with one line naming the refusal, no traceback, no password",
                _one_line_failure(out)
                and "SASL authentication error" in out.stderr
                and wrong not in out.stdout + out.stderr,
                out.stderr,
            )
            out = cleartext.result()
            check("a PLAINTEXT client on the SASL_SSL port fails with one line", _one_line_failure(out), out.stderr)
    finally:
        # through the SASL_SSL listener too
        drop_topics(ctx.settings.with_(topic_prefix=prefix), {**broker.secure_client_config(), "log_level": 0})

    leaked = _leaks(strata.outputs, password)
    check("no process output holds the password", leaked.clean, "; ".join(leaked.problems))
    result.control("an output holding the password", _leaks([f"connecting with {password}"], password))
    traceback = subprocess.CompletedProcess([STRATA], 1, "", "Traceback (most recent call last):\nKafkaException: x\n")
    result.control("a failure with a traceback", Verdict() if _one_line_failure(traceback) else Verdict(problems=["!"]))
    broker_log = broker.log_path.read_bytes() if broker.log_path.exists() else b""
    secrets_ = (password, broker.keystore_password_path.read_text().strip())
    check("the broker's log holds no password", not any(s.encode() in broker_log for s in secrets_))
    return result


def _one_line_failure(out: subprocess.CompletedProcess) -> bool:
    lines = out.stderr.splitlines()
    return (
        out.returncode not in (0, -9)
        and len(lines) == 1
        and lines[0].startswith("strata: error: ")
        and "Traceback" not in out.stderr
    )


def _same_digest(snapshot: subprocess.CompletedProcess, replay: subprocess.CompletedProcess) -> Verdict:
    if snapshot.returncode != 0 or replay.returncode != 0:
        return Verdict(problems=[f"snapshot: {snapshot.stderr.strip()[-200:]}; replay: {replay.stderr.strip()[-200:]}"])
    if snapshot.stdout != replay.stdout:
        return Verdict(mismatches=1, problems=[f"snapshot {snapshot.stdout.strip()}; replay {replay.stdout.strip()}"])
    return Verdict()


def _leaks(outputs: list[str], secret: str) -> Verdict:
    leaked = sum(1 for text in outputs if secret in text)
    return Verdict(problems=[f"{leaked} output(s) hold it"] if leaked else [])

"""The local stack's own certificates: a CA per server and what it signs, made once with openssl.

The Kafka broker's SASL_SSL listener and the kube-apiserver each keep a CA of their own under
their home; both make it and sign with it the same way, here.
"""

from __future__ import annotations

import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from strata.errors import StrataError

CERT_DAYS = 3650


def openssl(*args: str, cwd: Path, needed_for: str) -> None:
    """Run one openssl command; its failure is one line naming the step."""
    exe = shutil.which("openssl")
    if exe is None:
        raise StrataError(f"the openssl command is needed once to make {needed_for}")
    result = subprocess.run([exe, *args], cwd=cwd, capture_output=True, text=True)
    if result.returncode != 0:
        detail = (result.stderr or result.stdout).strip().splitlines()[-1:] or ["no output"]
        raise StrataError(f"openssl {args[0]} failed: {detail[0]}")


@dataclass(frozen=True)
class LocalCA:
    """A CA in ``directory``: ``ca.key`` and the certificate ``cert`` (a file name)."""

    directory: Path
    cert: str
    subject: str  # e.g. /CN=strata-local-ca
    needed_for: str  # for the message when openssl is missing

    def run(self, *args: str) -> None:
        openssl(*args, cwd=self.directory, needed_for=self.needed_for)

    def create(self) -> None:
        self.run(
            "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", "ca.key", "-out", self.cert,
            "-days", str(CERT_DAYS), "-subj", self.subject,
            "-addext", "basicConstraints=critical,CA:TRUE",
            "-addext", "keyUsage=critical,keyCertSign,cRLSign,digitalSignature",
        )  # fmt: skip

    def sign(self, name: str, subject: str, usage: str, alt_names: str = "") -> None:
        """``<name>.key`` and ``<name>.crt`` for ``usage`` (serverAuth, clientAuth), signed by this CA."""
        ext = self.directory / f"{name}.ext"
        more = f"subjectAltName={alt_names}\n" if alt_names else ""
        ext.write_text(
            "basicConstraints=CA:FALSE\n"
            "keyUsage=critical,digitalSignature,keyEncipherment\n"
            f"extendedKeyUsage={usage}\n{more}"
        )
        self.run(
            "req", "-newkey", "rsa:2048", "-nodes", "-keyout", f"{name}.key", "-out", f"{name}.csr", "-subj", subject
        )
        self.run(
            "x509", "-req", "-in", f"{name}.csr", "-CA", self.cert, "-CAkey", "ca.key", "-CAcreateserial",
            "-days", str(CERT_DAYS), "-extfile", ext.name, "-out", f"{name}.crt",
        )  # fmt: skip
        for leftover in (ext, self.directory / f"{name}.csr"):
            leftover.unlink()

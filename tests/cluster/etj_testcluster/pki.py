"""Certificates and keys for the local control plane, made with the openssl CLI.

A CA; the API server's serving certificate (for 127.0.0.1 and the in-cluster names); an
admin client certificate in system:masters; the service-account signing key pair. All
under the cluster's state directory, never anywhere else.
"""

from __future__ import annotations

import subprocess
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Pki:
    dir: Path

    @property
    def ca_crt(self) -> Path:
        return self.dir / "ca.crt"

    @property
    def ca_key(self) -> Path:
        return self.dir / "ca.key"

    @property
    def server_crt(self) -> Path:
        return self.dir / "apiserver.crt"

    @property
    def server_key(self) -> Path:
        return self.dir / "apiserver.key"

    @property
    def admin_crt(self) -> Path:
        return self.dir / "admin.crt"

    @property
    def admin_key(self) -> Path:
        return self.dir / "admin.key"

    @property
    def sa_key(self) -> Path:
        return self.dir / "sa.key"

    @property
    def sa_pub(self) -> Path:
        return self.dir / "sa.pub"


def _openssl(*args: str, cwd: Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True)


def make_pki(directory: Path) -> Pki:
    """Create (or reuse) the whole PKI in ``directory``."""
    pki = Pki(directory)
    directory.mkdir(parents=True, exist_ok=True)
    if pki.sa_pub.exists():
        return pki
    d = directory
    _openssl(
        "req",
        "-x509",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-days",
        "3650",
        "-subj",
        "/CN=etj-local-ca",
        "-keyout",
        pki.ca_key.name,
        "-out",
        pki.ca_crt.name,
        cwd=d,
    )
    san = (
        "subjectAltName=IP:127.0.0.1,IP:10.0.0.1,DNS:localhost,DNS:kubernetes,"
        "DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local"
    )
    _issue(d, pki.server_key.name, pki.server_crt.name, "/CN=kube-apiserver", san)
    _issue(d, pki.admin_key.name, pki.admin_crt.name, "/O=system:masters/CN=etj-admin", None)
    _openssl("genrsa", "-out", pki.sa_key.name, "2048", cwd=d)
    _openssl("rsa", "-in", pki.sa_key.name, "-pubout", "-out", pki.sa_pub.name, cwd=d)
    return pki


def _issue(d: Path, key: str, crt: str, subject: str, san: str | None) -> None:
    _openssl(
        "req",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-subj",
        subject,
        "-keyout",
        key,
        "-out",
        f"{crt}.csr",
        cwd=d,
    )
    ext = ["-extfile", f"{crt}.ext"] if san else []
    if san:
        (d / f"{crt}.ext").write_text(san + "\n")
    _openssl(
        "x509",
        "-req",
        "-in",
        f"{crt}.csr",
        "-CA",
        "ca.crt",
        "-CAkey",
        "ca.key",
        "-CAcreateserial",
        "-days",
        "3650",
        "-out",
        crt,
        *ext,
        cwd=d,
    )

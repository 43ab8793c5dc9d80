"""gs:// on loopback for TensorFlow processes: fake-gcs-server behind gcs-front and a CONNECT
proxy, and the environment a TensorFlow process needs to use them.

TensorFlow 2.21's built-in GCS filesystem has no endpoint setting: it always calls
https://www.googleapis.com (JSON API, uploads) and https://storage.googleapis.com (reads).
Here its libcurl reaches fake-gcs-server (github.com/fsouza/fake-gcs-server, built from Go
modules into ``$ETJ_CACHE/bin`` by ``tests/cluster/kind-fake-gcs.sh --binaries``, i.e.
``make fake-gcs``) through a loopback CONNECT proxy (``https_proxy``) and trusts a
throwaway test CA (``CURL_CA_BUNDLE``). fake-gcs-server alone does not do: TF sends
``Transfer-Encoding: identity`` on empty-body POSTs (starting an upload, rename's rewrite)
and Go's HTTP server answers 501; the TLS front tests/cluster/gcs-front drops that header.
``NO_GCE_CHECK`` and ``GOOGLE_AUTH_TOKEN_FOR_TESTING`` keep TF off the metadata server.
(In the kind cluster the pods use hostAliases instead of the proxy:
tests/cluster/kind-fake-gcs.sh.)

What it must not do: reach anything but loopback. The proxy refuses every destination but
the two GCS host names (and records it), so a call TF makes elsewhere shows up as a
failure. Hand-written because no library serves TF's GCS client locally: fake-gcs-server
is the server, this is the wiring TF's fixed endpoints need.
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import shutil
import socket
import subprocess
import threading
import urllib.parse
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from etj_testcluster.waiting import wait_for

CACHE = Path(os.environ.get("ETJ_CACHE", Path.home() / ".cache" / "etj"))
FAKE_GCS = CACHE / "bin" / "fake-gcs-server"
GCS_FRONT = CACHE / "bin" / "gcs-front"
GCS_HOSTS = ("www.googleapis.com", "storage.googleapis.com")
BUCKET = "etj-ckpt"
BUILD_HINT = "make fake-gcs builds it (tests/cluster/kind-fake-gcs.sh --binaries)"


def missing() -> str | None:
    """Why gs:// on loopback cannot run here, or None."""
    for binary in (FAKE_GCS, GCS_FRONT):
        if not binary.exists():
            return f"no {binary} ({BUILD_HINT})"
    if shutil.which("openssl") is None:
        return "openssl is not installed"
    return None


def make_test_ca(d: Path) -> tuple[Path, Path, Path]:
    """A throwaway CA and a server certificate for the GCS host names (openssl)."""
    ca_key, ca_crt = d / "ca.key", d / "ca.crt"
    key, csr, crt = d / "server.key", d / "server.csr", d / "server.crt"

    def run(*args: str) -> None:
        subprocess.run(args, check=True, capture_output=True)

    run("openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2",
        "-subj", "/CN=etj test CA", "-keyout", str(ca_key), "-out", str(ca_crt))  # fmt: skip
    run("openssl", "req", "-newkey", "rsa:2048", "-nodes", "-subj", "/CN=www.googleapis.com",
        "-keyout", str(key), "-out", str(csr))  # fmt: skip
    ext = d / "san.ext"
    ext.write_text("subjectAltName=" + ",".join(f"DNS:{h}" for h in GCS_HOSTS) + "\n")
    run("openssl", "x509", "-req", "-in", str(csr), "-CA", str(ca_crt), "-CAkey", str(ca_key),
        "-CAcreateserial", "-days", "2", "-extfile", str(ext), "-out", str(crt))  # fmt: skip
    return ca_crt, crt, key


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class ConnectProxy:
    """An HTTP CONNECT proxy that sends the GCS host names to one local port, and refuses
    every other destination (so a call TF makes elsewhere shows up as a failure)."""

    def __init__(self, target_port: int) -> None:
        self.target_port = target_port
        self.refused: list[str] = []
        self.tunnels: list[str] = []
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(64)
        self.port = int(self.sock.getsockname()[1])
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                client, _ = self.sock.accept()
            except OSError:
                return
            threading.Thread(target=self._handle, args=(client,), daemon=True).start()

    def _handle(self, client: socket.socket) -> None:
        with client:
            head = b""
            while b"\r\n\r\n" not in head:
                chunk = client.recv(4096)
                if not chunk:
                    return
                head += chunk
            method, dest = head.split(b"\r\n")[0].decode().split()[:2]
            host = dest.rsplit(":", 1)[0]
            if method != "CONNECT" or host not in GCS_HOSTS:
                self.refused.append(f"{method} {dest}")
                client.sendall(b"HTTP/1.1 403 Forbidden\r\n\r\n")
                return
            self.tunnels.append(host)
            with socket.create_connection(("127.0.0.1", self.target_port)) as upstream:
                client.sendall(b"HTTP/1.1 200 Connection established\r\n\r\n")
                pair = {client: upstream, upstream: client}
                while True:
                    ready, _, _ = select.select(list(pair), [], [], 60)
                    if not ready:
                        return
                    for s in ready:
                        data = s.recv(65536)
                        if not data:
                            return
                        pair[s].sendall(data)

    def close(self) -> None:
        self.sock.close()


@dataclass
class FakeGcs:
    """A running fake GCS: ``env`` for the TensorFlow processes that use gs://, the proxy
    (what it tunnelled and refused), and the server's own plain port for the test's reads."""

    env: dict[str, str]
    proxy: ConnectProxy
    plain_port: int

    def objects(self, prefix: str, bucket: str = BUCKET) -> dict[str, tuple[str, str]]:
        """The bucket's objects under ``prefix``: name -> (md5Hash, generation), read from
        the server directly (not through TF): what a test compares before and after."""
        out: dict[str, tuple[str, str]] = {}
        token = ""
        while True:
            query = {"prefix": prefix, **({"pageToken": token} if token else {})}
            url = (
                f"http://127.0.0.1:{self.plain_port}/storage/v1/b/{bucket}/o?"
                + urllib.parse.urlencode(query)
            )
            with urllib.request.urlopen(url, timeout=60) as resp:
                page = json.load(resp)
            for item in page.get("items") or []:
                out[item["name"]] = (item.get("md5Hash", ""), str(item.get("generation", "")))
            token = page.get("nextPageToken") or ""
            if not token:
                return out


def tensorflow_env(base: dict[str, str], proxy_port: int, ca: Path) -> dict[str, str]:
    """``base`` with what TF's GCS filesystem needs to reach the fake server through the
    proxy, and without what would send it elsewhere."""
    env = dict(base)
    for var in ("no_proxy", "NO_PROXY", "HTTPS_PROXY", "http_proxy", "HTTP_PROXY",
                "grpc_proxy", "TF_USE_MODULAR_FILESYSTEM"):  # fmt: skip
        env.pop(var, None)
    env.update(
        {
            "https_proxy": f"http://127.0.0.1:{proxy_port}",
            # gRPC honours https_proxy too: TF's tasks talk to each other on loopback,
            # never through the proxy (which would refuse them).
            "no_proxy": "127.0.0.1,localhost",
            "CURL_CA_BUNDLE": str(ca),
            "NO_GCE_CHECK": "true",
            "GOOGLE_AUTH_TOKEN_FOR_TESTING": "etj-fake-token",
            "TF_CPP_MIN_LOG_LEVEL": "2",
        }
    )
    return env


@contextlib.contextmanager
def serve(workdir: Path, buckets: tuple[str, ...] = (BUCKET,)) -> Iterator[FakeGcs]:
    """fake-gcs-server (in memory, ``buckets`` created) behind gcs-front and the proxy,
    until the block ends; their output is printed then if they said anything."""
    reason = missing()
    if reason:
        raise FileNotFoundError(reason)
    workdir.mkdir(parents=True, exist_ok=True)
    ca, crt, key = make_test_ca(workdir)
    data = workdir / "data"
    for bucket in buckets:
        (data / bucket).mkdir(parents=True, exist_ok=True)
    port, plain_port = free_port(), free_port()
    server = subprocess.Popen(
        [str(FAKE_GCS), "-scheme", "http", "-host", "127.0.0.1", "-port", str(plain_port),
         "-public-host", "storage.googleapis.com", "-external-url", "https://www.googleapis.com",
         "-backend", "memory", "-data", str(data), "-log-level", "warn"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    # TLS, and the header Go's HTTP server refuses, are gcs-front's (tests/cluster/gcs-front).
    front = subprocess.Popen(
        [str(GCS_FRONT), "-listen", f"127.0.0.1:{port}", "-cert", str(crt), "-key", str(key),
         "-upstream", f"127.0.0.1:{plain_port}"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    proxy = ConnectProxy(port)

    def listening() -> bool:
        # The server first: the readiness probe itself goes through the front.
        for p in (plain_port, port):
            with socket.socket() as s:
                if s.connect_ex(("127.0.0.1", p)) != 0:
                    return False
        return True

    try:
        wait_for(listening, 120, "fake-gcs-server to listen", every=0.2)
        yield FakeGcs(tensorflow_env(dict(os.environ), proxy.port, ca), proxy, plain_port)
    finally:
        proxy.close()
        for name, proc in (("gcs-front", front), ("fake-gcs-server", server)):
            proc.terminate()
            out, _ = proc.communicate(timeout=120)
            if out.strip():
                print(f"{name} log:\n" + out[-4000:])

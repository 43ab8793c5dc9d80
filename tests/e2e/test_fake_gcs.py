"""TensorFlow's own gs:// filesystem against fake-gcs-server, on loopback.

What the local kind cluster's gs:// stand-in (tests/cluster/kind-fake-gcs.sh) must serve:
the calls TF 2.21's built-in GCS filesystem makes for a checkpoint (resumable upload,
metadata stat, ranged reads, listing, rewrite for rename, delete). TF has no endpoint
setting: it always calls https://www.googleapis.com and https://storage.googleapis.com.
Here its libcurl reaches fake-gcs-server through a loopback CONNECT proxy (``https_proxy``)
and trusts a test CA (``CURL_CA_BUNDLE``). fake-gcs-server alone does not do: TF sends
``Transfer-Encoding: identity`` on empty-body POSTs (starting an upload, rename's rewrite)
and Go's HTTP server answers 501, so every save fails after 10 retries (7 min); the TLS
front tests/cluster/gcs-front drops that header and says the scheme was https. ``NO_GCE_CHECK`` and
``GOOGLE_AUTH_TOKEN_FOR_TESTING`` keep it off the metadata server. In the cluster the pods
use hostAliases instead of the proxy.

Skipped without the fake-gcs-server binary (``make kind-up`` builds it into
``~/.cache/etj/bin``; as root the suite's kind cluster fixture runs it first) or openssl. TensorFlow runs in a child process: its GCS filesystem
reads the environment once.
"""

from __future__ import annotations

import json
import os
import select
import shutil
import socket
import subprocess
import sys
import textwrap
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from .conftest import kind_is_ours, wait_for

pytestmark = [pytest.mark.e2e, pytest.mark.trainer]

CACHE = Path(os.environ.get("ETJ_CACHE", Path.home() / ".cache" / "etj"))
FAKE_GCS = CACHE / "bin" / "fake-gcs-server"
GCS_FRONT = CACHE / "bin" / "gcs-front"
GCS_HOSTS = ("www.googleapis.com", "storage.googleapis.com")
BUCKET = "etj-ckpt"


def _skip_reason() -> str | None:
    for binary in (FAKE_GCS, GCS_FRONT):
        if not binary.exists():
            return f"no {binary} (make kind-up builds it)"
    if shutil.which("openssl") is None:
        return "openssl is not installed"
    return None


def make_test_ca(d: Path) -> tuple[Path, Path, Path]:
    """A throwaway CA and a server certificate for the GCS host names (openssl)."""
    ca_key, ca_crt = d / "ca.key", d / "ca.crt"
    key, csr, crt = d / "server.key", d / "server.csr", d / "server.crt"
    run = lambda *a: subprocess.run(a, check=True, capture_output=True)  # noqa: E731
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
        self.sock.listen(16)
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


@pytest.fixture()
def fake_gcs(
    tmp_path: Path, request: pytest.FixtureRequest
) -> Iterator[tuple[dict[str, str], ConnectProxy]]:
    if kind_is_ours():
        # As root the kind cluster's bring-up builds both binaries: wait for it, so that
        # this never skips where the suite can build what it needs.
        request.getfixturevalue("kind_kubeconfig")
    reason = _skip_reason()
    if reason:
        pytest.skip(reason)
    ca, crt, key = make_test_ca(tmp_path)
    data = tmp_path / "data"
    (data / BUCKET).mkdir(parents=True)
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
        env = {
            **os.environ,
            "https_proxy": f"http://127.0.0.1:{proxy.port}",
            "CURL_CA_BUNDLE": str(ca),
            "NO_GCE_CHECK": "true",
            "GOOGLE_AUTH_TOKEN_FOR_TESTING": "etj-fake-token",
            "TF_CPP_MIN_LOG_LEVEL": "2",
        }
        for var in ("no_proxy", "NO_PROXY", "HTTPS_PROXY", "TF_USE_MODULAR_FILESYSTEM"):
            env.pop(var, None)
        yield env, proxy
    finally:
        proxy.close()
        for name, proc in (("gcs-front", front), ("fake-gcs-server", server)):
            proc.terminate()
            out, _ = proc.communicate(timeout=120)
            if out.strip():
                print(f"{name} log:\n" + out[-4000:])


CHECKPOINT_ROUNDTRIP = textwrap.dedent(
    """
    import json, sys
    import numpy as np
    import tensorflow as tf

    root = sys.argv[1]
    steps = {}
    def step(name, fn):
        try:
            steps[name] = {"ok": True, "value": fn()}
        except Exception as e:  # every step reports, so the test shows what fails
            steps[name] = {"ok": False, "error": f"{type(e).__name__}: {e}"[:500]}

    emb = tf.Variable(np.arange(3 * 1000 * 16, dtype=np.float32).reshape(3000, 16))
    ckpt = tf.train.Checkpoint(step=tf.Variable(0, dtype=tf.int64), emb=emb)
    manager = tf.train.CheckpointManager(ckpt, root, max_to_keep=2)
    def save_three():
        paths = []
        for s in (100, 200, 300):
            ckpt.step.assign(s)
            paths.append(manager.save(checkpoint_number=s))
        return paths
    step("save", save_three)
    step("latest", lambda: tf.train.latest_checkpoint(root))
    step("listdir", lambda: sorted(tf.io.gfile.listdir(root)))
    step("glob", lambda: sorted(tf.io.gfile.glob(root + "/ckpt-*.index")))
    def restore():
        fresh = tf.train.Checkpoint(step=tf.Variable(0, dtype=tf.int64),
                                    emb=tf.Variable(tf.zeros([3000, 16])))
        fresh.restore(tf.train.latest_checkpoint(root)).assert_consumed()
        return {"step": int(fresh.step.numpy()),
                "emb_equal": bool(np.array_equal(fresh.emb.numpy(), emb.numpy()))}
    step("restore", restore)
    def rename():
        tf.io.gfile.rename(root + "/checkpoint", root + "/checkpoint.moved", overwrite=True)
        tf.io.gfile.rename(root + "/checkpoint.moved", root + "/checkpoint", overwrite=True)
        return tf.io.gfile.exists(root + "/checkpoint")
    step("rename", rename)
    def ranged_read():
        with tf.io.gfile.GFile(manager.latest_checkpoint + ".data-00000-of-00001", "rb") as f:
            f.seek(1000)
            return len(f.read(4096))
    step("ranged_read", ranged_read)
    step("stat", lambda: tf.io.gfile.stat(manager.latest_checkpoint + ".index").length)
    step("isdir", lambda: tf.io.gfile.isdir(root))
    def remove_tree():
        tf.io.gfile.rmtree(root)
        return tf.io.gfile.exists(root + "/checkpoint")
    step("rmtree", remove_tree)
    print("RESULT " + json.dumps(steps))
    """
)


def test_tf_checkpoint_roundtrip_on_fake_gcs(
    fake_gcs: tuple[dict[str, str], ConnectProxy],
) -> None:
    env, proxy = fake_gcs
    proc = subprocess.run(
        [sys.executable, "-c", CHECKPOINT_ROUNDTRIP, f"gs://{BUCKET}/x"],
        env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    result_line = [ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")]
    assert result_line, f"TF child failed (rc {proc.returncode}):\n{proc.stderr[-4000:]}"
    steps = json.loads(result_line[0][len("RESULT ") :])
    print(json.dumps(steps, indent=1))
    failed = {k: v["error"] for k, v in steps.items() if not v["ok"]}
    assert not failed, f"steps that failed on fake-gcs-server: {failed}"
    assert steps["latest"]["value"] == f"gs://{BUCKET}/x/ckpt-300"
    # max_to_keep=2: the oldest checkpoint was deleted from the bucket.
    assert steps["glob"]["value"] == [f"gs://{BUCKET}/x/ckpt-{n}.index" for n in (200, 300)]
    assert steps["restore"]["value"] == {"step": 300, "emb_equal": True}
    assert steps["rename"]["value"] is True
    assert steps["ranged_read"]["value"] == 4096
    assert steps["rmtree"]["value"] is False
    assert proxy.tunnels, "TF never went through the proxy"
    assert not proxy.refused, f"TF called other hosts: {proxy.refused}"

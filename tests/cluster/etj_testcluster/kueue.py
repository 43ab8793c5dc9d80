"""A real Kueue (sigs.k8s.io/kueue, built from Go modules by tests/cluster/build-kueue.sh)
running against a ``LocalCluster``, for tests that prove etj's pod groups are admitted.

Kueue normally runs in-cluster behind a Service, with its own certificate manager. Here the
API server runs on this host, so Kueue runs as a local process and every webhook it serves
(pods, its own kinds, the CRDs' version conversion) is configured by URL,
``https://127.0.0.1:<port>/<path>``, with the local cluster's CA: its webhook server serves
the API server's own certificate (valid for 127.0.0.1), and Kueue's internal certificate
management is off. Only the ``pod`` integration is on; only the webhooks of pods and of
Kueue's own kinds are registered (the others would name handlers Kueue does not serve and,
failing closed, block Jobs and Deployments). The visibility API server is off (it needs
API aggregation). Manifests come from the Kueue module the build downloaded. Kueue reads
its metrics certificate from a fixed /etc path, so it runs in a mount namespace of its own
(root and unshare(1) needed; the host's /etc is never written).

It must not: run anywhere but 127.0.0.1, leave a process behind (``stop()``; the process
also dies with its starter), or touch anything outside its state directory and the cluster.
"""

from __future__ import annotations

import base64
import fcntl
import json
import os
import shutil
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from etj.local.launch import Proc, free_port, start
from etj_testcluster.cluster import ClusterError, LocalCluster, cache_dir
from etj_testcluster.pki import make_pki
from etj_testcluster.waiting import WaitTimeout, wait_for

# Keep in step with KUEUE_VERSION in tests/cluster/build-kueue.sh.
KUEUE_VERSION = "v0.15.2"
# Kueue's API version of this release (its webhooks' paths name it).
KUEUE_API = "kueue.x-k8s.io/v1beta2"
_CONVERTED = {"localqueues", "clusterqueues", "cohorts", "workloads", "multikueueclusters"}


def kueue_version() -> str:
    return os.environ.get("ETJ_KUEUE_VERSION", KUEUE_VERSION)


def kueue_binary() -> Path:
    return cache_dir() / "bin" / f"kueue-{kueue_version()}" / "kueue"


def kueue_module() -> Path:
    """Kueue's module source in the Go module cache (its config/ has the manifests)."""
    return cache_dir() / "go" / "mod" / "sigs.k8s.io" / f"kueue@{kueue_version()}"


def build_lock() -> Path:
    """The lock tests/cluster/build-kueue.sh holds while it builds (keep the paths in step)."""
    return cache_dir() / "bin" / f"kueue-{kueue_version()}.lock"


def wait_for_build(timeout: float = 3600.0) -> None:
    """Wait for a Kueue build in progress to end: ``make test`` builds Kueue beside the
    cluster lane's tests, so the first test that needs it may come before it is done. The
    deadline only stops a build that hangs; a cold build takes minutes."""
    lock = build_lock()
    if not lock.exists():
        return
    with lock.open("a") as f:

        def taken() -> bool:
            try:
                fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                return False
            fcntl.flock(f, fcntl.LOCK_UN)
            return True

        wait_for(
            taken,
            timeout=timeout,
            what="the Kueue build beside the tests (build-kueue.sh)",
            every=2.0,
        )


def missing() -> str | None:
    """Why Kueue cannot run here, or None; first waits for a build in progress
    (``wait_for_build``)."""
    if os.geteuid() != 0 or not shutil.which("unshare"):
        return "Kueue runs in a mount namespace of its own here: it needs root and unshare(1)"
    wait_for_build()
    if not os.access(kueue_binary(), os.X_OK):
        return f"no {kueue_binary()}: run `make kueue` (tests/cluster/build-kueue.sh)"
    if not (kueue_module() / "config" / "components").is_dir():
        return f"no Kueue manifests in {kueue_module()}: run `make kueue`"
    return None


def _url_client_config(port: int, path: str, ca: str) -> dict[str, Any]:
    return {"url": f"https://127.0.0.1:{port}{path}", "caBundle": ca}


def webhook_configurations(manifests: str, port: int, ca: str) -> list[dict[str, Any]]:
    """Kueue's webhook configurations, pointed at ``127.0.0.1:port`` by URL and kept to the
    webhooks of pods and of Kueue's own kinds. Pure."""
    out = []
    for doc in yaml.safe_load_all(manifests):
        if not doc:
            continue
        kept = []
        for hook in doc.get("webhooks") or []:
            rules = hook.get("rules") or []
            if not any(
                "pods" in r.get("resources", []) or "kueue.x-k8s.io" in r.get("apiGroups", [])
                for r in rules
            ):
                continue
            path = hook["clientConfig"]["service"]["path"]
            kept.append({**hook, "clientConfig": _url_client_config(port, path, ca)})
        if kept:
            out.append({**doc, "webhooks": kept})
    return out


def crds_with_conversion(crd_dir: Path, port: int, ca: str) -> list[dict[str, Any]]:
    """Kueue's CRDs, with the conversion webhook its kustomization adds, by URL. Pure
    but for reading the files."""
    out = []
    for path in sorted(crd_dir.glob("*.yaml")):
        crd = yaml.safe_load(path.read_text())
        if crd["spec"]["names"]["plural"] in _CONVERTED:
            crd["spec"]["conversion"] = {
                "strategy": "Webhook",
                "webhook": {
                    "clientConfig": _url_client_config(port, "/convert", ca),
                    "conversionReviewVersions": ["v1"],
                },
            }
        out.append(crd)
    return out


@dataclass
class LocalKueue:
    cluster: LocalCluster
    state_dir: Path
    proc: Proc | None = None
    webhook_port: int = 0
    health_port: int = 0
    _extra: dict[str, Any] = field(default_factory=dict)

    @property
    def log(self) -> Path:
        return self.state_dir / "kueue.log"

    def start(self, timeout: float = 120.0) -> LocalKueue:
        why = missing()
        if why:
            raise ClusterError(why)
        self.state_dir.mkdir(parents=True, exist_ok=True)
        pki = make_pki(self.cluster.state_dir / "pki")  # the cluster's own (already made)
        certs = self.state_dir / "certs"
        certs.mkdir(exist_ok=True)
        (certs / "tls.crt").write_bytes(pki.server_crt.read_bytes())
        (certs / "tls.key").write_bytes(pki.server_key.read_bytes())
        ca = base64.b64encode(pki.ca_crt.read_bytes()).decode()
        self.webhook_port, self.health_port = free_port(), free_port()
        config = {
            "apiVersion": "config.kueue.x-k8s.io/v1beta2",
            "kind": "Configuration",
            "namespace": "kueue-system",
            "health": {"healthProbeBindAddress": f"127.0.0.1:{self.health_port}"},
            "metrics": {"bindAddress": "0"},
            "webhook": {"port": self.webhook_port, "host": "127.0.0.1", "certDir": str(certs)},
            "leaderElection": {"leaderElect": False},
            "internalCertManagement": {"enable": False},
            "integrations": {"frameworks": ["pod"]},
        }
        config_path = self.state_dir / "config.yaml"
        config_path.write_text(json.dumps(config))
        self.cluster.kubectl("create", "namespace", "kueue-system", check=False)
        module = kueue_module() / "config" / "components"
        for crd in crds_with_conversion(module / "crd" / "bases", self.webhook_port, ca):
            self.cluster.kubectl(
                "apply", "--server-side", "--force-conflicts", "-f", "-", input=json.dumps(crd)
            )
        self.cluster.wait_crds_established(60)
        # With its certificate management off, Kueue v0.15 reads its metrics server's
        # certificate from a fixed path, /etc/kueue/metrics/certs. It gets a mount
        # namespace of its own whose /etc is an empty tmpfs holding only that (a static Go
        # binary needs nothing else there); the host's /etc is never touched.
        metrics_certs = "/etc/kueue/metrics/certs"
        setup = (
            f"mount -t tmpfs etj-kueue-etc /etc && mkdir -p {metrics_certs} && "
            f'cp "$0/tls.crt" "$0/tls.key" {metrics_certs}/ && exec "$@"'
        )
        self.proc = start(
            "kueue",
            [
                "unshare",
                "--mount",
                "--propagation=private",
                "sh",
                "-c",
                setup,
                str(certs),
                str(kueue_binary()),
                f"--config={config_path}",
                f"--kubeconfig={self.cluster.kubeconfig}",
                "--feature-gates=VisibilityOnDemand=false",
                "--zap-log-level=2",
            ],
            {**os.environ, "KUBECONFIG": str(self.cluster.kubeconfig)},
            self.log,
            self.state_dir,
        )
        self._wait_ready(time.monotonic() + timeout)
        manifests = (module / "webhook" / "manifests.yaml").read_text()
        for conf in webhook_configurations(manifests, self.webhook_port, ca):
            conf["metadata"]["name"] = "kueue-" + conf["metadata"]["name"]
            self.cluster.kubectl("apply", "-f", "-", input=json.dumps(conf))
        return self

    def _wait_ready(self, deadline: float) -> None:
        last = ""

        def ready() -> bool:
            nonlocal last
            assert self.proc is not None
            if self.proc.popen.poll() is not None:
                raise ClusterError(f"kueue exited with {self.proc.exit_code}\n{self.log_tail()}")
            try:
                url = f"http://127.0.0.1:{self.health_port}/readyz"
                with urllib.request.urlopen(url, timeout=2) as resp:
                    return bool(resp.status == 200)
            except OSError as exc:
                last = str(exc)
                return False

        try:
            wait_for(ready, max(0.0, deadline - time.monotonic()), "kueue ready", every=0.3)
        except WaitTimeout:
            raise ClusterError(f"kueue not ready in time ({last})\n{self.log_tail()}") from None

    def log_tail(self, lines: int = 40) -> str:
        if not self.log.exists():
            return "(no kueue log)"
        return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.stop(grace=10)
            self.proc = None

    def __enter__(self) -> LocalKueue:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

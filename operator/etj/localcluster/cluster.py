"""A local Kubernetes control plane made of the real binaries: etcd, kube-apiserver (RBAC,
service-account keys, an admin client certificate), kube-controller-manager (garbage
collection, namespaces, service accounts) and kube-scheduler, plus one Node object for
the scheduler to bind pods to. No kubelet: pods stay Pending-bound unless a process-backed
node runs them.

Every component runs as a child process in its own session with PR_SET_PDEATHSIG, so none
outlives the process that started it; ``stop()`` ends them all (SIGTERM, then SIGKILL).
Logs go to ``<state>/logs/<component>.log``. Readiness is polled with a deadline.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import ssl
import subprocess
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

from etj.local.procs import Proc, start
from etj.localcluster.pki import Pki, make_pki

K8S_VERSION = "v1.35.4"
NODE_NAME = "etj-local-node"
COMPONENTS = ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler")


class ClusterError(RuntimeError):
    """The cluster could not be started; the message names the component and its log."""


def cache_dir() -> Path:
    return Path(os.environ.get("ETJ_CACHE", str(Path.home() / ".cache" / "etj")))


def default_bin_dir() -> Path:
    """Where build-binaries.sh puts the binaries (or ETJ_K8S_BIN_DIR / KUBEBUILDER_ASSETS)."""
    for var in ("ETJ_K8S_BIN_DIR", "KUBEBUILDER_ASSETS"):
        value = os.environ.get(var)
        if value and (Path(value) / "kube-apiserver").exists():
            return Path(value)
    return cache_dir() / "bin" / K8S_VERSION


def missing_binaries(bin_dir: Path) -> list[str]:
    return [b for b in (*COMPONENTS, "kubectl") if not (bin_dir / b).exists()]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class LocalCluster:
    """One local control plane rooted at ``state_dir``."""

    state_dir: Path
    bin_dir: Path = field(default_factory=default_bin_dir)
    procs: dict[str, Proc] = field(default_factory=dict)
    api_port: int = 0

    @property
    def kubeconfig(self) -> Path:
        return self.state_dir / "kubeconfig"

    @property
    def logs(self) -> Path:
        return self.state_dir / "logs"

    @property
    def pids_file(self) -> Path:
        return self.state_dir / "pids.json"

    @property
    def server(self) -> str:
        return f"https://127.0.0.1:{self.api_port}"

    # ---- lifecycle ---------------------------------------------------------------------

    def start(self, timeout: float = 180.0) -> LocalCluster:
        missing = missing_binaries(self.bin_dir)
        if missing:
            raise ClusterError(
                f"missing {', '.join(missing)} in {self.bin_dir}: run `make binaries` "
                "(tests/cluster/build-binaries.sh) first"
            )
        if self.state_dir.exists():
            shutil.rmtree(self.state_dir)
        self.logs.mkdir(parents=True)
        pki = make_pki(self.state_dir / "pki")
        deadline = time.monotonic() + timeout
        try:
            etcd_url = self._start_etcd()
            self.api_port = _free_port()
            self._start_apiserver(pki, etcd_url)
            self._write_kubeconfig(pki)
            self._wait_ready(pki, deadline)
            self._start_controller_manager(pki)
            self._start_scheduler()
            self._register_node()
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self, grace: float = 10.0) -> None:
        """Stop every component, newest first; nothing survives."""
        for name in reversed(list(self.procs)):
            self.procs[name].stop(grace=grace)
        self.procs.clear()
        self.pids_file.unlink(missing_ok=True)

    def pids(self) -> list[int]:
        return [p.popen.pid for p in self.procs.values()]

    def _spawn(self, name: str, args: list[str]) -> None:
        proc = start(
            name,
            [str(self.bin_dir / name), *args],
            dict(os.environ),
            self.logs / f"{name}.log",
            self.state_dir,
        )
        self.procs[name] = proc
        self.pids_file.write_text(json.dumps({n: p.popen.pid for n, p in self.procs.items()}))
        time.sleep(0.05)  # give an immediate crash (bad flag) a moment to show in poll()
        if proc.popen.poll() is not None:
            raise ClusterError(
                f"{name} exited at once with {proc.exit_code}; see {proc.log_path}\n{self.log_tail(name)}"
            )

    def _start_etcd(self) -> str:
        client, peer = _free_port(), _free_port()
        url = f"http://127.0.0.1:{client}"
        self._spawn(
            "etcd",
            [
                f"--data-dir={self.state_dir / 'etcd'}",
                f"--listen-client-urls={url}",
                f"--advertise-client-urls={url}",
                f"--listen-peer-urls=http://127.0.0.1:{peer}",
                f"--initial-advertise-peer-urls=http://127.0.0.1:{peer}",
                f"--initial-cluster=default=http://127.0.0.1:{peer}",
                # A throwaway test store: durability is not worth the fsync latency.
                "--unsafe-no-fsync",
                "--log-level=warn",
            ],
        )
        return url

    def _start_apiserver(self, pki: Pki, etcd_url: str) -> None:
        self._spawn(
            "kube-apiserver",
            [
                f"--etcd-servers={etcd_url}",
                "--bind-address=127.0.0.1",
                "--advertise-address=127.0.0.1",
                f"--secure-port={self.api_port}",
                f"--cert-dir={self.state_dir / 'apiserver-certs'}",
                f"--tls-cert-file={pki.server_crt}",
                f"--tls-private-key-file={pki.server_key}",
                f"--client-ca-file={pki.ca_crt}",
                f"--service-account-key-file={pki.sa_pub}",
                f"--service-account-signing-key-file={pki.sa_key}",
                "--service-account-issuer=https://kubernetes.default.svc",
                "--authorization-mode=Node,RBAC",
                "--service-cluster-ip-range=10.0.0.0/24",
                "--allow-privileged=true",
                "--enable-priority-and-fairness=false",
                "--v=1",
            ],
        )

    def _write_kubeconfig(self, pki: Pki) -> None:
        self.kubeconfig.write_text(
            json.dumps(
                {
                    "apiVersion": "v1",
                    "kind": "Config",
                    "clusters": [
                        {
                            "name": "etj-local",
                            "cluster": {
                                "server": self.server,
                                "certificate-authority": str(pki.ca_crt),
                            },
                        }
                    ],
                    "users": [
                        {
                            "name": "etj-admin",
                            "user": {
                                "client-certificate": str(pki.admin_crt),
                                "client-key": str(pki.admin_key),
                            },
                        }
                    ],
                    "contexts": [
                        {
                            "name": "etj-local",
                            "context": {"cluster": "etj-local", "user": "etj-admin"},
                        }
                    ],
                    "current-context": "etj-local",
                },
                indent=2,
            )
        )

    def _wait_ready(self, pki: Pki, deadline: float) -> None:
        ctx = ssl.create_default_context(cafile=str(pki.ca_crt))
        ctx.load_cert_chain(str(pki.admin_crt), str(pki.admin_key))
        last = ""
        while time.monotonic() < deadline:
            for name, proc in self.procs.items():
                if proc.popen.poll() is not None:
                    raise ClusterError(
                        f"{name} exited with {proc.exit_code}\n{self.log_tail(name)}"
                    )
            try:
                with urllib.request.urlopen(
                    f"{self.server}/readyz", context=ctx, timeout=2
                ) as resp:
                    if resp.status == 200:
                        return
            except OSError as exc:
                last = str(exc)
            time.sleep(0.25)  # poll interval of a deadline-bounded wait
        raise ClusterError(
            f"kube-apiserver not ready in time ({last})\n{self.log_tail('kube-apiserver')}"
        )

    def _start_controller_manager(self, pki: Pki) -> None:
        kc = str(self.kubeconfig)
        self._spawn(
            "kube-controller-manager",
            [
                f"--kubeconfig={kc}",
                f"--authentication-kubeconfig={kc}",
                f"--authorization-kubeconfig={kc}",
                f"--service-account-private-key-file={pki.sa_key}",
                f"--root-ca-file={pki.ca_crt}",
                "--use-service-account-credentials=false",
                "--leader-elect=false",
                "--bind-address=127.0.0.1",
                "--secure-port=0",
                # No kubelet heartbeats here: the node-lifecycle controller would mark the
                # node unreachable and evict everything.
                "--controllers=*,-node-lifecycle-controller",
                "--concurrent-gc-syncs=5",
                "--v=1",
            ],
        )

    def _start_scheduler(self) -> None:
        kc = str(self.kubeconfig)
        self._spawn(
            "kube-scheduler",
            [
                f"--kubeconfig={kc}",
                f"--authentication-kubeconfig={kc}",
                f"--authorization-kubeconfig={kc}",
                "--leader-elect=false",
                "--bind-address=127.0.0.1",
                "--secure-port=0",
                "--v=1",
            ],
        )

    def _register_node(self) -> None:
        node = {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {
                "name": NODE_NAME,
                "labels": {"kubernetes.io/hostname": NODE_NAME, "kubernetes.io/os": "linux"},
            },
        }
        self.kubectl("apply", "-f", "-", input=json.dumps(node))
        capacity = {"cpu": "64", "memory": "512Gi", "pods": "1000", "ephemeral-storage": "1Ti"}
        status = {
            "status": {
                "capacity": capacity,
                "allocatable": capacity,
                "conditions": [
                    {
                        "type": "Ready",
                        "status": "True",
                        "reason": "EtjLocalNode",
                        "message": "local process node",
                    }
                ],
                "addresses": [
                    {"type": "InternalIP", "address": "127.0.0.1"},
                    {"type": "Hostname", "address": NODE_NAME},
                ],
            }
        }
        self.kubectl(
            "patch",
            "node",
            NODE_NAME,
            "--subresource=status",
            "--type=merge",
            "-p",
            json.dumps(status),
        )
        # Admission taints a new node not-ready; the node-lifecycle controller (off here)
        # would lift it once the node reports Ready, so lift it ourselves.
        self.kubectl(
            "taint", "node", NODE_NAME, "node.kubernetes.io/not-ready:NoSchedule-", check=False
        )

    # ---- use ---------------------------------------------------------------------------

    def kubectl(
        self, *args: str, input: str | None = None, check: bool = True, timeout: float = 60
    ) -> subprocess.CompletedProcess[str]:
        cmd = [str(self.bin_dir / "kubectl"), f"--kubeconfig={self.kubeconfig}", *args]
        result = subprocess.run(cmd, input=input, capture_output=True, text=True, timeout=timeout)
        if check and result.returncode != 0:
            raise ClusterError(
                f"kubectl {' '.join(args)} failed ({result.returncode}): {result.stderr.strip()}"
            )
        return result

    def log_tail(self, component: str, lines: int = 40) -> str:
        path = self.logs / f"{component}.log"
        if not path.exists():
            return f"(no log for {component})"
        return f"--- {path} ---\n" + "\n".join(
            path.read_text(errors="replace").splitlines()[-lines:]
        )

    def all_log_tails(self, lines: int = 30) -> str:
        return "\n".join(
            self.log_tail(c, lines)
            for c in COMPONENTS
            if c in self.procs or (self.logs / f"{c}.log").exists()
        )

"""A local Kubernetes control plane made of the real binaries, for tests and development.

Components: etcd (data in the state directory, loopback, free ports), kube-apiserver on
127.0.0.1 (RBAC + Node authorization, service-account signing keys, an admin client
certificate in ``system:masters``), kube-controller-manager (garbage collection, namespace
deletion, service accounts and the rest, except node lifecycle) and kube-scheduler, plus
one Node object with allocatable cpu/memory/pods for the scheduler to bind pods to.

What it must not do: it runs no kubelet (pods stay bound but never run unless a
process-backed stand-in runs them), it never listens beyond 127.0.0.1, never touches
anything outside its state directory, and never leaves a process behind. Every component
runs in its own session with PR_SET_PDEATHSIG (see ``etj.local.launch``), so none outlives
the thread that started it; ``stop()`` ends them all (SIGTERM, then SIGKILL after a
deadline). Because the death signal follows the starting *thread*, call ``start()`` from
a thread that lives as long as the cluster (the main thread, a pytest fixture).

Locked down (``locked_down=True``): the API server also enables the admission plugins of
``LOCKED_DOWN_ADMISSION`` (OpenShift's owner-reference check, Pod Security), so what
passes here passes a hardened cluster's admission.

Faults, for tests of what survives them: ``stop_component(name)`` stops one component
alone (the API server as an outage, etcd) and ``start_component(name)`` starts it again
with the same arguments — the same ports, certificates and data — once it is healthy;
``compact_etcd()`` compacts etcd's history as the API server does every few minutes, so a
watch resumed from an older resourceVersion gets 410 Gone.

Logs go to ``<state>/logs/<component>.log``. Readiness is polled with a deadline:
``/readyz`` of the API server and ``/healthz`` of the controller-manager and scheduler.

Binaries come from ``default_bin_dir()``: ``ETJ_K8S_BIN_DIR`` or ``KUBEBUILDER_ASSETS``
when that directory has every control-plane binary, else
``~/.cache/etj/bin/<K8S_VERSION>/`` where ``tests/cluster/build-binaries.sh`` puts them.
"""

from __future__ import annotations

import contextlib
import json
import os
import platform
import shutil
import socket
import ssl
import subprocess
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from etj.local.launch import Proc, start
from etj_testcluster.pki import Pki, make_pki
from etj_testcluster.waiting import WaitTimeout, wait_for

# Keep in step with K8S_VERSION in tests/cluster/build-binaries.sh (a test checks).
K8S_VERSION = "v1.35.4"
NODE_NAME = "etj-local-node"
COMPONENTS = ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler")
# What a directory needs to run a cluster; helm is a tool some tests use, looked up apart.
CONTROL_PLANE_BINARIES = (*COMPONENTS, "kubectl")
BIN_DIR_VARIABLES = ("ETJ_K8S_BIN_DIR", "KUBEBUILDER_ASSETS")
# What a locked-down cluster (OpenShift's API server, a hardened distribution) admits with,
# besides the defaults. OwnerReferencesPermissionEnforcement: only a client that may
# `update` an owner's `finalizers` subresource may set `blockOwnerDeletion` on a reference
# to it. PodSecurity is on by default since v1.25; named so it stays on whatever the
# defaults become. It enforces what a namespace's `pod-security.kubernetes.io/enforce`
# label asks for (`restricted`: non-root, no privilege escalation, capabilities dropped,
# a seccomp profile).
LOCKED_DOWN_ADMISSION = ("OwnerReferencesPermissionEnforcement", "PodSecurity")


class ClusterError(RuntimeError):
    """The cluster could not be started; the message names the component and its log."""


def cache_dir() -> Path:
    return Path(os.environ.get("ETJ_CACHE", str(Path.home() / ".cache" / "etj")))


def k8s_version() -> str:
    return os.environ.get("ETJ_K8S_VERSION", K8S_VERSION)


def missing_binaries(bin_dir: Path) -> list[str]:
    """The control-plane binaries ``bin_dir`` lacks (executable files only count)."""
    return [b for b in CONTROL_PLANE_BINARIES if not os.access(bin_dir / b, os.X_OK)]


def default_bin_dir() -> Path:
    """``ETJ_K8S_BIN_DIR`` / ``KUBEBUILDER_ASSETS`` if complete, else the build's cache.

    A directory with only some binaries (envtest's assets have no controller-manager or
    scheduler) is not mixed with the cache: versions would skew.
    """
    for var in BIN_DIR_VARIABLES:
        value = os.environ.get(var)
        if value and not missing_binaries(Path(value)):
            return Path(value)
    return cache_dir() / "bin" / k8s_version()


def _free_port() -> int:
    # The port is free now; a race with another process taking it before the component
    # binds is possible but shows as a startup failure with a clear log, not a hang.
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def process_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:  # a zombie still "exists"
        return "State:\tZ" not in Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return False


@dataclass
class LocalCluster:
    """One local control plane rooted at ``state_dir`` (wiped at ``start()``)."""

    state_dir: Path
    bin_dir: Path = field(default_factory=default_bin_dir)
    procs: dict[str, Proc] = field(default_factory=dict)
    api_port: int = 0
    # How each component was started and how its health is read: a restart reuses both,
    # so a component comes back on the same ports with the same data.
    _args: dict[str, list[str]] = field(default_factory=dict, repr=False)
    _health: dict[str, tuple[str, Pki | None]] = field(default_factory=dict, repr=False)
    _etcd_url: str = ""
    # Extra kube-apiserver flags, after the defaults (a later flag wins), e.g. for a benchmark.
    apiserver_args: tuple[str, ...] = ()
    # Admit as a locked-down cluster does (LOCKED_DOWN_ADMISSION).
    locked_down: bool = False
    # Feature gates of the API server and the scheduler alike (e.g. GenericWorkload and
    # GangScheduling for the v1.35 Workload API), and extra scheduler flags.
    feature_gates: tuple[str, ...] = ()
    scheduler_args: tuple[str, ...] = ()
    # The registered node's capacity (= allocatable); ``resize_node`` changes it live.
    node_capacity: dict[str, str] = field(
        default_factory=lambda: {
            "cpu": "64",
            "memory": "512Gi",
            "pods": "1000",
            "ephemeral-storage": "1Ti",
        }
    )

    def __post_init__(self) -> None:
        self.state_dir = Path(self.state_dir)
        self.bin_dir = Path(self.bin_dir)

    @property
    def kubeconfig(self) -> Path:
        return self.state_dir / "kubeconfig"

    @property
    def logs(self) -> Path:
        return self.state_dir / "logs"

    @property
    def stopped_file(self) -> Path:
        return self.pids_file.with_name("stopped.json")

    @property
    def pids_file(self) -> Path:
        return self.state_dir / "pids.json"

    @property
    def server(self) -> str:
        return f"https://127.0.0.1:{self.api_port}"

    def binary(self, name: str) -> Path:
        """A binary from ``bin_dir``, else from the build's cache (helm beside envtest assets)."""
        for directory in (self.bin_dir, cache_dir() / "bin" / k8s_version()):
            if os.access(directory / name, os.X_OK):
                return directory / name
        raise ClusterError(f"no {name} in {self.bin_dir}: run `make binaries`")

    # ---- lifecycle ---------------------------------------------------------------------

    def start(self, timeout: float = 180.0) -> LocalCluster:
        """Start every component and return once all are ready (or raise ClusterError)."""
        missing = missing_binaries(self.bin_dir)
        if missing:
            raise ClusterError(
                f"missing {', '.join(missing)} in {self.bin_dir}: run `make binaries` "
                "(tests/cluster/build-binaries.sh) first"
            )
        running = [p for p in self._recorded_pids() if self._is_ours(p)]
        if running:
            raise ClusterError(
                f"a cluster already runs in {self.state_dir} (pids {running}); stop it first"
            )
        if self.state_dir.exists():
            shutil.rmtree(self.state_dir)
        self.logs.mkdir(parents=True)
        pki = make_pki(self.state_dir / "pki")
        deadline = time.monotonic() + timeout
        try:
            self._etcd_url = self._start_etcd()
            self._health["etcd"] = (f"{self._etcd_url}/health", None)
            self.api_port = _free_port()
            self._start_apiserver(pki, self._etcd_url)
            self._health["kube-apiserver"] = (self.server + "/readyz", pki)
            self._write_kubeconfig(pki)
            self._wait_healthy("kube-apiserver", self.server + "/readyz", deadline, pki)
            kcm_port = self._start_controller_manager(pki)
            scheduler_port = self._start_scheduler()
            self._register_node()
            for name, port in (
                ("kube-controller-manager", kcm_port),
                ("kube-scheduler", scheduler_port),
            ):
                self._health[name] = (f"https://127.0.0.1:{port}/healthz", None)
                self._wait_healthy(name, f"https://127.0.0.1:{port}/healthz", deadline)
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self, grace: float = 10.0) -> None:
        """Stop every component, newest first (SIGTERM, SIGKILL after ``grace``). How each
        ended (its exit code; 137 = the SIGKILL was needed) goes to ``stopped_file``."""
        ended = {}
        for name in reversed(list(self.procs)):
            self.procs[name].stop(grace=grace)
            ended[name] = self.procs[name].exit_code
        self.procs.clear()
        self.pids_file.unlink(missing_ok=True)
        if ended:
            self.stopped_file.write_text(json.dumps(ended))

    def pids(self) -> list[int]:
        return [p.popen.pid for p in self.procs.values()]

    # ---- faults: one component down and back ------------------------------------------

    def stop_component(self, name: str, grace: float = 10.0) -> None:
        """Stop one component alone (e.g. the API server, as an outage); the others run on.
        Its ports and data stay for ``start_component``."""
        if name not in self._args:
            raise ClusterError(
                f"{name} is not a component of this cluster ({', '.join(COMPONENTS)})"
            )
        proc = self.procs.pop(name, None)
        if proc is not None:
            proc.stop(grace=grace)
        self._write_pids()

    def start_component(self, name: str, timeout: float = 60.0) -> None:
        """Start a component stopped by ``stop_component`` again: the same arguments, so the
        same ports, certificates and data; returns once it is healthy."""
        if name in self.procs:
            raise ClusterError(f"{name} is running; stop it first")
        self._spawn(name, self._args[name])
        url, pki = self._health[name]
        self._wait_healthy(name, url, time.monotonic() + timeout, pki)

    def etcd_revision(self) -> int:
        """etcd's current revision (read through its gRPC gateway)."""
        return int(self._etcd_call("/v3/kv/range", {"key": "AA=="})["header"]["revision"])

    def compact_etcd(self) -> int:
        """Compact etcd's history up to its current revision, as the API server does every
        few minutes: a watch resumed from an older resourceVersion then gets 410 Gone.
        Returns the revision compacted to."""
        revision = self.etcd_revision()
        self._etcd_call("/v3/kv/compaction", {"revision": str(revision), "physical": True})
        return revision

    def _etcd_call(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        request = urllib.request.Request(
            self._etcd_url + path,
            data=json.dumps(body).encode(),
            headers={"Content-Type": "application/json"},
        )
        with urllib.request.urlopen(request, timeout=10) as resp:
            return dict(json.loads(resp.read()))

    def __enter__(self) -> LocalCluster:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _recorded_pids(self) -> list[int]:
        try:
            return [int(p) for p in json.loads(self.pids_file.read_text()).values()]
        except (OSError, ValueError, AttributeError):
            return []

    def _is_ours(self, pid: int) -> bool:
        """A live process whose command line names this state directory (pids get reused)."""
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
        except OSError:
            return False
        return process_alive(pid) and str(self.state_dir).encode() in cmdline

    def _spawn(self, name: str, args: list[str]) -> None:
        proc = start(
            name,
            [str(self.bin_dir / name), *args],
            dict(os.environ),
            self.logs / f"{name}.log",
            self.state_dir,
        )
        self.procs[name] = proc
        self._args[name] = args
        self._write_pids()

    def _write_pids(self) -> None:
        # Recorded so `etj cluster down` (another process) can find them.
        self.pids_file.write_text(json.dumps({n: p.popen.pid for n, p in self.procs.items()}))

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
                # Flow control queues requests under load; a test server wants them served.
                "--enable-priority-and-fairness=false",
                # The "kubernetes" Service's endpoint would be 127.0.0.1, which the API
                # rejects (loopback); without this it retries and logs an error every 10 s.
                "--endpoint-reconciler-type=none",
                # Delegated authentication of the controller-manager and scheduler reads the
                # request-header CA; without one they log an error every few seconds. Only a
                # certificate named front-proxy-client may assert a user through headers.
                f"--requestheader-client-ca-file={pki.ca_crt}",
                "--requestheader-allowed-names=front-proxy-client",
                "--requestheader-username-headers=X-Remote-User",
                "--requestheader-group-headers=X-Remote-Group",
                "--requestheader-extra-headers-prefix=X-Remote-Extra-",
                # `kubectl logs/exec` on a real kubelet: the API server authenticates to it.
                f"--kubelet-client-certificate={pki.admin_crt}",
                f"--kubelet-client-key={pki.admin_key}",
                "--kubelet-preferred-address-types=InternalIP",
                "--v=1",
                *(
                    [f"--enable-admission-plugins={','.join(LOCKED_DOWN_ADMISSION)}"]
                    if self.locked_down
                    else []
                ),
                *self._gates(),
                *self.apiserver_args,
            ],
        )

    def _write_kubeconfig(self, pki: Pki) -> None:
        # JSON is YAML: kubectl, client-go and the Python client all read it.
        config = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [
                {
                    "name": "etj-local",
                    "cluster": {"server": self.server, "certificate-authority": str(pki.ca_crt)},
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
                {"name": "etj-local", "context": {"cluster": "etj-local", "user": "etj-admin"}}
            ],
            "current-context": "etj-local",
        }
        self.kubeconfig.write_text(json.dumps(config, indent=2))

    def _wait_healthy(self, name: str, url: str, deadline: float, pki: Pki | None = None) -> None:
        """Poll ``url`` until it answers 200; fail fast if any component has exited."""
        if pki is not None:
            ctx = ssl.create_default_context(cafile=str(pki.ca_crt))
            ctx.load_cert_chain(str(pki.admin_crt), str(pki.admin_key))
        else:
            # The controller-manager and scheduler serve a self-signed certificate of their
            # own making; /healthz carries nothing to protect.
            ctx = ssl.create_default_context()
            ctx.check_hostname = False
            ctx.verify_mode = ssl.CERT_NONE
        last = ""

        def healthy() -> bool:
            nonlocal last
            for component, proc in self.procs.items():
                if proc.popen.poll() is not None:
                    raise ClusterError(
                        f"{component} exited with {proc.exit_code}\n{self.log_tail(component)}"
                    )
            try:
                with urllib.request.urlopen(url, context=ctx, timeout=2) as resp:
                    return bool(resp.status == 200)
            except OSError as exc:
                last = str(exc)
                return False

        try:
            wait_for(healthy, max(0.0, deadline - time.monotonic()), f"{name} healthy")
        except WaitTimeout:
            raise ClusterError(
                f"{name} not healthy in time ({last})\n{self.log_tail(name)}"
            ) from None

    def _start_controller_manager(self, pki: Pki) -> int:
        kc = str(self.kubeconfig)
        port = _free_port()
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
                f"--secure-port={port}",
                f"--cert-dir={self.state_dir / 'kcm-certs'}",
                # No kubelet heartbeats here: the node-lifecycle controller would mark the
                # node unreachable and evict everything. Pods run on loopback addresses,
                # which Endpoints and EndpointSlices may not hold: those controllers would
                # only fail and log (nothing here routes through Services).
                "--controllers=*,-node-lifecycle-controller,-endpoints-controller,"
                "-endpointslice-controller,-endpointslice-mirroring-controller",
                "--concurrent-gc-syncs=5",
                "--v=1",
            ],
        )
        return port

    def _start_scheduler(self) -> int:
        kc = str(self.kubeconfig)
        port = _free_port()
        self._spawn(
            "kube-scheduler",
            [
                f"--kubeconfig={kc}",
                f"--authentication-kubeconfig={kc}",
                f"--authorization-kubeconfig={kc}",
                "--leader-elect=false",
                "--bind-address=127.0.0.1",
                f"--secure-port={port}",
                f"--cert-dir={self.state_dir / 'scheduler-certs'}",
                "--v=1",
                *self._gates(),
                *self.scheduler_args,
            ],
        )
        return port

    def _gates(self) -> list[str]:
        return [f"--feature-gates={','.join(self.feature_gates)}"] if self.feature_gates else []

    def resize_node(self, capacity: dict[str, str]) -> None:
        """Set the node's capacity and allocatable (merged over the current ones), as a
        kubelet reports a resized machine; the scheduler retries unschedulable pods."""
        self.node_capacity = {**self.node_capacity, **capacity}
        body = {"status": {"capacity": self.node_capacity, "allocatable": self.node_capacity}}
        self.kubectl(
            "patch",
            "node",
            NODE_NAME,
            "--subresource=status",
            "--type=merge",
            "-p",
            json.dumps(body),
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
        capacity = self.node_capacity
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
                # What `kubectl get nodes -o wide` shows; the "runtime" is local processes.
                "nodeInfo": {
                    "architecture": platform.machine().replace("x86_64", "amd64"),
                    "operatingSystem": "linux",
                    "kubeletVersion": k8s_version(),
                    "containerRuntimeVersion": "etj-process://local",
                    "kernelVersion": platform.release(),
                    "osImage": "etj local node",
                },
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
        """Run the built kubectl against this cluster; raise ClusterError on failure if ``check``."""
        cmd = [str(self.bin_dir / "kubectl"), f"--kubeconfig={self.kubeconfig}", *args]
        result = subprocess.run(cmd, input=input, capture_output=True, text=True, timeout=timeout)
        if check and result.returncode != 0:
            raise ClusterError(
                f"kubectl {' '.join(args)} failed ({result.returncode}): {result.stderr.strip()}"
            )
        return result

    def apply_crds(self, paths: list[Path], timeout: float = 90.0) -> None:
        """Apply CRD files (server-side) and wait until every CRD is Established."""
        for path in paths:
            self.kubectl("apply", "--server-side", "-f", str(path))
        self.wait_crds_established(timeout)

    def wait_crds_established(self, timeout: float) -> None:
        """Every CRD Established. ``kubectl wait`` fails at once on a CRD the API server
        has not given conditions yet (just applied, on a busy host): ask again until the
        deadline."""
        last = ""

        def established() -> bool:
            nonlocal last
            result = self.kubectl(
                "wait", "--for=condition=Established", "--timeout=30s", "crd", "--all", check=False
            )
            last = result.stderr.strip()
            return result.returncode == 0

        try:
            wait_for(established, timeout, "every CRD Established", every=0.5)
        except WaitTimeout:
            raise ClusterError(f"CRDs not Established: {last}") from None

    def api_client(self) -> Any:
        """A ``kubernetes.client.ApiClient`` for this cluster (needs the operator extra)."""
        from kubernetes import config

        return config.new_client_from_config(config_file=str(self.kubeconfig))

    def log_tail(self, component: str, lines: int = 40) -> str:
        path = self.logs / f"{component}.log"
        if not path.exists():
            return f"(no log for {component})"
        with contextlib.suppress(OSError):
            text = path.read_text(errors="replace").splitlines()[-lines:]
            return f"--- {path} (last {lines} lines) ---\n" + "\n".join(text)
        return f"(unreadable log {path})"

    def all_log_tails(self, lines: int = 30) -> str:
        return "\n".join(
            self.log_tail(c, lines) for c in COMPONENTS if (self.logs / f"{c}.log").exists()
        )

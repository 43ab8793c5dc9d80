"""A real node for the local cluster: containerd + runc + a CNI bridge + the kubelet + CoreDNS.

``etj cluster up --node kubelet`` (root) runs pods as real containers from the images
``make images`` built: the kubelet authenticates with a client certificate of the cluster's
PKI (``system:node:<name>`` in ``system:nodes``, authorized by the Node authorizer; its own
API takes x509 + webhook authentication, no anonymous access), containerd 1.6 with runc,
the CNI bridge ``etj0`` (10.244.0.0/24, gateway 10.244.0.1 is the node's address), CoreDNS
on the gateway serving ``cluster.local`` (the kubelet's ``clusterDNS``), and one iptables
DNAT rule in its own chain standing in for kube-proxy: pods reach the ``kubernetes``
Service (10.0.0.1:443) at the API server on 127.0.0.1 (``route_localnet`` on the bridge
only). The fake Node object of ``LocalCluster`` is deleted so nothing is scheduled there.

Workarounds this machine kind needs (cgroup v1 hybrid, no systemd): containerd CRI
``restrict_oom_score_adj`` and ``SystemdCgroup = false``; kubelet ``failCgroupV1: false``
and ``cgroupDriver: cgroupfs``; a locally built pause image (``etj-pause:dev``).

Hand-written because no library sets up a single-host kubelet without kubeadm/systemd.
What it must not do: touch the loopback interface, the default route or any iptables chain
it did not create; write outside its state directory and ``~/.cache/etj/node`` (containerd's
image store, kept between runs so images are imported once); leave anything behind:
``stop()`` deletes the pods, stops the kubelet, kills every container and shim, stops
containerd and CoreDNS, unmounts what lies under its directories, removes its network
namespaces, the bridge, its iptables chain and the ``kubepods`` cgroups.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

from etj.local.launch import Proc, processes_naming, start
from etj_testcluster.cluster import NODE_NAME, ClusterError, LocalCluster, cache_dir
from etj_testcluster.pki import Pki, issue

KUBELET_NODE_NAME = "etj-kubelet-node"
BRIDGE = "etj0"
POD_SUBNET = "10.244.0.0/24"
GATEWAY = "10.244.0.1"
KUBERNETES_SERVICE_IP = "10.0.0.1"  # first address of the API server's service range
CLUSTER_DOMAIN = "cluster.local"
CHAIN = "ETJ-LOCAL-NODE"
# The chains the kubelet makes for itself (IPv4 and IPv6), removed with the node.
KUBELET_CHAINS = ("KUBE-FIREWALL", "KUBE-KUBELET-CANARY", "KUBE-IPTABLES-HINT")
IPTABLES_TABLES = ("filter", "nat", "mangle")
PAUSE_IMAGE = "localhost/etj-pause:dev"
CRI_NAMESPACE = "k8s.io"
NETNS_DIR = Path("/run/netns")
CGROUP_ROOT = Path("/sys/fs/cgroup")
# What the node needs from the machine: Debian packages (make node-packages) and binaries
# (make node-binaries).
HOST_TOOLS = ("containerd", "containerd-shim-runc-v2", "runc", "ctr", "iptables", "ip")
NODE_BINARIES = ("kubelet", "coredns")
CNI_BIN_DIR = Path("/usr/lib/cni")


def image_archives() -> list[Path]:
    """The archives ``make images`` saved (pause, operator, trainer), newest of each."""
    newest: dict[str, Path] = {}
    for path in sorted((cache_dir() / "images").glob("etj-*.tar"), key=lambda p: p.stat().st_mtime):
        newest[path.name.rsplit("-", 1)[0]] = path
    return list(newest.values())


def leftover_rules() -> list[str]:
    """This node's and the kubelet's iptables chains and the rules jumping to them."""
    found = []
    for tool in ("iptables", "ip6tables"):
        for table in IPTABLES_TABLES:
            rules = _run(tool, "-t", table, "-S", check=False).stdout.splitlines()
            found += [
                f"{tool} -t {table} {r}"
                for r in rules
                if any(c in r.split() for c in (CHAIN, *KUBELET_CHAINS))
            ]
    return found


def _remove_chains() -> None:
    for tool in ("iptables", "ip6tables"):
        for table in IPTABLES_TABLES:
            rules = _run(tool, "-t", table, "-S", check=False).stdout.splitlines()
            chains = [c for c in (CHAIN, *KUBELET_CHAINS) if f"-N {c}" in rules]
            for rule in rules:  # the jumps from built-in chains first
                words = rule.split()
                if words[:1] == ["-A"] and words[1] not in chains and set(words) & set(chains):
                    _run(tool, "-t", table, "-D", *words[1:], check=False)
            for chain in chains:
                _run(tool, "-t", table, "-F", chain, check=False)
            for chain in chains:
                _run(tool, "-t", table, "-X", chain, check=False)


def clean_up_after(cluster_state: Path) -> None:
    """Remove what a real node of the cluster in ``cluster_state`` left, if it had one (its
    supervisor was killed before it could stop it): ``etj cluster down`` calls this."""
    if (cluster_state / "kubelet-node").exists() and os.geteuid() == 0:
        KubeletNode(LocalCluster(cluster_state)).stop()


class NodeError(ClusterError):
    """The real node could not start here; the message says what is missing."""


def unavailable_reason(bin_dir: Path) -> str | None:
    """Why a real node cannot start on this machine, or None when it can."""
    if os.geteuid() != 0:
        return "a real node needs root (containerd, the CNI bridge, iptables)"
    missing = [t for t in HOST_TOOLS if shutil.which(t) is None]
    if not (CNI_BIN_DIR / "bridge").exists():
        missing.append("containernetworking-plugins")
    if missing:
        return f"missing {', '.join(missing)}: run `make node-packages`"
    lacking = [b for b in NODE_BINARIES if not os.access(bin_dir / b, os.X_OK)]
    if lacking:
        return f"no {', '.join(lacking)} in {bin_dir}: run `make node-binaries`"
    return None


def _run(*args: str, check: bool = True, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    result = subprocess.run(args, capture_output=True, text=True, timeout=timeout)
    if check and result.returncode != 0:
        raise NodeError(f"{' '.join(args)} failed ({result.returncode}): {result.stderr.strip()}")
    return result


def _mounts_under(paths: list[Path]) -> list[str]:
    """Mount points under any of ``paths``, deepest first (so they unmount in order)."""
    found = []
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        point = line.split()[4].replace("\\040", " ")
        if any(point == str(p) or point.startswith(f"{p}/") for p in paths):
            found.append(point)
    return sorted(set(found), key=len, reverse=True)


def _cgroup_dirs() -> list[Path]:
    """The kubelet's ``kubepods`` cgroups in every hierarchy, deepest first."""
    found: list[Path] = []
    for top in CGROUP_ROOT.glob("*/kubepods*"):
        found += [p for p in top.rglob("*") if p.is_dir()] + [top]
    found += list(CGROUP_ROOT.glob("kubepods*"))
    return sorted(set(found), key=lambda p: len(p.parts), reverse=True)


def _image_name(ref: str) -> str:
    """The repository's last path segment of an image reference, without tag or digest:
    docker.io/library/etj-trainer:dev -> etj-trainer."""
    return ref.rsplit("/", 1)[-1].split("@")[0].split(":")[0]


@dataclass
class KubeletNode:
    """The real node of ``cluster`` (started after it, stopped before it)."""

    cluster: LocalCluster
    images: list[Path] = field(default_factory=list)  # docker archives to import
    procs: dict[str, Proc] = field(default_factory=dict)
    netns_before: set[str] = field(default_factory=set)  # never delete a namespace not ours

    @property
    def state(self) -> Path:
        return self.cluster.state_dir / "kubelet-node"

    @property
    def store(self) -> Path:
        """containerd's content and snapshots: kept between runs, so imports happen once."""
        return cache_dir() / "node" / "containerd"

    @property
    def run_dir(self) -> Path:
        """Sockets and the kubelet's root: under /run, named by the state directory, since
        a unix socket path has at most 104 bytes, which a pytest temp directory overruns."""
        return Path("/run/etj-node") / hashlib.sha256(str(self.state).encode()).hexdigest()[:12]

    @property
    def sock(self) -> Path:
        return self.run_dir / "containerd.sock"

    # ---- start ---------------------------------------------------------------------------

    def start(self, timeout: float = 240.0) -> KubeletNode:
        reason = unavailable_reason(self.cluster.bin_dir)
        if reason:
            raise NodeError(reason)
        if _run("ip", "link", "show", BRIDGE, check=False).returncode == 0:
            raise NodeError(f"bridge {BRIDGE} exists: another real node runs (or leaked)")
        deadline = time.monotonic() + timeout
        self.state.mkdir(parents=True, exist_ok=True)
        self.netns_before = set(os.listdir(NETNS_DIR)) if NETNS_DIR.exists() else set()
        try:
            self._network()
            self._start_containerd(deadline)
            self._import_images()
            pki = Pki(self.cluster.state_dir / "pki")
            self._start_coredns()
            self._start_kubelet(pki)
            self._wait_ready(deadline)
            # The fake node must not get pods while a real one runs.
            self.cluster.kubectl("delete", "node", NODE_NAME, "--ignore-not-found")
        except BaseException:
            self.stop()
            raise
        return self

    def _network(self) -> None:
        _run("ip", "link", "add", BRIDGE, "type", "bridge")
        _run("ip", "addr", "add", f"{GATEWAY}/24", "dev", BRIDGE)
        _run("ip", "link", "set", BRIDGE, "up")
        # Per-interface: lets pods' packets be DNATed to 127.0.0.1; gone with the bridge.
        Path(f"/proc/sys/net/ipv4/conf/{BRIDGE}/route_localnet").write_text("1")
        _run("iptables", "-t", "nat", "-N", CHAIN)
        _run(
            "iptables", "-t", "nat", "-A", CHAIN, "-d", f"{KUBERNETES_SERVICE_IP}/32",
            "-p", "tcp", "--dport", "443", "-j", "DNAT",
            "--to-destination", f"127.0.0.1:{self.cluster.api_port}",
        )  # fmt: skip
        _run("iptables", "-t", "nat", "-I", "PREROUTING", "-i", BRIDGE, "-j", CHAIN)
        cni = self.state / "cni" / "net.d"
        cni.mkdir(parents=True, exist_ok=True)
        conf = {
            "cniVersion": "0.4.0",
            "name": "etj",
            "plugins": [
                {
                    "type": "bridge",
                    "bridge": BRIDGE,
                    "isGateway": True,
                    "ipMasq": False,
                    "hairpinMode": True,
                    "ipam": {
                        "type": "host-local",
                        "ranges": [[{"subnet": POD_SUBNET, "gateway": GATEWAY}]],
                        # Service addresses (10.0.0.1) lie off the bridge: via the gateway.
                        "routes": [{"dst": "0.0.0.0/0"}],
                        "dataDir": str(self.state / "cni" / "ipam"),
                    },
                }
            ],
        }
        (cni / "10-etj.conflist").write_text(json.dumps(conf, indent=2))

    def _spawn(self, name: str, args: list[str]) -> None:
        self.procs[name] = start(
            name, args, dict(os.environ), self.cluster.logs / f"{name}.log", self.state
        )

    def _start_containerd(self, deadline: float) -> None:
        d = self.state / "containerd"
        d.mkdir(parents=True, exist_ok=True)
        self.store.mkdir(parents=True, exist_ok=True)
        self.run_dir.mkdir(parents=True, exist_ok=True)
        cri = 'plugins."io.containerd.grpc.v1.cri"'
        config = f"""
version = 2
root = "{self.store}"
state = "{d / "state"}"
disabled_plugins = ["io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.zfs",
  "io.containerd.snapshotter.v1.devmapper", "io.containerd.snapshotter.v1.aufs"]
[grpc]
  address = "{self.sock}"
[ttrpc]
  address = "{self.sock}.ttrpc"
[plugins."io.containerd.internal.v1.opt"]
  path = "{d / "opt"}"
[{cri}]
  sandbox_image = "{PAUSE_IMAGE}"
  # Else every sandbox fails here: nsexec cannot write /proc/self/oom_score_adj.
  restrict_oom_score_adj = true
  [{cri}.containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [{cri}.containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [{cri}.containerd.runtimes.runc.options]
        SystemdCgroup = false
  [{cri}.cni]
    bin_dir = "{CNI_BIN_DIR}"
    conf_dir = "{self.state / "cni" / "net.d"}"
"""
        (d / "config.toml").write_text(config)
        self._spawn("containerd", ["containerd", "--config", str(d / "config.toml")])
        while time.monotonic() < deadline:
            if self._ctr("version", check=False).returncode == 0:
                return
            self._check_alive()
            time.sleep(0.2)  # poll interval of a deadline-bounded wait
        raise NodeError(f"containerd did not answer in time\n{self.cluster.log_tail('containerd')}")

    def _ctr(
        self, *args: str, check: bool = True, timeout: float = 600
    ) -> subprocess.CompletedProcess[str]:
        return _run(
            "ctr", "-a", str(self.sock), "-n", CRI_NAMESPACE, *args, check=check, timeout=timeout
        )

    def _import_images(self) -> None:
        """Import each docker archive once (a marker per archive, whose name has its key).

        The image store is kept between runs, so what an earlier run left is removed first:
        its containers (each holds its image's unpacked layers; the kubelet that made them
        is gone) and, before a changed archive is imported, the image of the same name it
        replaces. containerd's garbage collector then frees their layers: without this the
        store grew by the unpacked trainer image (~2.5 GB) with every change."""
        stale = self._ctr("containers", "ls", "-q").stdout.split()
        if stale:
            self._ctr("containers", "rm", *stale, check=False)
        marks = self.store.parent / "imported"
        marks.mkdir(parents=True, exist_ok=True)
        present = self._ctr("images", "ls", "-q").stdout.split()
        for archive in self.images:
            mark = marks / archive.name
            if mark.exists() and present:
                continue
            name = archive.stem.rsplit("-", 1)[0]  # etj-trainer-<key> -> etj-trainer
            replaced = [ref for ref in present if _image_name(ref) == name]
            if replaced:
                self._ctr("images", "rm", "--sync", *replaced, check=False)
            for old in marks.glob(f"{name}-*"):
                old.unlink()
            self._ctr("images", "import", "--no-unpack", str(archive), timeout=1200)
            mark.touch()

    def _start_coredns(self) -> None:
        corefile = self.state / "Corefile"
        corefile.write_text(
            f""".:53 {{
    bind {GATEWAY}
    errors
    kubernetes {CLUSTER_DOMAIN} in-addr.arpa ip6.arpa {{
        kubeconfig {self.cluster.kubeconfig} etj-local
        pods insecure
        fallthrough in-addr.arpa ip6.arpa
    }}
    cache 5
}}
"""
        )
        self._spawn("coredns", [str(self.cluster.bin_dir / "coredns"), "-conf", str(corefile)])

    def _start_kubelet(self, pki: Pki) -> None:
        client_crt, client_key = issue(
            pki, "kubelet-client", f"/O=system:nodes/CN=system:node:{KUBELET_NODE_NAME}"
        )
        serving_crt, serving_key = issue(
            pki, "kubelet-serving", f"/CN={KUBELET_NODE_NAME}",
            f"subjectAltName=IP:{GATEWAY},DNS:{KUBELET_NODE_NAME}",
        )  # fmt: skip
        kubeconfig = self.state / "kubelet.kubeconfig"
        kubeconfig.write_text(
            json.dumps(
                {
                    "apiVersion": "v1",
                    "kind": "Config",
                    "clusters": [
                        {
                            "name": "etj-local",
                            "cluster": {
                                "server": self.cluster.server,
                                "certificate-authority": str(pki.ca_crt),
                            },
                        }
                    ],
                    "users": [
                        {
                            "name": "kubelet",
                            "user": {
                                "client-certificate": str(client_crt),
                                "client-key": str(client_key),
                            },
                        }
                    ],
                    "contexts": [
                        {"name": "kubelet", "context": {"cluster": "etj-local", "user": "kubelet"}}
                    ],
                    "current-context": "kubelet",
                }
            )
        )
        config = {
            "apiVersion": "kubelet.config.k8s.io/v1beta1",
            "kind": "KubeletConfiguration",
            "address": GATEWAY,
            "readOnlyPort": 0,
            "healthzBindAddress": "127.0.0.1",
            "authentication": {
                "anonymous": {"enabled": False},
                "webhook": {"enabled": True},
                "x509": {"clientCAFile": str(pki.ca_crt)},
            },
            "authorization": {"mode": "Webhook"},
            "tlsCertFile": str(serving_crt),
            "tlsPrivateKeyFile": str(serving_key),
            "containerRuntimeEndpoint": f"unix://{self.sock}",
            "cgroupDriver": "cgroupfs",
            "failCgroupV1": False,
            "failSwapOn": False,
            "clusterDNS": [GATEWAY],
            "clusterDomain": CLUSTER_DOMAIN,
            "resolvConf": str(self._resolv_conf()),
            # A shared development machine: never evict for its disk, never GC images.
            "evictionHard": {
                "memory.available": "100Mi",
                "nodefs.available": "1%",
                "imagefs.available": "1%",
                "nodefs.inodesFree": "1%",
            },
            "imageGCHighThresholdPercent": 100,
            "imageGCLowThresholdPercent": 99,
            "serializeImagePulls": False,
        }
        (self.state / "kubelet.json").write_text(json.dumps(config, indent=2))
        self._spawn(
            "kubelet",
            [
                str(self.cluster.bin_dir / "kubelet"),
                f"--config={self.state / 'kubelet.json'}",
                f"--kubeconfig={kubeconfig}",
                f"--root-dir={self.run_dir / 'kubelet'}",
                f"--cert-dir={self.state / 'kubelet-certs'}",
                f"--hostname-override={KUBELET_NODE_NAME}",
                f"--node-ip={GATEWAY}",
                "--v=1",
            ],
        )

    def _resolv_conf(self) -> Path:
        # Pods with dnsPolicy Default get this; no upstream resolver is reachable here.
        path = self.state / "resolv.conf"
        path.write_text(f"nameserver {GATEWAY}\n")
        return path

    def _check_alive(self) -> None:
        for name, proc in self.procs.items():
            if proc.popen.poll() is not None:
                raise NodeError(
                    f"{name} exited with {proc.exit_code}\n{self.cluster.log_tail(name)}"
                )

    def _wait_ready(self, deadline: float) -> None:
        while time.monotonic() < deadline:
            self._check_alive()
            got = self.cluster.kubectl(
                "get", "node", KUBELET_NODE_NAME, "-o",
                'jsonpath={.status.conditions[?(@.type=="Ready")].status}', check=False,
            )  # fmt: skip
            if got.stdout == "True":
                # The node-lifecycle controller (off in the local cluster) would lift it.
                self.cluster.kubectl(
                    "taint", "node", KUBELET_NODE_NAME,
                    "node.kubernetes.io/not-ready:NoSchedule-", check=False,
                )  # fmt: skip
                return
            time.sleep(0.5)  # poll interval of a deadline-bounded wait
        raise NodeError(
            f"the kubelet's node is not Ready in time\n{self.cluster.log_tail('kubelet')}"
        )

    # ---- stop ----------------------------------------------------------------------------

    def stop(self, grace: float = 10.0) -> None:
        """Remove everything ``start()`` made, in reverse; each step runs whatever failed."""
        for name in ("kubelet", "coredns"):
            if name in self.procs:
                self.procs.pop(name).stop(grace=grace)
        if "containerd" in self.procs:
            for task in self._ctr("tasks", "ls", "-q", check=False).stdout.split():
                self._ctr("tasks", "kill", "-s", "SIGKILL", task, check=False)
            for task in self._ctr("tasks", "ls", "-q", check=False).stdout.split():
                self._ctr("tasks", "delete", "-f", task, check=False)
            for ctr in self._ctr("containers", "ls", "-q", check=False).stdout.split():
                self._ctr("containers", "delete", ctr, check=False)
            self.procs.pop("containerd").stop(grace=grace)
        self._kill_leftovers()
        for point in _mounts_under([self.state, self.store, self.run_dir]):
            _run("umount", "-l", point, check=False)
        # Only after the unmounts: never remove files through a mount.
        shutil.rmtree(self.run_dir, ignore_errors=True)
        with contextlib.suppress(OSError):
            self.run_dir.parent.rmdir()  # only when no other node's is left
        if NETNS_DIR.exists():
            for ns in set(os.listdir(NETNS_DIR)) - self.netns_before:
                if ns.startswith("cni-"):
                    _run("ip", "netns", "delete", ns, check=False)
        for cg in _cgroup_dirs():
            with contextlib.suppress(OSError):
                cg.rmdir()
        _remove_chains()
        _run("ip", "link", "delete", BRIDGE, check=False)

    def leftovers(self) -> list[str]:
        """What a stopped node must not leave behind, named; empty when nothing is left:
        containerd, shim, kubelet or CoreDNS processes, the socket directory, the bridge,
        mounts under its directories, its and the kubelet's iptables chains, kubepods
        cgroups."""
        found = [f"process {pid}" for pid in processes_naming(self.state, self.run_dir)]
        if self.run_dir.exists():
            found.append(f"socket directory {self.run_dir}")
        if _run("ip", "link", "show", BRIDGE, check=False).returncode == 0:
            found.append(f"bridge {BRIDGE}")
        found += [f"mount {m}" for m in _mounts_under([self.state, self.store, self.run_dir])]
        found += leftover_rules()
        found += [f"cgroup {c}" for c in _cgroup_dirs()]
        return found

    def _kill_leftovers(self) -> None:
        """SIGKILL every process naming this node's directories: containerd's shims, which
        outlive it by design, and whatever a killed supervisor left (kubelet, containerd,
        CoreDNS). Containers die with their shim's SIGKILLed tasks above."""
        for procs in CGROUP_ROOT.glob("*/kubepods*/**/cgroup.procs"):
            for member in procs.read_text().split():  # every container of every pod
                with contextlib.suppress(ProcessLookupError):
                    os.kill(int(member), 9)
        for pid in processes_naming(self.state, self.run_dir):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, 9)

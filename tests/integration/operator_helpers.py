"""Run the real operator as a separate process, and play the kubelet's part for its pods.

There is no kubelet on the local cluster (until the process-backed node runs pods), so
``KubeletStandIn`` does what a kubelet does to the API: marks scheduled pods Running,
writes a container's termination when a test says a replica exits, and confirms the
deletion of terminating pods (the final grace-0 delete). Everything goes through the real
API server.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from etj.local.launch import free_port, processes_under
from etj_testcluster import LocalCluster

from .conftest import wait_for

ETJ = str(Path(sys.executable).parent / "etj")


class OperatorProcess:
    """``etj operator`` watching one namespace, with its log in a file."""

    def __init__(
        self,
        cluster: LocalCluster,
        namespace: str,
        log: Path,
        extra: tuple[str, ...] = (),
        kubeconfig: Path | None = None,
        kubeconfig_flag: bool = False,
    ):
        """``kubeconfig_flag``: pass ``--kubeconfig`` with no KUBECONFIG in the environment."""
        self.cluster = cluster
        self.kubeconfig_flag = kubeconfig_flag
        self.kubeconfig = kubeconfig or cluster.kubeconfig
        self.namespace = namespace
        self.log = log
        self.extra = extra
        self.metrics_port = free_port()
        self.liveness_port = free_port()
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> OperatorProcess:
        env = {**os.environ, "KUBECONFIG": str(self.kubeconfig)}
        flags: list[str] = []
        if self.kubeconfig_flag:
            del env["KUBECONFIG"]
            flags = ["--kubeconfig", str(self.kubeconfig)]
        with open(self.log, "ab") as out:
            self.proc = subprocess.Popen(
                [
                    ETJ,
                    "operator",
                    "--namespace",
                    self.namespace,
                    "--liveness",
                    f"http://127.0.0.1:{self.liveness_port}/healthz",
                    "--metrics-port",
                    str(self.metrics_port),
                    "--resync-seconds",
                    "5",
                    "--progress-seconds",
                    "1",
                    "--log-format",
                    "plain",
                    *flags,
                    *self.extra,
                ],
                env=env,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        wait_for(self._live, 120, "the operator's liveness endpoint")
        return self

    def _live(self) -> bool:
        import urllib.request

        assert self.proc is not None
        if self.proc.poll() is not None:
            raise AssertionError(f"operator exited with {self.proc.returncode}:\n{self.tail()}")
        try:
            with urllib.request.urlopen(
                f"http://127.0.0.1:{self.liveness_port}/healthz", timeout=1
            ) as r:
                return bool(r.status == 200)
        except OSError:
            return False

    def kill(self) -> None:
        """SIGKILL: the operator gets no chance to clean up (as when its pod is evicted)."""
        if self.proc and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=120)

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=120)
            except subprocess.TimeoutExpired:
                self.kill()

    def metrics(self) -> str:
        import urllib.request

        # A deadline on the answer of a live process, not a speed: at a load of 30 a
        # standby's first scrape took over 2 s (CI of 488f3d2), and the callers poll this
        # under their own deadlines.
        with urllib.request.urlopen(
            f"http://127.0.0.1:{self.metrics_port}/metrics", timeout=60
        ) as r:
            return str(r.read().decode())

    def memory_bytes(self, field: str = "VmHWM") -> int:
        """The operator process's memory from /proc: VmHWM, its peak resident set since
        start, or VmRSS, its resident set now."""
        assert self.proc is not None
        for line in Path(f"/proc/{self.proc.pid}/status").read_text().splitlines():
            if line.startswith(f"{field}:"):
                return int(line.split()[1]) * 1024
        raise AssertionError(f"no {field} in /proc/{self.proc.pid}/status")

    def tail(self, lines: int = 60) -> str:
        return (
            "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])
            if self.log.exists()
            else ""
        )


@contextlib.contextmanager
def process_node(cluster: LocalCluster, state: Path, namespaces: list[str], log: Path) -> Any:
    """The process-backed node (``etj_testcluster.process_node``) serving ``namespaces``; on exit
    it is stopped and nothing it started may outlive it."""
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "etj_testcluster.process_node",
            "--kubeconfig",
            str(cluster.kubeconfig),
            "--state-dir",
            str(state),
            *(arg for ns in namespaces for arg in ("--namespace", ns)),
        ],
        stdout=open(log, "wb"),  # noqa: SIM115 - the child keeps it
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    try:
        yield state
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=120)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
        # Nothing the node started outlives it: no process still works under its state dir.
        wait_for(lambda: not processes_under(state), 120, "the node's processes to end")


class KubeletStandIn:
    """Writes pod status as a kubelet would, for the pods of one namespace."""

    def __init__(self, cluster: LocalCluster, namespace: str, run_pods: bool = True):
        from kubernetes import client

        from etj.controller.kube import load_config

        self.namespace = namespace
        self.core = client.CoreV1Api(load_config(str(cluster.kubeconfig)))
        self.run_pods = run_pods
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)
        self.metrics_address: str | None = None
        # A node whose kubelet stopped answering: its pods get no status and no deletion
        # is confirmed for them.
        self.lost_node: str | None = None

    def __enter__(self) -> KubeletStandIn:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=5)

    def _loop(self) -> None:
        while not self._stop.wait(0.2):  # the kubelet's sync period, shortened
            # The API may be briefly unavailable; the next sync retries.
            with contextlib.suppress(Exception):
                self.sync()

    def sync(self) -> None:
        for pod in self.core.list_namespaced_pod(self.namespace).items:
            name = pod.metadata.name
            if self.lost_node is not None and pod.spec.node_name == self.lost_node:
                continue
            if pod.metadata.deletion_timestamp is not None:
                self._confirm_deletion(name)
            elif self.run_pods and pod.status.phase == "Pending" and pod.spec.node_name:
                self.set_running(name)
            if self.metrics_address and name.endswith("-chief-0"):
                annotations = pod.metadata.annotations or {}
                if annotations.get("training.etj.dev/metrics-address") != self.metrics_address:
                    body = {
                        "metadata": {
                            "annotations": {
                                "training.etj.dev/metrics-address": self.metrics_address
                            }
                        }
                    }
                    self.core.patch_namespaced_pod(name, self.namespace, body)

    def _confirm_deletion(self, name: str) -> None:
        from kubernetes.client.rest import ApiException

        try:
            self.core.delete_namespaced_pod(name, self.namespace, grace_period_seconds=0)
        except ApiException as exc:
            if exc.status != 404:
                raise

    def _patch_status(self, name: str, status: dict[str, Any]) -> None:
        self.core.patch_namespaced_pod_status(name, self.namespace, {"status": status})

    def set_running(self, name: str) -> None:
        self._patch_status(
            name,
            {
                "phase": "Running",
                "podIP": "127.0.0.1",
                "conditions": [{"type": "Ready", "status": "True"}],
                "containerStatuses": [_container(running=True)],
            },
        )

    def terminate(
        self, name: str, exit_code: int, reason: str = "Error", message: str | None = None
    ) -> None:
        """The replica's process exited: phase and container state as a kubelet writes them
        (``message``: what it wrote to its termination log)."""
        self._patch_status(
            name,
            {
                "phase": "Succeeded" if exit_code == 0 else "Failed",
                "conditions": [{"type": "Ready", "status": "False"}],
                "containerStatuses": [
                    _container(running=False, exit_code=exit_code, reason=reason, message=message)
                ],
            },
        )


def _utc(offset_seconds: float) -> str:
    t = datetime.now(UTC) + timedelta(seconds=offset_seconds)
    return t.strftime("%Y-%m-%dT%H:%M:%SZ")


def utc_now() -> str:
    """Now as the API server writes times (RFC 3339, whole seconds): they compare as text."""
    return _utc(0)


def _container(
    running: bool, exit_code: int = 0, reason: str = "", message: str | None = None
) -> dict[str, Any]:
    state: dict[str, Any] = (
        {"running": {"startedAt": "2026-01-01T00:00:00Z"}}
        if running
        else {
            "terminated": {
                "exitCode": exit_code,
                "reason": reason,
                # Now, as a kubelet writes it: the operator counts one fault once by when
                # each container ended (a fixed past time would make every failure after
                # the first look like part of it).
                "startedAt": _utc(-1),
                "finishedAt": _utc(0),
                **({"message": message} if message else {}),
            }
        }
    )
    return {
        "name": "trainer",
        "ready": running,
        "restartCount": 0,
        "image": "etj-trainer",
        "imageID": "",
        "state": state,
    }


def ps_job(name: str, workers: int = 2, ps: int = 1, **spec: Any) -> dict[str, Any]:
    """A small ParameterServer job (one table of 1000 x 8) named ``name``."""
    return {
        "apiVersion": "training.etj.dev/v1alpha1",
        "kind": "EmbeddingTrainingJob",
        "metadata": {"name": name},
        "spec": {
            "strategy": "ParameterServer",
            "replicas": {"worker": {"replicas": workers}, "ps": {"replicas": ps}},
            "model": {"embeddings": [{"name": "user_id", "vocabularySize": 1000, "dimension": 8}]},
            # Several pods share checkpoints; with the stand-in kubelet nothing is written.
            "checkpoint": {"uri": "/shared/etj-checkpoints"},
            **spec,
        },
    }


def ps_job_pods(name: str, workers: int = 2, ps: int = 1) -> set[str]:
    """The pods of ``ps_job(name, workers, ps)``: a chief, the workers, the ps."""
    return (
        {f"{name}-chief-0"}
        | {f"{name}-worker-{i}" for i in range(workers)}
        | {f"{name}-ps-{i}" for i in range(ps)}
    )


def job_status(cluster: LocalCluster, namespace: str, name: str) -> dict[str, Any]:
    out = cluster.kubectl("get", "etj", name, "-n", namespace, "-o", "json", check=False)
    if out.returncode != 0:
        return {}
    return dict(json.loads(out.stdout).get("status") or {})


def pods(cluster: LocalCluster, namespace: str) -> dict[str, dict[str, Any]]:
    items = json.loads(cluster.kubectl("get", "pods", "-n", namespace, "-o", "json").stdout)[
        "items"
    ]
    return {p["metadata"]["name"]: p for p in items}


def live_pods(cluster: LocalCluster, namespace: str) -> dict[str, dict[str, Any]]:
    return {
        n: p
        for n, p in pods(cluster, namespace).items()
        if not p["metadata"].get("deletionTimestamp")
    }


def events(cluster: LocalCluster, namespace: str) -> list[dict[str, Any]]:
    """The Events posted on jobs in ``namespace``."""
    out = cluster.kubectl("get", "events", "-n", namespace, "-o", "json").stdout
    return [
        e
        for e in json.loads(out)["items"]
        if e["involvedObject"].get("kind") == "EmbeddingTrainingJob"
    ]

"""A process-backed node: plays kubelet for the local cluster by running pods as processes.

For every pod bound to the node (in the namespaces it serves) it:
- maps volumes to directories — a ConfigMap volume becomes its files, an emptyDir a
  per-pod directory, a PersistentVolumeClaim a directory per claim shared by all pods
  that mount it (so checkpoints outlive a pod, as on a real cluster);
- maps every peer in TF_CONFIG (``<pod>.<job>.<ns>.svc:port``) to a loopback port, the
  same port for the same name across pods, and gives a chief its own metrics port
  (annotated on the pod as ``training.etj.dev/metrics-address`` for the operator);
- starts the container's command (a leading ``python`` is this interpreter) with the
  pod's environment and what it can honour of its securityContext
  (``etj.localcluster.pod_security``: runAsNonRoot refused as a kubelet refuses it, no
  privilege escalation, no capabilities), writes Running, then Succeeded/Failed with the exit code (137 for a
  SIGKILL, as a kubelet reports it);
- on deletion, stops the process (SIGTERM, then SIGKILL after the grace period) and
  confirms the deletion.

Processes die with the node (PR_SET_PDEATHSIG). Run: ``python -m etj.localcluster.node
--kubeconfig K --state-dir D [--namespace NS ...]``.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import sys
import threading
import time
from pathlib import Path
from typing import Any

from kubernetes import client
from kubernetes.client.rest import ApiException

from etj.k8s import load_config
from etj.local.process import pod_process
from etj.local.procs import Proc, free_port, start
from etj.localcluster.cluster import NODE_NAME
from etj.localcluster.pod_security import REFUSED_REASON, Refused, process_security

ANNOTATION_METRICS = "training.etj.dev/metrics-address"
ANNOTATION_PID = "training.etj.dev/local-pid"


class ProcessNode:
    def __init__(
        self,
        api: client.ApiClient,
        state_dir: Path,
        namespaces: list[str],
        python: str = sys.executable,
    ):
        self.core = client.CoreV1Api(api)
        self.state = state_dir
        self.namespaces = namespaces
        self.python = python
        self.procs: dict[str, Proc] = {}  # pod uid -> process
        self.ports: dict[str, int] = {}  # peer DNS name -> loopback port
        self.refused: set[str] = set()  # uids of pods whose container a kubelet would refuse
        self._stop = threading.Event()

    # ---- the sync loop -----------------------------------------------------------------

    def run(self) -> None:
        while not self._stop.wait(0.25):  # the node's sync period
            try:
                self.sync()
            except ApiException as exc:  # the API server may be briefly away: next sync
                print(
                    f"etj-node: sync failed: {exc.status} {exc.reason}", file=sys.stderr, flush=True
                )

    def stop(self) -> None:
        self._stop.set()
        for proc in self.procs.values():
            proc.stop(grace=5)

    def _pods(self) -> list[Any]:
        if self.namespaces:
            return [p for ns in self.namespaces for p in self.core.list_namespaced_pod(ns).items]
        return list(self.core.list_pod_for_all_namespaces().items)

    def sync(self) -> None:
        for pod in self._pods():
            if pod.spec.node_name != NODE_NAME:
                continue
            uid = pod.metadata.uid
            proc = self.procs.get(uid)
            if pod.metadata.deletion_timestamp is not None:
                self._delete(pod, proc)
            elif proc is None and pod.status.phase == "Pending" and uid not in self.refused:
                self._start(pod)
            elif (
                proc is not None
                and not proc.stopping
                and proc.exit_code is not None
                and pod.status.phase == "Running"
            ):
                self._finished(pod, proc.exit_code, proc.termination_message())

    # ---- pod lifecycle -----------------------------------------------------------------

    def _start(self, pod: Any) -> None:
        raw = self.core.api_client.sanitize_for_serialization(pod)
        ns, name, uid = pod.metadata.namespace, pod.metadata.name, pod.metadata.uid
        try:
            security = process_security(raw, os.geteuid())
        except Refused as why:
            self.refused.add(uid)
            self._waiting(ns, name, REFUSED_REASON, str(why))
            return
        volumes = self._volumes(raw)
        spec = pod_process(raw, volumes)
        command = [
            self.python
            if spec.command and spec.command[0] in ("python", "python3")
            else spec.command[0],
            *spec.command[1:],
        ]
        env = {**os.environ, **spec.env}
        if "TF_CONFIG" in env:
            env["TF_CONFIG"] = self._map_tf_config(env["TF_CONFIG"])
        annotations: dict[str, str] = {}
        ports = [p.get("name") for p in raw["spec"]["containers"][0].get("ports") or []]
        if "metrics" in ports:
            port = free_port()
            env["ETJ_METRICS_PORT"] = str(port)
            annotations[ANNOTATION_METRICS] = f"127.0.0.1:{port}"
        workdir = self.state / "pods" / uid
        workdir.mkdir(parents=True, exist_ok=True)
        proc = start(
            name,
            command,
            env,
            self.state / "logs" / ns / f"{name}.log",
            workdir,
            no_new_privs=security.no_new_privs,
            drop_capabilities=security.drop_capabilities,
        )
        self.procs[uid] = proc
        annotations[ANNOTATION_PID] = str(proc.popen.pid)
        self.core.patch_namespaced_pod(name, ns, {"metadata": {"annotations": annotations}})
        self._status(ns, name, "Running", running=True)

    def _finished(self, pod: Any, code: int, message: str | None) -> None:
        reason = "Completed" if code == 0 else "Error"
        self._status(
            pod.metadata.namespace,
            pod.metadata.name,
            "Succeeded" if code == 0 else "Failed",
            running=False,
            exit_code=code,
            reason=reason,
            message=message,
        )

    def _delete(self, pod: Any, proc: Proc | None) -> None:
        if proc is not None and proc.exit_code is None:
            grace = pod.spec.termination_grace_period_seconds or 30
            threading.Thread(
                target=proc.stop, kwargs={"grace": min(grace, 30)}, daemon=True
            ).start()
            proc.stopping = True
            return
        if proc is not None and proc.popen.poll() is None:
            return  # still stopping
        self.procs.pop(pod.metadata.uid, None)
        try:
            self.core.delete_namespaced_pod(
                pod.metadata.name, pod.metadata.namespace, grace_period_seconds=0
            )
        except ApiException as exc:
            if exc.status != 404:
                raise

    def _waiting(self, ns: str, name: str, reason: str, message: str) -> None:
        """The container was not created: the pod stays Pending, as a kubelet leaves it."""
        waiting = {"waiting": {"reason": reason, "message": message}}
        container = {"name": "trainer", "ready": False, "restartCount": 0}
        container |= {"image": "local", "imageID": "", "state": waiting}
        self.core.patch_namespaced_pod_status(
            name, ns, {"status": {"phase": "Pending", "containerStatuses": [container]}}
        )

    def _status(
        self,
        ns: str,
        name: str,
        phase: str,
        running: bool,
        exit_code: int = 0,
        reason: str = "",
        message: str | None = None,
    ) -> None:
        now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        state: dict[str, Any] = (
            {"running": {"startedAt": now}}
            if running
            else {
                "terminated": {
                    "exitCode": exit_code,
                    "reason": reason,
                    "finishedAt": now,
                    "startedAt": now,
                    **({"message": message} if message else {}),
                }
            }
        )
        body = {
            "status": {
                "phase": phase,
                "podIP": "127.0.0.1",
                "hostIP": "127.0.0.1",
                "conditions": [
                    {
                        "type": "Ready",
                        "status": "True" if running else "False",
                        "lastTransitionTime": now,
                    }
                ],
                "containerStatuses": [
                    {
                        "name": "trainer",
                        "ready": running,
                        "restartCount": 0,
                        "image": "local",
                        "imageID": "",
                        "state": state,
                    }
                ],
            }
        }
        self.core.patch_namespaced_pod_status(name, ns, body)

    # ---- mapping -----------------------------------------------------------------------

    def _volumes(self, pod: dict[str, Any]) -> dict[str, str]:
        ns, uid = pod["metadata"]["namespace"], pod["metadata"]["uid"]
        out: dict[str, str] = {}
        config_maps: list[tuple[Path, str]] = []
        for v in pod["spec"].get("volumes") or []:
            if "configMap" in v:
                d = self.state / "pods" / uid / "volumes" / v["name"]
                config_maps.append((d, v["configMap"]["name"]))
            elif "persistentVolumeClaim" in v:
                d = self.state / "pvc" / ns / v["persistentVolumeClaim"]["claimName"]
            elif "hostPath" in v:
                d = Path(v["hostPath"]["path"])
            else:  # emptyDir and anything else: the pod's own directory
                d = self.state / "pods" / uid / "volumes" / v["name"]
            d.mkdir(parents=True, exist_ok=True)
            out[v["name"]] = str(d)
        # Files in a ConfigMap name container paths (the trainer config's checkpoint
        # directory): rewrite them to this node's directories, as the mounts would make them.
        container = pod["spec"]["containers"][0]
        mounts = {
            m["mountPath"].rstrip("/"): out[m["name"]]
            for m in container.get("volumeMounts") or []
            if m["name"] in out
        }
        for d, name in config_maps:
            for key, text in (self.core.read_namespaced_config_map(name, ns).data or {}).items():
                (d / key).write_text(_map_paths(text, mounts))
        return out

    def _map_tf_config(self, raw: str) -> str:
        doc = json.loads(raw)
        for role, addresses in doc.get("cluster", {}).items():
            doc["cluster"][role] = [self._loopback(a) for a in addresses]
        return json.dumps(doc)

    def _loopback(self, address: str) -> str:
        host = address.rsplit(":", 1)[0]
        if host not in self.ports:
            self.ports[host] = free_port()
        return f"127.0.0.1:{self.ports[host]}"


def _map_paths(text: str, mounts: dict[str, str]) -> str:
    """Replace container mount paths (whole path prefixes) by local directories, in one
    pass: a replacement is never rewritten again by a shorter mount (``/tmp``)."""
    if not mounts:
        return text
    ordered = sorted(mounts, key=len, reverse=True)
    pattern = re.compile("(?:" + "|".join(re.escape(m) for m in ordered) + r')(?=[/"\s]|$)')
    return pattern.sub(lambda m: mounts[m.group(0)], text)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="etj-node")
    parser.add_argument("--kubeconfig", required=True)
    parser.add_argument("--state-dir", required=True)
    parser.add_argument("--namespace", action="append", default=[])
    args = parser.parse_args(argv)
    node = ProcessNode(load_config(args.kubeconfig), Path(args.state_dir), args.namespace)
    signal.signal(signal.SIGTERM, lambda *_: node._stop.set())
    try:
        node.run()
    finally:
        node.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())

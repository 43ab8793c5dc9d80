"""A process-backed node: plays kubelet for the local cluster by running pods as processes.

For every pod bound to the node (in the namespaces it serves) it:
- maps volumes to directories — a ConfigMap volume becomes its files (``data`` and
  ``binaryData``; etj's trainer config with container paths rewritten to these
  directories, a custom tower's code as it is), an emptyDir a
  per-pod directory, a PersistentVolumeClaim a directory per claim shared by all pods
  that mount it (so checkpoints outlive a pod, as on a real cluster);
- maps every peer in TF_CONFIG (``<pod>.<job>.<ns>.svc:port``) to a loopback port, the
  same port for the same name across pods, and gives a chief its own metrics port
  (annotated on the pod as ``training.etj.dev/metrics-address`` for the operator);
- starts the container's command (a leading ``python`` is this interpreter; with no
  command, the entrypoint of the etj image it names, from this installation) with the
  pod's environment and what it can honour of its securityContext
  (``etj_testcluster.pod_security``: runAsNonRoot refused as a kubelet refuses it, no
  privilege escalation, no capabilities), writes Running, then Succeeded/Failed with the
  exit code (137 for a SIGKILL, as a kubelet reports it); a ``restartPolicy: Always`` pod
  (a Deployment's, such as the chart's operator) is started again instead, after a
  doubling back-off;
- gives a pod that is not a training replica its service account as a kubelet would:
  a bound token from the TokenRequest API, in a kubeconfig named by ``KUBECONFIG`` (a
  process cannot have ``/var/run/secrets``), so the chart's operator runs under the
  chart's own RBAC;
- on deletion, stops the process (SIGTERM, then SIGKILL after the grace period) and
  confirms the deletion.

Processes die with the node (PR_SET_PDEATHSIG). Run: ``python -m etj_testcluster.process_node
--kubeconfig K --state-dir D [--namespace NS ...]``.
"""

from __future__ import annotations

import argparse
import base64
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

from etj.api.constants import (
    ANNOTATION_METRICS_ADDRESS,
    CONTAINER_NAME,
    LABEL_REPLICA_TYPE,
    METRICS_PORT_ENV,
    METRICS_PORT_NAME,
    TF_CONFIG_ENV,
    VOLUME_MODEL_CODE,
)
from etj.api.status import PodPhase
from etj.controller.kube import load_config
from etj.local.launch import Proc, free_port, start
from etj.local.pod_process import pod_process
from etj_testcluster.cluster import NODE_NAME
from etj_testcluster.pod_security import REFUSED_REASON, Refused, process_security

ANNOTATION_PID = "training.etj.dev/local-pid"
# The entrypoints of etj's images (their Dockerfiles' ENTRYPOINT), run from this
# installation: the node runs etj's images, not arbitrary ones.
IMAGE_ENTRYPOINTS = {
    "etj-operator": [str(Path(sys.executable).with_name("etj"))],
    "etj-trainer": ["python", "-m", "etj_trainer"],
}
# A restarted container's back-off doubles from the first to the cap (a kubelet: 10 s to
# 5 min; shorter here, where a crash is usually a test's doing).
RESTART_BACKOFF = (1.0, 30.0)
TOKEN_SECONDS = 24 * 3600


def image_entrypoint(image: str) -> list[str] | None:
    """The entrypoint of an etj image (``registry/etj-operator:tag`` -> ``etj``), else None."""
    name = image.rsplit("/", 1)[-1].split("@", 1)[0].split(":", 1)[0]
    return IMAGE_ENTRYPOINTS.get(name)


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
        self.restarts: dict[str, int] = {}  # pod uid -> container restarts
        self.waiting: dict[str, float] = {}  # pod uid -> when its container restarts
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
            elif proc is None and pod.status.phase == PodPhase.PENDING and uid not in self.refused:
                self._start(pod)
            elif (
                proc is not None
                and not proc.stopping
                and proc.exit_code is not None
                and pod.status.phase == PodPhase.RUNNING
            ):
                if pod.spec.restart_policy == "Always":
                    self._restart(pod)
                else:
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
        container = raw["spec"]["containers"][0]
        entrypoint = None if container.get("command") else image_entrypoint(container["image"])
        if not container.get("command") and entrypoint is None:
            self._status(
                ns,
                name,
                PodPhase.FAILED.value,
                running=False,
                exit_code=128,
                reason="ImageNotRunnable",
                message=f"this process-backed node runs the commands of pods and the "
                f"entrypoints of etj's images only; {container['image']} gives neither",
            )
            return
        spec = pod_process(raw, volumes, entrypoint)
        command = [
            self.python if spec.command[0] in ("python", "python3") else spec.command[0],
            *spec.command[1:],
        ]
        workdir = self.state / "pods" / uid
        workdir.mkdir(parents=True, exist_ok=True)
        env = {**os.environ, **spec.env}
        if LABEL_REPLICA_TYPE not in (raw["metadata"].get("labels") or {}):
            # Training replicas never call the API; anything else gets its account.
            env.update(self._service_account(raw, workdir))
        if TF_CONFIG_ENV in env:
            env[TF_CONFIG_ENV] = self._map_tf_config(env[TF_CONFIG_ENV])
        annotations: dict[str, str] = {}
        ports = [p.get("name") for p in raw["spec"]["containers"][0].get("ports") or []]
        if METRICS_PORT_NAME in ports:
            port = free_port()
            env[METRICS_PORT_ENV] = str(port)
            annotations[ANNOTATION_METRICS_ADDRESS] = f"127.0.0.1:{port}"
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
        self._status(
            ns,
            name,
            PodPhase.RUNNING.value,
            running=True,
            container=container["name"],
            restarts=self.restarts.get(uid, 0),
        )

    def _restart(self, pod: Any) -> None:
        """A ``restartPolicy: Always`` container ended: start it again once its back-off
        has passed (the pod stays Running; its restartCount grows)."""
        uid, now = pod.metadata.uid, time.monotonic()
        count = self.restarts.get(uid, 0)
        first, cap = RESTART_BACKOFF
        due = self.waiting.setdefault(uid, now + min(cap, first * 2**count))
        if now < due:
            return
        del self.waiting[uid]
        self.restarts[uid] = count + 1
        self.procs.pop(uid, None)
        self._start(pod)

    def _service_account(self, raw: dict[str, Any], workdir: Path) -> dict[str, str]:
        """``KUBECONFIG`` for the pod's service account (a bound token, as a kubelet
        projects one), unless the pod opts out of it."""
        spec, meta = raw["spec"], raw["metadata"]
        if spec.get("automountServiceAccountToken") is False:
            return {}
        request = client.AuthenticationV1TokenRequest(
            spec=client.V1TokenRequestSpec(
                audiences=[],
                expiration_seconds=TOKEN_SECONDS,
                bound_object_ref=client.V1BoundObjectReference(
                    api_version="v1", kind="Pod", name=meta["name"], uid=meta["uid"]
                ),
            )
        )
        issued = self.core.create_namespaced_service_account_token(
            spec.get("serviceAccountName") or "default", meta["namespace"], request
        ).status
        if issued is None:  # the API always answers with one; the client's type says maybe
            raise RuntimeError(f"no token issued for pod {meta['name']}")
        token = issued.token
        cfg = self.core.api_client.configuration
        doc = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [
                {
                    "name": "local",
                    "cluster": {"server": cfg.host, "certificate-authority": cfg.ssl_ca_cert},
                }
            ],
            "users": [{"name": "pod", "user": {"token": token}}],
            "contexts": [
                {
                    "name": "pod",
                    "context": {"cluster": "local", "user": "pod", "namespace": meta["namespace"]},
                }
            ],
            "current-context": "pod",
        }
        path = workdir / "serviceaccount.kubeconfig"
        path.write_text(json.dumps(doc))
        path.chmod(0o600)
        return {"KUBECONFIG": str(path)}

    def _finished(self, pod: Any, code: int, message: str | None) -> None:
        reason = "Completed" if code == 0 else "Error"
        self._status(
            pod.metadata.namespace,
            pod.metadata.name,
            (PodPhase.SUCCEEDED if code == 0 else PodPhase.FAILED).value,
            running=False,
            exit_code=code,
            reason=reason,
            message=message,
            container=pod.spec.containers[0].name,
            restarts=self.restarts.get(pod.metadata.uid, 0),
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
        if (
            proc is not None
            and pod.metadata.finalizers
            and pod.status.phase not in (PodPhase.SUCCEEDED, PodPhase.FAILED)
        ):
            # A finalizer (Kueue's) keeps the pod after the deletion is confirmed: its end
            # is written first, as a kubelet writes it (a pod without one is gone at once).
            self._finished(pod, proc.exit_code or 0, proc.termination_message())
        self.procs.pop(pod.metadata.uid, None)
        self.restarts.pop(pod.metadata.uid, None)
        self.waiting.pop(pod.metadata.uid, None)
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
            name,
            ns,
            {"status": {"phase": PodPhase.PENDING.value, "containerStatuses": [container]}},
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
        container: str = CONTAINER_NAME,
        restarts: int = 0,
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
                        "name": container,
                        "ready": running,
                        "restartCount": restarts,
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
        config_maps: list[tuple[Path, str, str]] = []
        for v in pod["spec"].get("volumes") or []:
            if "configMap" in v:
                d = self.state / "pods" / uid / "volumes" / v["name"]
                config_maps.append((d, v["configMap"]["name"], v["name"]))
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
        for d, name, volume in config_maps:
            cm = self.core.read_namespaced_config_map(name, ns)
            for key, text in (cm.data or {}).items():
                # etj's trainer config is rewritten; a user's files (a custom tower's
                # code) are theirs, written as they are.
                (d / key).write_text(
                    text if volume == VOLUME_MODEL_CODE else _map_paths(text, mounts)
                )
            for key, data in (cm.binary_data or {}).items():
                (d / key).write_bytes(base64.b64decode(data))
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
    pass: a replacement is never rewritten again by a shorter mount (``/tmp``), and a
    mount path inside a longer path (``/tmp`` in ``/var/tmp/...``) is not one."""
    if not mounts:
        return text
    ordered = sorted(mounts, key=len, reverse=True)
    pattern = re.compile(
        r'(?<![^"\s=:,\[])(?:' + "|".join(re.escape(m) for m in ordered) + r')(?=[/"\s]|$)'
    )
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

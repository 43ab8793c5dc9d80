"""The kind suites' shared helpers (test_kind.py, test_chaos.py, tests/e2e/chaos_driver.py):
the cluster's kubectl and helm, the chart installed from the built images, the quickstart
job shaped for two cores, its gs:// variant on fake-gcs-server, jobs that follow files the
test lands on a shared claim, a watch of a job's pods, the private Docker engine's CLI, a
call in a background thread."""

from __future__ import annotations

import copy
import json
import os
import subprocess
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Generic, TypeVar

import yaml

from etj_testcluster.fake_gcs import GCS_HOSTS

from .conftest import CACHE, KIND_BIN_DIR, ROOT, sh, wait_for

RELEASE = "etj"
NS = "etj-system"
OPERATOR_IMAGE = os.environ.get("ETJ_E2E_OPERATOR_IMAGE", "localhost/etj-operator:dev")
TRAINER_IMAGE = os.environ.get("ETJ_E2E_TRAINER_IMAGE", "localhost/etj-trainer:dev")
# The host directory kind-config.yaml mounts into every node at /var/lib/etj-shared.
SHARED = Path("/tmp/etj-kind-shared")

# fake-gcs-server's Service address and bucket (tests/cluster/kind-fake-gcs.sh).
GCS_IP = "10.96.0.50"
GCS_BUCKET = "etj-ckpt"
CONTROL_PLANE = "node-role.kubernetes.io/control-plane"
# What a pod needs to reach fake-gcs-server as TensorFlow's GCS client (kind-fake-gcs.sh).
# (The CA under /var/lib: the chart's admission policy refuses a mount in /etc.)
GCS_CA_DIR = "/var/lib/etj-gcs"
GCS_ENV = [
    {"name": "CURL_CA_BUNDLE", "value": f"{GCS_CA_DIR}/ca.crt"},
    {"name": "NO_GCE_CHECK", "value": "true"},
    {"name": "GOOGLE_AUTH_TOKEN_FOR_TESTING", "value": "etj-fake-token"},
]


@dataclass
class Kind:
    kubeconfig: str
    marks: list[str] = field(default_factory=list)
    t0: float = field(default_factory=time.monotonic)

    def kubectl(self, *args: str, **kw: object) -> subprocess.CompletedProcess[str]:
        return sh(str(KIND_BIN_DIR / "kubectl"), f"--kubeconfig={self.kubeconfig}", *args, **kw)  # type: ignore[arg-type]

    def helm(self, *args: str, **kw: object) -> subprocess.CompletedProcess[str]:
        return sh(str(KIND_BIN_DIR / "helm"), f"--kubeconfig={self.kubeconfig}", *args, **kw)  # type: ignore[arg-type]

    def mark(self, what: str) -> None:
        """A timestamped milestone, printed as it happens: where the minutes go."""
        self.marks.append(f"{time.monotonic() - self.t0:6.1f}s {what}")
        print(self.marks[-1], flush=True)

    def apply(self, obj: dict | list[dict]) -> None:
        docs = obj if isinstance(obj, list) else [obj]
        self.kubectl("apply", "-f", "-", input=yaml.safe_dump_all(docs))

    def status(self, name: str) -> dict:
        got = self.kubectl("get", "etj", name, "-o", "json")
        return json.loads(got.stdout).get("status") or {}

    def phase(self, name: str) -> str | None:
        return self.status(name).get("phase")

    def progress(self, name: str, key: str) -> int:
        return int((self.status(name).get("progress") or {}).get(key) or 0)

    def node_of(self, pod: str) -> str:
        return self.kubectl("get", "pod", pod, "-o", "jsonpath={.spec.nodeName}").stdout

    def pod_state(self, pod: str) -> list[str]:
        """uid, phase and node of a pod (empty when it does not exist)."""
        return self.kubectl(
            "get", "pod", pod, "-o", "jsonpath={.metadata.uid} {.status.phase} {.spec.nodeName}",
            check=False,
        ).stdout.split()  # fmt: skip

    def events_of(self, pod: str) -> list[dict]:
        """The trainer's JSON log lines ({"event": ...}) of a pod's current container."""
        logs = self.kubectl("logs", pod, check=False).stdout.splitlines()
        return [json.loads(x) for x in logs if x.startswith("{")]

    def restored_step(self, pod: str) -> int | None:
        # The trainer logs {"event": "restored", "step": N} when it resumes a checkpoint.
        steps = [e["step"] for e in self.events_of(pod) if e.get("event") == "restored"]
        return steps[-1] if steps else None


def quickstart(name: str, steps: int, every: int) -> dict:
    """The README's quickstart (its checkpoint.storage claim gets the cluster's default
    class, etj-shared; the replicas of each role spread over the nodes), shorter, with one
    worker and small CPU requests: three jobs side by side on two cores, and all of a job
    on one node after the other is stopped."""
    job = yaml.safe_load((ROOT / "examples" / "quickstart.yaml").read_text())
    job["metadata"]["name"] = name
    job["spec"]["training"]["steps"] = steps
    job["spec"]["checkpoint"]["everySteps"] = every
    for role in ("chief", "worker"):
        job["spec"]["replicas"][role]["resources"]["requests"]["cpu"] = "100m"
    job["spec"]["replicas"]["ps"]["resources"]["limits"]["memory"] = "1Gi"
    job["spec"]["replicas"]["worker"]["replicas"] = 1
    # A stopped node's pods are evicted after 5 s of NotReady (the operator's default is 30).
    job["spec"]["placement"] = {"nodeLossSeconds": 5}
    # A new chief's first step can hang on a worker still in a step of the chief before it
    # (seen once: the gs:// job's chief killed just after its worker and a ps were replaced
    # on the other node); the watchdog then restarts the job. 300 s, not the default 600,
    # keeps that within this test's waits.
    job["spec"].setdefault("runPolicy", {})["watchdogSeconds"] = 300
    return job


def on_gcs(job: dict, prefix: str) -> dict:
    """The job with its checkpoints on gs:// (fake-gcs-server): every pod resolves the GCS
    host names to it and trusts its test CA."""
    job = copy.deepcopy(job)
    del job["spec"]["checkpoint"]["storage"]
    job["spec"]["checkpoint"]["uri"] = f"gs://{GCS_BUCKET}/{prefix}"
    job["spec"]["podTemplate"] = {"env": GCS_ENV}
    for replica in job["spec"]["replicas"].values():
        spec = replica.setdefault("template", {}).setdefault("spec", {})
        spec["hostAliases"] = [{"ip": GCS_IP, "hostnames": list(GCS_HOSTS)}]
        spec["volumes"] = [{"name": "gcs-ca", "configMap": {"name": "etj-gcs-ca"}}]
        mount = {"name": "gcs-ca", "mountPath": GCS_CA_DIR, "readOnly": True}
        spec["containers"] = [{"name": "trainer", "volumeMounts": [mount]}]
    return job


def back_elsewhere(k: Kind, pod: str, old_uid: str, away_from: str) -> bool:
    got = k.pod_state(pod)
    return len(got) == 3 and got[0] != old_uid and got[1] == "Running" and got[2] != away_from


@dataclass
class PodWatch:
    """Every version of a job's pods while it runs (``kubectl get -w`` into a file: a pipe
    nobody reads would stop it at 64 KiB): a container's terminated state is seen even
    when the operator replaces the pod at once."""

    proc: subprocess.Popen[bytes]
    out: Path

    @classmethod
    def start(cls, k: Kind, job_name: str, out: Path) -> PodWatch:
        with out.open("wb") as sink:
            proc = subprocess.Popen(
                [str(KIND_BIN_DIR / "kubectl"), f"--kubeconfig={k.kubeconfig}", "get", "pods",
                 "-w", "-l", f"training.etj.dev/job-name={job_name}", "-o", "json"],
                stdout=sink, stderr=subprocess.STDOUT, cwd=ROOT,
            )  # fmt: skip
        return cls(proc, out)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(timeout=120)

    def terminations(self) -> list[tuple[str, int, str]]:
        """(pod, exit code, reason) of every terminated container seen; stops the watch."""
        self.stop()
        text = self.out.read_text()
        found, decoder, at = [], json.JSONDecoder(), 0
        while (at := text.find("{", at)) >= 0:
            pod, at = decoder.raw_decode(text, at)
            for cs in (pod.get("status") or {}).get("containerStatuses") or []:
                for state in (cs.get("state") or {}, cs.get("lastState") or {}):
                    if done := state.get("terminated"):
                        found.append(
                            (pod["metadata"]["name"], done["exitCode"], done.get("reason"))
                        )
        return found


def docker(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "DOCKER_HOST": "unix:///run/etj-docker/docker.sock"}
    return subprocess.run(
        ["docker", *args], capture_output=True, text=True, check=check, env=env, timeout=300
    )


T = TypeVar("T")


class Background(Generic[T]):
    """One call in a daemon thread; ``result`` re-raises what it raised, in the test's
    thread. (Not ``concurrent.futures``: its worker threads are joined at interpreter exit,
    so a failed test would hold pytest's exit until the call's own waits ran out.)"""

    def __init__(self, call: Callable[[], T]) -> None:
        self._call = call
        self._out: list[T] = []
        self._err: list[BaseException] = []
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        try:
            self._out.append(self._call())
        except BaseException as exc:  # handed to the test's thread by result()
            self._err.append(exc)

    def start(self) -> Background[T]:
        self._thread.start()
        return self

    def result(self, timeout: float) -> T:
        self._thread.join(timeout)
        if self._thread.is_alive():
            raise AssertionError(f"still running after {timeout}s")
        if self._err:
            raise self._err[0]
        return self._out[0]


def install(kind: Kind, replicas: int = 1) -> Kind:
    """The chart, with the operator's pod from the built image (helm upgrade --install:
    idempotent on a cluster an earlier run left up; a rebuilt image, whose archive name
    holds its inputs' key, rolls the pod); ``replicas`` operators (more than one elect a
    leader)."""
    archives = sorted(
        (CACHE / "images").glob("etj-operator-*.tar"), key=lambda a: a.stat().st_mtime
    )
    kind.helm(
        "upgrade", "--install", RELEASE, "charts/etj", "--namespace", NS, "--create-namespace",
        "--wait", "--timeout", "300s",
        "--set", f"image.repository={OPERATOR_IMAGE.rsplit(':', 1)[0]}",
        "--set", f"image.tag={OPERATOR_IMAGE.rsplit(':', 1)[1]}",
        "--set", "image.pullPolicy=Never",
        "--set", f"replicaCount={replicas}",
        "--set", f"defaultTrainerImage={TRAINER_IMAGE}",
        # Progress into status every 2 s (default 10): the flow acts on the step it reads.
        "--set", "progressSeconds=2",
        "--set", f"podAnnotations.etj\\.dev/image-archive={archives[-1].name if archives else ''}",
        # On the control plane, beside CoreDNS and fake-gcs-server (tests/cluster/kind-up.sh):
        # the workers run the jobs only, and either may be stopped.
        "--set-json", f"nodeSelector={json.dumps({CONTROL_PLANE: ''})}",
        "--set-json",
        f"tolerations={json.dumps([{'key': CONTROL_PLANE, 'operator': 'Exists', 'effect': 'NoSchedule'}])}",
    )  # fmt: skip
    kind.mark(f"helm install: {replicas} operator pod(s) ready")
    return kind


# The following jobs (data.files.follow) read files landed on a claim of the etj-shared
# class, FILE_STEPS steps of BATCH examples a file (Landing).
DATA_CLAIM = "e2e-data"
BATCH = 128
FILE_STEPS = 100


def following(job: dict, subdir: str, claim: str = DATA_CLAIM) -> dict:
    """The job trained from the files landed under ``subdir`` of the data claim, as they
    land (data.files.follow), BATCH examples a step, up to its training.steps."""
    job = copy.deepcopy(job)
    job["spec"]["data"] = {
        "source": "files",
        "files": {
            "pattern": f"/data/{subdir}/part-*.tfrecord",
            "format": "tfrecord",
            "follow": {"pollSeconds": 2},
            "volume": {"persistentVolumeClaim": {"claimName": claim, "readOnly": True}},
        },
    }
    job["spec"]["training"]["batchSizePerReplica"] = BATCH
    return job


class Landing:
    """Writes a following job's files on the host directory of the data claim (every node
    mounts it), the way the job expects them: aside, then renamed into place."""

    def __init__(self, job: dict, root: Path, subdir: str) -> None:
        from etj.api.spec import EmbeddingTrainingJobSpec

        self.spec = EmbeddingTrainingJobSpec.model_validate(job["spec"])
        self.scratch, self.dir = root / f".scratch-{subdir}", root / subdir
        self.dir.mkdir(parents=True, exist_ok=True)
        self.files = 0

    @property
    def steps(self) -> int:
        return self.files * FILE_STEPS

    def upto(self, steps: int) -> None:
        """Files until at least ``steps`` steps of data have landed."""
        from etj_trainer.data.datagen import write_files

        while self.steps < steps:
            (path,) = write_files(
                self.spec.model, self.spec.data, self.scratch, "tfrecord", 1, BATCH * FILE_STEPS
            )
            path.chmod(0o644)
            path.rename(self.dir / f"part-{self.files:05d}.tfrecord")
            self.files += 1


def data_claim(k: Kind, name: str = DATA_CLAIM) -> Path:
    """The ReadWriteMany claim the following jobs read, made anew; its host directory."""
    k.kubectl("delete", "pvc", name, "--ignore-not-found", "--wait=true", timeout=300)
    k.apply({
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {"name": name},
        "spec": {
            "storageClassName": "etj-shared",
            "accessModes": ["ReadWriteMany"],
            "resources": {"requests": {"storage": "1Gi"}},
        },
    })  # fmt: skip

    def bound() -> str | None:
        got = k.kubectl("get", "pvc", name, "-o", "jsonpath={.status.phase} {.spec.volumeName}")
        phase, _, volume = got.stdout.partition(" ")
        return volume if phase == "Bound" and volume else None

    volume = wait_for(bound, 120, "the data claim bound")
    path = k.kubectl("get", "pv", volume, "-o", "jsonpath={.spec.hostPath.path}").stdout
    assert path.startswith("/var/lib/etj-shared/volumes/"), path
    return SHARED / path.removeprefix("/var/lib/etj-shared/")

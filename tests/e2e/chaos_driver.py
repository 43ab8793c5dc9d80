"""The chaos soak's driver on kind (issue 39, 2): the jobs of the soak made and fed, each
fault of a ``chaos.schedule`` injected, the invariants of ``etj_testcluster.chaos`` checked
over what the cluster shows after every fault and at the end, and the table printed.

``make chaos`` (``python -m tests.e2e.chaos_driver --minutes M --seed S``) runs the whole
soak: the three jobs of the issue (ParameterServer with 2 ps and 3 workers on the
etj-shared ReadWriteMany class; MultiWorkerMirrored with 3 workers; a ParameterServer job
with a ``gs://`` checkpoint on fake-gcs-server), every fault kind, for at least M minutes.
tests/e2e/test_chaos.py runs the CI version (the first two jobs, the faults that stop no
node). The ParameterServer jobs follow files the driver lands (data.files.follow) a few
files ahead of their step, so no job ends before its faults, and end (Succeeded) once no
file has landed for ``IDLE_SECONDS``; the MultiWorkerMirrored job (follow takes one
process there) trains synthetic data under a CPU limit, for as many steps as the soak
lasts at its rate at that limit.

It does the cluster's side only (kubectl, docker, the nodes' crictl); what it judges is
chaos.py's, and it asserts nothing itself: ``Soak.run`` returns the outcomes.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field

import yaml

from etj_testcluster import chaos
from etj_testcluster.chaos import Fault, FaultKind, JobUnderTest, Outcome

from .conftest import KIND_KUBECONFIG, ROOT, wait_for
from .kindlib import (
    CONTROL_PLANE,
    FILE_STEPS,
    NS,
    RELEASE,
    SHARED,
    Kind,
    Landing,
    data_claim,
    docker,
    following,
    install,
    on_gcs,
    quickstart,
)

JOB_LABEL = "training.etj.dev/job-name"
DATA = "chaos-data"
# A following job ends (Succeeded) once no file has landed for this long; more than the
# longest time its step can look stale to the feeder (the operator or the API server down).
IDLE_SECONDS = 60
# Files the feeder keeps landed beyond a job's step: a round of the follow loop (and what
# a fault can cost) stays within the checkpoint interval.
AHEAD_FILES = 2
EVERY = 300
# Checkpoints kept: the one a new leader restored is still there when the driver reads it
# on the host, after the recovery (which may pass a few more).
KEEP = 10
# The MultiWorkerMirrored job: its workers' CPU limit, and its steps per second at that
# limit with a margin (11.2 with the machine at load 13: its limit binds; the soak's length
# sets its steps from it, chaos.steps_for).
MWM_CPU = "300m"
MWM_STEPS_PER_SECOND = 15.0
MWM_EVERY = 200


def ps_job(name: str, workers: int = 3) -> dict:
    """The quickstart (2 ps, its checkpoints on an etj-shared claim) with ``workers``,
    following the files landed under ``name`` of the data claim, to the end of them."""
    job = following(quickstart(name, 0, EVERY), name, DATA)
    spec = job["spec"]
    del spec["training"]["steps"]
    spec["data"]["files"]["follow"]["stopAfterIdleSeconds"] = IDLE_SECONDS
    spec["replicas"]["worker"]["replicas"] = workers
    spec["checkpoint"]["keep"] = KEEP
    _soak_policy(spec)
    return job


def mwm_job(name: str, steps: int) -> dict:
    """examples/mirrored.yaml with 3 workers under a CPU limit, its checkpoints on an
    etj-shared claim."""
    job = yaml.safe_load((ROOT / "examples" / "mirrored.yaml").read_text())
    job["metadata"]["name"] = name
    spec = job["spec"]
    resources = {"requests": {"cpu": "100m", "memory": "512Mi"},
                 "limits": {"cpu": MWM_CPU, "memory": "2Gi"}}  # fmt: skip
    spec["replicas"]["worker"] = {"replicas": 3, "resources": resources}
    spec["training"]["steps"] = steps
    spec["checkpoint"] = {"storage": {"size": "1Gi"}, "everySteps": MWM_EVERY, "keep": KEEP}
    spec["placement"] = {"nodeLossSeconds": 5}
    _soak_policy(spec)
    return job


def _soak_policy(spec: dict) -> None:
    # Every fault of the soak is retried: no limit reached, and a short back-off (the
    # recover times are the operator's and the trainer's, not the back-off's).
    policy = spec.setdefault("runPolicy", {})
    policy.update({"restartPolicy": "OnFailure", "backoffLimit": 1000, "watchdogSeconds": 300,
                   "restartBackoff": {"initialSeconds": 1, "maxSeconds": 5}})  # fmt: skip


@dataclass
class Soaked:
    """A job of the soak: what chaos.py judges it by, its manifest, its feed if it follows."""

    under: JobUnderTest
    manifest: dict
    landing: Landing | None = None


def soak_jobs(seconds: float, gcs_prefix: str | None) -> list[Soaked]:
    """The jobs: ParameterServer (2 ps, 3 workers), MultiWorkerMirrored (3 workers) and,
    given a prefix, the gs:// one (2 ps, 1 worker)."""
    steps = chaos.steps_for(seconds, MWM_STEPS_PER_SECOND, MWM_EVERY)
    ps = ps_job("chaos-ps")
    mwm = mwm_job("chaos-mwm", steps)
    jobs = [
        Soaked(JobUnderTest("chaos-ps", chaos.PS_STRATEGY,
                            {chaos.CHIEF: 1, chaos.PS: 2, chaos.WORKER: 3}, EVERY), ps),
        Soaked(JobUnderTest("chaos-mwm", chaos.MWM_STRATEGY, {chaos.WORKER: 3}, MWM_EVERY), mwm),
    ]  # fmt: skip
    if gcs_prefix is not None:
        gcs = on_gcs(ps_job("chaos-gcs", workers=1), gcs_prefix)
        under = JobUnderTest("chaos-gcs", chaos.PS_STRATEGY,
                             {chaos.CHIEF: 1, chaos.PS: 2, chaos.WORKER: 1}, EVERY)  # fmt: skip
        jobs.append(Soaked(under, gcs))
    return jobs


# ---- what the cluster shows ----------------------------------------------------------------


def snapshot(k: Kind) -> tuple[list[dict], list[dict]] | None:
    """Every job and pod of the namespace, or None while the API server does not answer."""
    got = k.kubectl("get", "etj,pods", "-o", "json", check=False, timeout=120)
    if got.returncode != 0:
        return None
    items = json.loads(got.stdout)["items"]
    return ([i for i in items if i["kind"] == "EmbeddingTrainingJob"],
            [i for i in items if i["kind"] == "Pod"])  # fmt: skip


def _progress(job: dict) -> dict:
    return (job.get("status") or {}).get("progress") or {}


@dataclass
class Before:
    """A job as it was just before a fault."""

    restarts: int
    step: int
    checkpoint: int
    leader_uid: str | None
    rollbacks: int
    # Every pod of the job by name: its uid.
    uids: dict[str, str] = field(default_factory=dict)


def before_uid(before: dict[str, Before], fault: Fault) -> str | None:
    """The uid the fault's pod had before it."""
    b = before.get(str(fault.job))
    return b.uids.get(fault.target) if b else None


def trainer_events(k: Kind, pod: str) -> list[dict]:
    got = k.kubectl("logs", pod, "-c", "trainer", check=False, timeout=120)
    return [json.loads(x) for x in got.stdout.splitlines() if x.startswith('{"')]


def saved_sums(path: str, keys: Iterable[str]) -> dict[str, float]:
    """The float64 sum of each of ``keys`` (a ``restored`` line's digest's variables) the
    checkpoint at ``path`` (its prefix, on this host) holds; a key it lacks is left out."""
    import numpy as np
    import tensorflow as tf

    reader = tf.train.load_checkpoint(path)
    held = reader.get_variable_to_shape_map()
    sums = {}
    for key in keys:
        name = f"{key}/.ATTRIBUTES/VARIABLE_VALUE"
        if name in held:
            sums[key] = float(reader.get_tensor(name).astype(np.float64).sum())
    return sums


def _uid(pods: Sequence[dict], name: str) -> str | None:
    return next((p["metadata"]["uid"] for p in pods if p["metadata"]["name"] == name), None)


# ---- the faults ----------------------------------------------------------------------------


def kill_container(k: Kind, pod: str, namespace: str = "default") -> str:
    """The pod's (first) container's main process SIGKILLed from its node (containerd's
    ``ctr``), as the kernel or a crash would end it: the kubelet sees it exit. Its node."""
    got = json.loads(k.kubectl("get", "pod", "-n", namespace, pod, "-o", "json").stdout)
    node = got["spec"]["nodeName"]
    cid = got["status"]["containerStatuses"][0]["containerID"].removeprefix("containerd://")
    docker("exec", node, "ctr", "-n", "k8s.io", "tasks", "kill", "-s", "SIGKILL", cid)
    return node


# Run in a ps's trainer container: the trainer (its PID 1) made the OOM killer's first
# choice, then memory taken until the container's limit in a memfd that this process never
# maps (charged to the container, in no process's resident size): the kernel kills the
# trainer (the container OOMKilled, 137), not this process.
HOG = (
    "import os\n"
    "open('/proc/1/oom_score_adj', 'w').write('1000')\n"
    "fd = os.memfd_create('hog')\n"
    "while True:\n"
    "    os.write(fd, b'x' * (1 << 20))\n"
)


@dataclass
class Soak:
    k: Kind
    jobs: list[Soaked]
    nodes: list[str]
    log: Callable[[str], None] = print
    recover_timeout: float = 900
    outcomes: list[Outcome] = field(default_factory=list)
    restores: list[dict] = field(default_factory=list)
    violations: list[str] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)

    def by_name(self, name: str) -> Soaked:
        return next(j for j in self.jobs if j.under.name == name)

    # ---- the feed --------------------------------------------------------------------------

    def _feed(self) -> None:
        """Land files a few ahead of each following job's step (its status), until stopped."""
        while not self._stop.wait(2.0):
            try:
                self._land()
            except Exception as exc:  # the feed goes on; a job left idle shows in the end
                self.log(f"feed: {exc!r}")

    def _land(self) -> None:
        got = snapshot(self.k)
        if got is not None:
            for job in got[0]:
                soaked = next((j for j in self.jobs if j.under.name == job["metadata"]["name"]),
                              None)  # fmt: skip
                if soaked is not None and soaked.landing is not None:
                    step = int(_progress(job).get("step") or 0)
                    soaked.landing.upto(step + AHEAD_FILES * FILE_STEPS)

    # ---- one fault -------------------------------------------------------------------------

    def _before(self, jobs: list[dict], pods: list[dict]) -> dict[str, Before]:
        out = {}
        for job in jobs:
            name = job["metadata"]["name"]
            if not any(j.under.name == name for j in self.jobs):
                continue
            leader = self.by_name(name).under.leader
            events = trainer_events(self.k, leader)
            out[name] = Before(
                restarts=int((job.get("status") or {}).get("restarts") or 0),
                step=int(_progress(job).get("step") or 0),
                checkpoint=int(_progress(job).get("lastCheckpointStep") or 0),
                leader_uid=_uid(pods, leader),
                rollbacks=sum(e.get("event") == "rolledBack" for e in events),
                uids={p["metadata"]["name"]: p["metadata"]["uid"] for p in pods
                      if p["metadata"].get("labels", {}).get(JOB_LABEL) == name},
            )  # fmt: skip
        return out

    def _pod_of(self, fault: Fault, pods: list[dict]) -> tuple[str, str]:
        name = fault.target
        pod = next(p for p in pods if p["metadata"]["name"] == name)
        return name, pod["spec"]["nodeName"]

    def inject(self, fault: Fault) -> str:
        """Do the fault; a note on what was hit."""
        k = self.k
        got = snapshot(k)
        assert got is not None
        pods = got[1]
        if fault.kind in (FaultKind.POD_SIGKILL, FaultKind.SAME_ROLE_TWICE):
            name = fault.target
            old = _uid(pods, name)
            node = kill_container(k, name)
            if fault.kind == FaultKind.SAME_ROLE_TWICE:
                wait_for(lambda: self._running_anew(name, old), 600, f"{name} running again")
                return f"on {node}, then on {kill_container(k, name)}"
            return f"on {node}"
        if fault.kind == FaultKind.POD_DELETE:
            name, node = self._pod_of(fault, pods)
            k.kubectl("delete", "pod", name, "--wait=false")
            return f"on {node}"
        if fault.kind == FaultKind.PS_OOM:
            name, node = self._pod_of(fault, pods)
            # Ends when the kernel kills the container, the exec's process with it.
            k.kubectl("exec", name, "-c", "trainer", "--", "python", "-c", HOG,
                      check=False, timeout=300)  # fmt: skip
            return f"on {node}"
        if fault.kind == FaultKind.NODE_STOP:
            assert fault.node is not None
            docker("stop", fault.node)
            return f"{fault.node} stopped"
        if fault.kind == FaultKind.NODE_DRAIN:
            assert fault.node is not None
            k.kubectl("drain", fault.node, "--ignore-daemonsets", "--delete-emptydir-data",
                      "--force", "--timeout=600s", timeout=700)  # fmt: skip
            return f"{fault.node} drained"
        if fault.kind == FaultKind.LEADER_KILL:
            holder = k.kubectl("get", "lease", "-n", NS, RELEASE, "-o",
                               "jsonpath={.spec.holderIdentity}").stdout  # fmt: skip
            # The holder identity is "<pod>_<a random suffix>".
            holder = holder.rsplit("_", 1)[0]
            k.kubectl("delete", "pod", "-n", NS, holder, "--grace-period=0", "--force")
            return f"leader {holder}"
        if fault.kind == FaultKind.APISERVER_RESTART:
            (apiserver,) = k.kubectl("get", "pod", "-n", "kube-system", "-l",
                                     "component=kube-apiserver", "-o", "name").stdout.split()  # fmt: skip
            kill_container(k, apiserver.removeprefix("pod/"), "kube-system")
            return "kube-apiserver SIGKILLed"
        raise AssertionError(fault.kind)

    def _running_anew(self, name: str, old_uid: str | None) -> bool:
        got = self.k.kubectl("get", "pod", name, "-o", "json", check=False)
        if got.returncode != 0:
            return False
        pod = json.loads(got.stdout)
        statuses = pod["status"].get("containerStatuses") or []
        return pod["metadata"]["uid"] != old_uid and any(
            "running" in (s.get("state") or {}) for s in statuses
        )

    def _recovered(
        self, fault: Fault, at_wall: str, before: dict[str, Before], seen: list[str]
    ) -> bool:
        """Every job back: Running with every replica ready and its status true to its
        pods, its progress read after the fault and at least at its step before it (or the
        job Succeeded). Each snapshot is checked for the instant invariants on the way."""
        got = snapshot(self.k)
        if got is None:
            return False
        jobs, pods = got
        for v in chaos.snapshot_violations(jobs, pods):
            if v not in seen:
                seen.append(v)
        if fault.job is not None and _uid(pods, fault.target) in (None, before_uid(before, fault)):
            return False  # the fault not yet seen: its pod not replaced
        for job in jobs:
            name = job["metadata"]["name"]
            if name not in before:
                continue
            st = job.get("status") or {}
            if st.get("phase") == "Succeeded":
                continue
            if st.get("phase") != "Running" or chaos.status_true_to_pods(job, pods):
                return False
            progress = _progress(job)
            if (progress.get("updateTime") or "") <= at_wall:
                return False
            if int(progress.get("step") or 0) < before[name].step:
                return False
            leader = self.by_name(name).under.leader
            if _uid(pods, leader) != before[name].leader_uid and not any(
                e.get("event") == "start" for e in trainer_events(self.k, leader)
            ):
                return False  # a new leader, not yet started from its restore
        return True

    def _after(self, fault: Fault, outcome: Outcome, before: dict[str, Before]) -> None:
        got = snapshot(self.k)
        assert got is not None
        jobs, pods = got
        for job in jobs:
            name = job["metadata"]["name"]
            if name not in before:
                continue
            b, soaked = before[name], self.by_name(name)
            after = int((job.get("status") or {}).get("restarts") or 0)
            outcome.restarts[name] = after - b.restarts
            outcome.violations += chaos.restarts_as_policy_says(fault, name, b.restarts, after)
            outcome.violations += chaos.status_true_to_pods(job, pods)
            restored = self._restored(soaked.under.leader, pods, b, outcome)
            outcome.steps_lost[name] = chaos.steps_lost(b.step, restored)
            outcome.violations += chaos.restore_violations(
                soaked.under, b.checkpoint, b.step, restored
            )

    def _restored(self, leader: str, pods: list[dict], b: Before, outcome: Outcome) -> int | None:
        """The step the leader went back to across the fault: its new container's restore
        (or start), or a roll back in place (the chief's ``rolledBack``); None if neither.
        A new leader's restore is checked against the checkpoint it names, read here."""
        events = trainer_events(self.k, leader)
        if _uid(pods, leader) != b.leader_uid:
            restores = [e for e in events if e.get("event") == "restored"]
            self.restores += restores
            pod = next((p for p in pods if p["metadata"]["name"] == leader), None)
            for restored in restores:
                wrong, note = self._against_checkpoint(pod, restored)
                outcome.violations += wrong
                outcome.note = "; ".join(n for n in (outcome.note, note) if n)
            back = [e for e in events if e.get("event") in ("restored", "start")]
            return int(back[0]["step"]) if back else None
        rolled = [e for e in events if e.get("event") == "rolledBack"]
        return int(rolled[-1]["step"]) if len(rolled) > b.rollbacks else None

    def _against_checkpoint(self, pod: dict | None, restored: dict) -> tuple[list[str], str]:
        """A ``restored`` line against its checkpoint as the host reads it (the leader's
        mount, its claim, the volume's hostPath under SHARED): what is violated, a note."""
        if pod is None or not restored.get("path"):
            return [], "restore unread: no pod or path"
        claims = json.loads(self.k.kubectl("get", "pvc", "-o", "json").stdout)["items"]
        volumes = json.loads(self.k.kubectl("get", "pv", "-o", "json").stdout)["items"]
        path = chaos.host_path(restored["path"], pod, claims, volumes, str(SHARED))
        if path is None:  # gs:// (fake-gcs-server's files are not a checkpoint's layout)
            return [], f"digest unread on the host: {restored['path']}"
        try:
            saved = saved_sums(path, restored.get("digest") or {})
        except Exception as exc:  # unreadable is a finding, not a crash
            return [f"{restored['path']} restored, unreadable on the host at {path}: {exc}"], ""
        return chaos.digest_vs_saved(restored, saved), ""

    def fault(self, fault: Fault) -> Outcome:
        outcome = Outcome(fault)
        got = snapshot(self.k)
        assert got is not None
        jobs, pods = got
        live = {j["metadata"]["name"] for j in jobs if (j.get("status") or {}).get("phase")
                not in ("Succeeded", "Failed")}  # fmt: skip
        if fault.job is not None and fault.job not in live:
            outcome.violations.append(f"{fault.job} ended before its fault {fault.kind}")
            return outcome
        before = self._before(jobs, pods)
        at_wall = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        t0 = time.monotonic()
        outcome.note = self.inject(fault)
        seen: list[str] = []
        try:
            if fault.kind == FaultKind.NODE_STOP:
                self._node_back_after(fault, at_wall, before, seen, t0, outcome)
            else:
                wait_for(lambda: self._recovered(fault, at_wall, before, seen),
                         self.recover_timeout, f"recovery from {fault.kind} on {fault.target}")  # fmt: skip
                outcome.recover_seconds = time.monotonic() - t0
        finally:
            if fault.kind == FaultKind.NODE_DRAIN:
                self.k.kubectl("uncordon", str(fault.node), check=False)
        outcome.violations += seen
        self._after(fault, outcome, before)
        return outcome

    def _node_back_after(
        self, fault: Fault, at_wall: str, before: dict[str, Before], seen: list[str],
        t0: float, outcome: Outcome,
    ) -> None:  # fmt: skip
        try:
            wait_for(lambda: self._recovered(fault, at_wall, before, seen),
                     self.recover_timeout, f"recovery with {fault.node} stopped")  # fmt: skip
            outcome.recover_seconds = time.monotonic() - t0
        finally:
            docker("start", str(fault.node))
            # kind-up.sh redoes the node's pod routes and waits for it Ready.
            subprocess.run(["bash", str(ROOT / "tests/cluster/kind-up.sh")], check=True,
                           capture_output=True, timeout=1200, cwd=ROOT)  # fmt: skip

    # ---- the soak --------------------------------------------------------------------------

    def start(self) -> None:
        k = self.k
        names = [j.under.name for j in self.jobs]
        k.kubectl("delete", "etj", *names, "--ignore-not-found", "--wait=true", timeout=600)
        data = data_claim(k, DATA)
        for j in self.jobs:
            if j.manifest["spec"].get("data", {}).get("source") == "files":
                j.landing = Landing(j.manifest, data, j.under.name)
                j.landing.upto(AHEAD_FILES * FILE_STEPS)
        k.apply([j.manifest for j in self.jobs])
        threading.Thread(target=self._feed, daemon=True).start()
        for j in self.jobs:
            wait_for(lambda j=j: k.progress(j.under.name, "lastCheckpointStep") > 0, 900,
                     f"{j.under.name}'s first checkpoint")  # fmt: skip
            self.log(f"{j.under.name}: first checkpoint")

    def run(
        self, faults: Sequence[Fault], owed: int | None = None, minutes: float = 0
    ) -> list[Outcome]:
        """The faults one after the other (each ``gap`` s after the last one's recovery):
        the first ``owed`` (default: all), then more until ``minutes`` have passed; then
        the end (``finish``)."""
        t0 = time.monotonic()
        owed = len(faults) if owed is None else owed
        for n, fault in enumerate(faults, 1):
            if n > owed and time.monotonic() - t0 >= minutes * 60:
                break
            self._stop.wait(fault.gap)
            outcome = self.fault(fault)
            self.outcomes.append(outcome)
            self.log(f"fault {n}: {fault.kind} {fault.target} ({outcome.note}): recovered in "
                     f"{outcome.recover_seconds and round(outcome.recover_seconds)} s, lost "
                     f"{outcome.steps_lost}, restarts {outcome.restarts}, "
                     f"{outcome.violations or 'ok'}")  # fmt: skip
        self.finish()
        return self.outcomes

    def finish(self) -> None:
        self._stop.set()
        k = self.k
        for j in self.jobs:
            wait_for(lambda j=j: k.phase(j.under.name) in ("Succeeded", "Failed"), 1800,
                     f"{j.under.name} to finish", every=5)  # fmt: skip
        got = wait_for(lambda: snapshot(k), 120, "a snapshot")
        jobs, pods = got
        for job in jobs:
            phase = (job.get("status") or {}).get("phase")
            if (
                job["metadata"]["name"] in [j.under.name for j in self.jobs]
                and phase != "Succeeded"
            ):
                self.violations.append(f"{job['metadata']['name']} ended {phase}")
        self.violations += chaos.digest_violations(self.restores)

        # The finished jobs' pods stopped (status follows by a pass): then every invariant.
        def settled() -> tuple[list[dict], list[dict]] | None:
            got = snapshot(k)
            return got if got is not None and not chaos.snapshot_violations(*got) else None

        try:
            jobs, pods = wait_for(settled, 300, "no live pod of a finished job")
        except AssertionError:
            jobs, pods = wait_for(lambda: snapshot(k), 120, "a snapshot")
        self.violations += chaos.snapshot_violations(jobs, pods)
        for job in jobs:
            if job["metadata"]["name"] in [j.under.name for j in self.jobs]:
                self.violations += chaos.status_true_to_pods(job, pods)


def soak_schedule(
    seed: int, jobs: Sequence[JobUnderTest], nodes: Sequence[str], kinds: Sequence[FaultKind],
    count: int | None, gaps: tuple[float, float],
) -> tuple[list[Fault], int]:  # fmt: skip
    """The schedule and how many of its first faults must all be done: ``count``, else
    everything coverage owes, followed by as many again (three times) to fill the time."""
    owed = count or len(chaos.coverage(jobs, nodes, kinds))
    return chaos.schedule(seed, jobs, nodes, count or owed * 4, kinds, gaps), owed


def worker_nodes(k: Kind) -> list[str]:
    nodes = json.loads(k.kubectl("get", "nodes", "-o", "json").stdout)["items"]
    workers = [n["metadata"]["name"] for n in nodes if CONTROL_PLANE not in n["metadata"]["labels"]]
    return sorted(workers)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--minutes", type=float, default=20)
    parser.add_argument("--seed", type=int, default=39)
    args = parser.parse_args(argv)
    k = install(Kind(str(KIND_KUBECONFIG)), replicas=2)
    nodes = worker_nodes(k)
    seconds = args.minutes * 60
    jobs = soak_jobs(seconds * 1.5, gcs_prefix=f"chaos-{os.getpid()}")
    under = [j.under for j in jobs]
    faults, owed = soak_schedule(args.seed, under, nodes, chaos.ALL_KINDS, None, (10.0, 40.0))
    soak = Soak(k, jobs, nodes, log=k.mark)
    k.mark(f"chaos: seed {args.seed}, {owed} faults owed, {args.minutes} min at least")
    soak.start()
    outcomes = soak.run(faults, owed, args.minutes)
    print(chaos.table(outcomes), flush=True)
    wrong = [v for o in outcomes for v in o.violations] + soak.violations
    for v in wrong:
        print("VIOLATED:", v, flush=True)
    print(f"{len(outcomes)} faults, {len(wrong)} violations, "
          f"{time.monotonic() - k.t0:.0f} s", flush=True)  # fmt: skip
    return 1 if wrong else 0


if __name__ == "__main__":
    raise SystemExit(main())

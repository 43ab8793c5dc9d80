"""End to end on the local kind cluster (kind-config.yaml: one control plane, two workers):
what a user of a real multi-node cluster goes through, in as few job runs as it takes.

1. The failure etj's checkpoint rules exist for: the quickstart's objects as ``etj render``
   gives them, applied with kubectl (no operator), with the checkpoint volume swapped to
   the old default, an emptyDir per pod; a ps and the chief on different nodes. The first
   checkpoint already fails (each ps writes its shards under a directory only the chief's
   pod has: NotFoundError from /job:ps). Then the same job is refused by
   ``etj validate`` and, after ``helm install``, by the operator (a Failed condition naming
   checkpoint storage); a one-pod job, which may keep the emptyDir, loses its written
   checkpoint with its pod (the operator's new pod starts from step 0); and a malformed
   job is refused by the API server.
2. One flow, three jobs side by side (their waits overlap): the quickstart as the README
   gives it (checkpoint.storage: a claim of the ReadWriteMany etj-shared class; one worker,
   to spare the two cores; trained from files the test lands as the flow goes, which the
   job follows, so that it cannot end before its faults), its ps spread over both nodes, one away from the chief
   (``spec.nodeName``), peers found by their DNS names, the
   operator's pod reaching the API through the ``kubernetes`` Service; a ps killed while
   its node is cordoned comes back on the other node and the chief restores the last
   checkpoint; then the whole node of the chief stopped (``docker stop``): its pods come
   back on the other node and training resumes from the last checkpoint; Succeeded, the
   ps stopped by their SIGTERM, the checkpoint files on the host directory every node
   shares. Beside it the same model with ``checkpoint.uri: gs://...`` on fake-gcs-server
   (objects in the bucket, a restore after a chief kill, Succeeded: its export, staged
   on the chief's disk, is written by the chief alone), and a worker over its memory limit, OOM-killed by the kernel
   and brought back with more memory.
3. The daily chain of examples/daily as its files say to run it: the logs claim filled by
   its Job, the CronJob (its RBAC: create jobs, nothing else) creating day 1's and then
   day 2's generateName job from its ConfigMap template; day 2 (a third ps, a table added)
   finds day 1 by label, mounts its claim read-only and warm-starts from it, and its
   held-out AUC beats the same model's trained on day 2 alone from scratch (printed).
4. ``helm uninstall`` leaves no object of etj; deleting the cluster leaves no container,
   Docker network, iptables chain or mount (only when this suite brought the cluster up).

The cluster: conftest.kind_kubeconfig (as root it is brought up, cached; elsewhere these
skip saying why).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from etj.api.export import version_of
from etj_testcluster.fake_gcs import GCS_HOSTS

from .conftest import CACHE, KIND_BIN_DIR, ROOT, kind_is_ours, wait_for
from .kindlib import (
    DATA_CLAIM,
    GCS_BUCKET,
    GCS_CA_DIR,
    GCS_ENV,
    GCS_IP,
    NS,
    OPERATOR_IMAGE,
    RELEASE,
    SHARED,
    TRAINER_IMAGE,
    Background,
    Kind,
    Landing,
    PodWatch,
    back_elsewhere,
    data_claim,
    docker,
    following,
    install,
    on_gcs,
    quickstart,
)
from .test_fake_gcs import CHECKPOINT_ROUNDTRIP

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(1800)]

ETJ = str(Path(sys.executable).parent / "etj")
# The quickstart's length and checkpoint interval here: the ps kill and the node stop both
# happen before three quarters of it (checked before each).
STEPS = 2000
EVERY = 100
# The gs:// job's.
GCS_STEPS = 800
GCS_EVERY = 100
# The quickstart and the gs:// job follow files the test lands (kindlib.Landing): a job
# trains only what has landed, so no machine is fast enough to finish it before its faults
# (on a quiet machine the synthetic quickstart ran 1,840 steps before its first checkpoint
# showed in status).
# Run inside the operator's pod: the Service's DNS name, then the API through it with the
# pod's ServiceAccount token.
API_PROBE = """
import socket, ssl, urllib.request
print("dns", socket.gethostbyname("kubernetes.default.svc.cluster.local"), flush=True)
sa = "/var/run/secrets/kubernetes.io/serviceaccount/"
ctx = ssl.create_default_context(cafile=sa + "ca.crt")
req = urllib.request.Request("https://kubernetes.default.svc/version",
                             headers={"Authorization": "Bearer " + open(sa + "token").read()})
print("api", urllib.request.urlopen(req, context=ctx, timeout=10).status, flush=True)
"""


@pytest.fixture(scope="module")
def installed(kind: Kind) -> Kind:
    """The chart with one operator (kindlib.install)."""
    return install(kind)


def one_pod(name: str, steps: int, every: int) -> dict:
    """examples/mirrored.yaml as a one-pod job (one worker, small requests) with the
    default checkpoint place: the pod's own emptyDir."""
    job = yaml.safe_load((ROOT / "examples" / "mirrored.yaml").read_text())
    job["metadata"]["name"] = name
    job["spec"]["replicas"]["worker"] = {
        "replicas": 1,
        "resources": {"requests": {"cpu": "100m", "memory": "1Gi"}, "limits": {"memory": "2Gi"}},
    }
    job["spec"]["training"]["steps"] = steps
    job["spec"]["checkpoint"] = {"everySteps": every}
    return job


def test_emptydir_checkpoints_fail_across_pods_and_go_with_a_lost_pod(
    installed: Kind, tmp_path: Path
) -> None:
    k = installed
    name = "nodefault"
    job = quickstart(name, 100000, 100)  # stopped by the test long before its end
    spec_file = tmp_path / "job.yaml"
    spec_file.write_text(yaml.safe_dump(job))
    rendered = subprocess.run(
        [ETJ, "render", str(spec_file), "--image", TRAINER_IMAGE],
        capture_output=True, text=True, check=True, cwd=ROOT,
    ).stdout  # fmt: skip
    objects = [o for o in yaml.safe_load_all(rendered) if o]
    # The old default: each pod's own emptyDir for its checkpoints, no claim.
    objects = [o for o in objects if o["kind"] != "PersistentVolumeClaim"]
    pods = [o for o in objects if o["kind"] == "Pod"]
    for pod in pods:
        vols = pod["spec"]["volumes"]
        (i,) = [n for n, v in enumerate(vols) if v["name"] == "checkpoints"]
        vols[i] = {"name": "checkpoints", "emptyDir": {}}
    assert {p["metadata"]["name"] for p in pods} >= {f"{name}-chief-0", f"{name}-ps-0"}
    try:
        k.apply(objects)
        chief = f"{name}-chief-0"

        def first_save() -> dict | None:
            return next(
                (e for e in k.events_of(chief) if e.get("event") in ("checkpoint", "error")), None
            )

        # The first checkpoint already fails: each ps writes its variables' shards under
        # the checkpoint's prefix, a directory only the chief's own emptyDir has.
        save = wait_for(first_save, 600, "the chief's first checkpoint (or its failure)")
        chief_node = k.node_of(chief)
        ps_nodes = {k.node_of(f"{name}-ps-0"), k.node_of(f"{name}-ps-1")}
        assert chief_node and ps_nodes - {chief_node, ""}, (chief_node, ps_nodes)
        k.mark(f"emptyDir job: chief on {chief_node}, ps on {sorted(ps_nodes)}: {str(save)[:120]}")
        logs = k.kubectl("logs", chief).stdout
        assert save["event"] == "error" and save["reason"] == "NotFoundError", save
        assert "SaveV2" in logs and "No such file or directory" in logs, logs[-3000:]
        assert f"/var/lib/etj/checkpoints/{name}/ckpt-" in logs, logs[-3000:]
        assert "/job:ps/" in logs, logs[-3000:]
    finally:
        k.kubectl("delete", "-f", "-", "--ignore-not-found", input=rendered, timeout=180)

    # The same job (no checkpoint place: the emptyDir default) is refused before it runs.
    del job["spec"]["checkpoint"]["storage"]
    spec_file.write_text(yaml.safe_dump(job))
    got = subprocess.run([ETJ, "validate", str(spec_file)], capture_output=True, text=True)
    assert got.returncode == 2, got
    lines = (got.stdout + got.stderr).strip().splitlines()
    assert len(lines) == 1 and "checkpoint.storage" in lines[0], lines
    k.apply(job)

    def failed() -> dict | None:
        conds = k.status(name).get("conditions") or []
        return next((c for c in conds if c["type"] == "Failed" and c["status"] == "True"), None)

    cond = wait_for(failed, 120, "the operator to refuse the emptyDir job")
    assert cond["reason"] == "InvalidSpec" and "checkpoint.storage" in cond["message"], cond
    selector = f"training.etj.dev/job-name={name}"
    assert k.kubectl("get", "pods", "-l", selector, "-o", "name").stdout.strip() == ""
    k.kubectl("delete", "etj", name, "--wait=true", timeout=120)

    # One pod may keep the default emptyDir, and its checkpoints go with the pod: the
    # operator replaces a deleted pod (nothing here re-applies it), the new pod's emptyDir
    # is empty, and training starts again from step 0 though a checkpoint was written.
    one, pod = one_pod("onepod", 100000, 50), "onepod-worker-0"
    k.apply(one)

    def saved() -> int | None:
        return next((e["step"] for e in k.events_of(pod) if e.get("event") == "checkpoint"), None)

    saved_step = wait_for(saved, 600, "the one pod's first checkpoint")
    uid = k.pod_state(pod)[0]
    k.kubectl("delete", "pod", pod, "--grace-period=1", "--wait=true", timeout=120)

    def new_start() -> dict | None:
        got = k.pod_state(pod)
        if not got or got[0] == uid:
            return None
        return next((e for e in k.events_of(pod) if e.get("event") == "start"), None)

    start = wait_for(new_start, 600, "the operator's new pod to start training")
    k.mark(f"one-pod emptyDir job: checkpoint at step {saved_step}, its new pod: {start}")
    assert saved_step >= 50, saved_step
    assert "restoredFrom" not in start and start["step"] == 0, start  # emit drops None
    k.kubectl("delete", "etj", "onepod", "--wait=true", timeout=120)

    bad = quickstart("bad", 100, 100)
    bad["spec"]["strategy"] = "Sideways"
    rejected = k.kubectl("apply", "-f", "-", input=yaml.safe_dump(bad), check=False)
    assert rejected.returncode != 0 and "strategy" in rejected.stderr, rejected.stderr


def kill_gcs_chief(k: Kind, landing: Landing) -> tuple[int, int]:
    """The gs:// job's chief killed after its first checkpoint; the step it saved and the
    step the new chief restored. Its data lands in two parts: what it can train before the
    kill, the rest once the new chief has restored."""
    landing.upto(3 * GCS_EVERY)
    wait_for(lambda: k.progress("gcs", "lastCheckpointStep") > 0, 900, "a gs:// checkpoint")
    gcs_saved = k.progress("gcs", "lastCheckpointStep")
    gcs_uid = wait_for(
        lambda: (st := k.pod_state("gcs-chief-0")) and st[1] == "Running" and st[0],
        300, "the gcs chief running",
    )  # fmt: skip
    k.kubectl("delete", "pod", "gcs-chief-0", "--grace-period=1", "--wait=false")
    wait_for(
        lambda: (s := k.pod_state("gcs-chief-0")) and s[0] != gcs_uid and s[1] == "Running",
        600, "the gcs chief back",
    )  # fmt: skip
    gcs_restored = wait_for(lambda: k.restored_step("gcs-chief-0"), 300, "a gs:// restore")
    k.mark(f"gcs: chief killed after checkpoint {gcs_saved}, restored {gcs_restored}")
    landing.upto(GCS_STEPS)
    return gcs_saved, gcs_restored


def test_across_nodes_ps_kill_node_stop_gcs_oom_to_succeeded(
    installed: Kind, tmp_path: Path
) -> None:
    k = installed
    job = following(quickstart("quickstart", STEPS, EVERY), "quickstart")
    prefix = f"e2e-{os.getpid()}"
    gcs = on_gcs(following(quickstart("gcs", GCS_STEPS, GCS_EVERY), "gcs"), prefix)
    # A worker over its memory limit: the kernel OOM-kills it (137, OOMKilled) and the
    # operator brings it back with a larger limit (1.5x per kill, until it fits).
    oom = quickstart("oom", 200, 100)
    oom["spec"]["replicas"]["ps"]["replicas"] = 1
    oom["spec"]["replicas"]["worker"] = {
        "replicas": 1,
        "resources": {"requests": {"memory": "128Mi"}, "limits": {"memory": "128Mi"}},
    }
    oom["spec"]["runPolicy"]["backoffLimit"] = 10
    oom["spec"]["runPolicy"]["restartBackoff"] = {"initialSeconds": 1}
    watch = PodWatch.start(k, "quickstart", tmp_path / "quickstart-pods.json")
    oom_watch = PodWatch.start(k, "oom", tmp_path / "oom-pods.json")
    node_back: subprocess.Popen[str] | None = None
    stopped = ""
    # A job made again under the name of one still being deleted would get its claim
    # deleted under it (the old job's owner reference): start from none of them.
    k.kubectl("delete", "etj", "quickstart", "gcs", "oom", "--ignore-not-found", timeout=300)
    wait_for(
        lambda: not k.kubectl("get", "pvc", "-o", "name").stdout.strip(), 300, "old claims gone"
    )
    try:
        data = data_claim(k)
        landing, gcs_landing = Landing(job, data, "quickstart"), Landing(gcs, data, "gcs")
        landing.upto(5 * EVERY)
        k.apply([job, gcs, oom])
        # gs://: a checkpoint in the bucket, the chief killed, the new one restores it. Beside
        # the quickstart's own kills, in a thread: each job's kill is due at its first
        # checkpoint, and done one after the other each would wait out the other's.
        gcs_kill = Background(lambda: kill_gcs_chief(k, gcs_landing)).start()

        wait_for(lambda: k.phase("quickstart") == "Running", 600, "quickstart Running")
        k.mark("quickstart Running")

        # The claim etj made for checkpoint.storage: bound to an etj-shared volume.
        claims = json.loads(k.kubectl("get", "pvc", "-o", "json").stdout)["items"]
        (claim,) = [c for c in claims if c["metadata"]["name"] == "quickstart-checkpoints"]
        assert claim["spec"]["storageClassName"] == "etj-shared", claim["spec"]
        assert claim["spec"]["accessModes"] == ["ReadWriteMany"], claim["spec"]
        (owner,) = claim["metadata"]["ownerReferences"]
        assert owner["kind"] == "EmbeddingTrainingJob" and owner["name"] == "quickstart"
        wait_for(
            lambda: k.kubectl(
                "get", "pvc", "quickstart-checkpoints", "-o", "jsonpath={.status.phase}"
            ).stdout == "Bound",
            120, "the claim bound",
        )  # fmt: skip
        volume = k.kubectl(
            "get", "pvc", "quickstart-checkpoints", "-o", "jsonpath={.spec.volumeName}"
        ).stdout
        host_path = k.kubectl("get", "pv", volume, "-o", "jsonpath={.spec.hostPath.path}").stdout
        assert host_path.startswith("/var/lib/etj-shared/volumes/"), host_path
        on_host = SHARED / host_path.removeprefix("/var/lib/etj-shared/")

        # The ps spread over both workers: one of them, at least, away from the chief.
        chief = k.node_of("quickstart-chief-0")
        ps = {k.node_of("quickstart-ps-0"), k.node_of("quickstart-ps-1")}
        k.mark(f"chief on {chief}, ps on {sorted(ps)}")
        assert chief and "" not in ps and len(ps) == 2 and ps - {chief}, (chief, ps)

        # The operator's pod finds the `kubernetes` Service by DNS and reaches the API.
        probe = k.kubectl("exec", "-n", NS, f"deploy/{RELEASE}", "--", "python", "-c", API_PROBE)
        assert "dns 10." in probe.stdout and "api 200" in probe.stdout, probe.stdout
        # Peers by their DNS names, across nodes: TF_CONFIG names them so.
        pod = json.loads(k.kubectl("get", "pod", "quickstart-chief-0", "-o", "json").stdout)
        env = {e["name"]: e.get("value") for e in pod["spec"]["containers"][0]["env"]}
        peer = json.loads(env["TF_CONFIG"])["cluster"]["ps"][1].rsplit(":", 1)[0]
        assert peer.startswith("quickstart-ps-1.quickstart.") and ".svc" in peer, peer
        resolved = k.kubectl(
            "exec", "quickstart-chief-0", "--", "python", "-c",
            f"import socket; print(socket.gethostbyname({peer!r}))",
        ).stdout.strip()  # fmt: skip
        ps_ip = k.kubectl("get", "pod", "quickstart-ps-1", "-o", "jsonpath={.status.podIP}").stdout
        assert resolved == ps_ip, (peer, resolved, ps_ip)

        # A ps lost while its node takes no new pods: it comes back on the other node, and
        # the restarted chief restores the last checkpoint from the shared volume.
        wait_for(lambda: k.progress("quickstart", "lastCheckpointStep") > 0, 900, "a checkpoint")
        at = k.progress("quickstart", "step")
        assert at <= landing.steps < STEPS // 2, (at, landing.steps)
        before_kill = k.progress("quickstart", "lastCheckpointStep")
        restarts = k.status("quickstart").get("restarts", 0)
        old_uid, _, old_node = k.pod_state("quickstart-ps-0")
        k.kubectl("cordon", old_node)
        try:
            k.kubectl("delete", "pod", "quickstart-ps-0", "--grace-period=1", "--wait=false")
            wait_for(
                lambda: k.status("quickstart").get("restarts", 0) > restarts, 300, "ps restart"
            )
            wait_for(
                lambda: back_elsewhere(k, "quickstart-ps-0", old_uid, old_node), 600, "ps-0 back"
            )
        finally:
            k.kubectl("uncordon", old_node)
        restored = wait_for(
            lambda: k.restored_step("quickstart-chief-0"), 600, "the chief to restore"
        )
        k.mark(
            f"ps-0 killed at step {at} (checkpoint {before_kill}) on {old_node}, back on "
            f"{k.node_of('quickstart-ps-0')}; the chief restored step {restored}"
        )
        assert restored >= before_kill, (restored, before_kill)
        landing.upto(restored + 5 * EVERY)

        # The chief's whole node stopped: its pods come back on the other node and the
        # chief resumes from the last checkpoint.
        if kind_is_ours():
            wait_for(
                lambda: k.progress("quickstart", "lastCheckpointStep") > restored,
                900, "a checkpoint after the restore",
            )  # fmt: skip
            at = k.progress("quickstart", "step")
            assert at <= landing.steps < STEPS * 3 // 4, (at, landing.steps)
            before_stop = k.progress("quickstart", "lastCheckpointStep")
            stopped = k.node_of("quickstart-chief-0")
            pods = json.loads(
                k.kubectl("get", "pods", "-l", "training.etj.dev/job-name=quickstart",
                          "-o", "json").stdout
            )["items"]  # fmt: skip
            lost = {
                p["metadata"]["name"]: p["metadata"]["uid"]
                for p in pods
                if p["spec"].get("nodeName") == stopped
            }
            docker("stop", stopped)
            k.mark(f"node {stopped} stopped at step {at} (checkpoint {before_stop}): {lost}")
            for pod_name, pod_uid in lost.items():
                wait_for(
                    lambda pod_name=pod_name, pod_uid=pod_uid: back_elsewhere(
                        k, pod_name, pod_uid, stopped
                    ),
                    600, f"{pod_name} running on another node",
                )  # fmt: skip
            k.mark(f"{sorted(lost)} running again off {stopped}")
            resumed = wait_for(
                lambda: k.restored_step("quickstart-chief-0"), 600, "the chief to resume"
            )
            k.mark(f"the chief resumed from step {resumed} (last checkpoint {before_stop})")
            assert resumed >= before_stop, (resumed, before_stop)
            # The node back, for whatever runs on this cluster next (kind-up.sh redoes its
            # pod routes and waits for it Ready): beside the rest of the flow.
            docker("start", stopped)
            node_back = subprocess.Popen(
                ["bash", str(ROOT / "tests/cluster/kind-up.sh")],
                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=ROOT,
            )  # fmt: skip
        # The rest of the quickstart's data: it trains on to its last step.
        landing.upto(STEPS)

        gcs_saved, gcs_restored = gcs_kill.result(timeout=900)
        assert gcs_restored >= gcs_saved, (gcs_restored, gcs_saved)
        for name in ("quickstart", "oom"):
            wait_for(
                lambda name=name: k.phase(name) in ("Succeeded", "Failed"),
                1800, f"{name} to finish", every=3,
            )  # fmt: skip
            final = k.status(name)
            k.mark(f"{name}: {final['phase']}")
            assert final["phase"] == "Succeeded", json.dumps(final, indent=1)[-3000:]

        table = k.kubectl("get", "etj", "quickstart").stdout
        assert "Succeeded" in table and str(STEPS) in table, table
        # Every ps wrote its shards and the chief the index, from two nodes, into one
        # directory of the host.
        assert sorted(on_host.rglob("*.index")), f"no checkpoint index under {on_host}"
        assert sorted(on_host.rglob("*.data-*")), f"no checkpoint data under {on_host}"
        # gs://: the objects, on the host directory fake-gcs-server keeps them in.
        objects = [p.name for p in (SHARED / "gcs" / GCS_BUCKET / prefix).rglob("*")]
        assert any(o.endswith(".index") for o in objects), objects
        assert any(".data-" in o for o in objects), objects
        # The operator stops the ps on success: by their SIGTERM (143), as PID 1 of their
        # containers, not by the kubelet's SIGKILL (137) at the end of the grace period.
        selector = "training.etj.dev/job-name=quickstart,training.etj.dev/replica-type=ps"
        wait_for(
            lambda: k.kubectl("get", "pods", "-l", selector, "-o", "name").stdout.strip() == "",
            120, "the ps pods stopped",
        )  # fmt: skip
        ended = watch.terminations()
        for i in range(2):
            last = [code for p, code, _ in ended if p == f"quickstart-ps-{i}"][-1:]
            assert last == [143], (i, ended)
        # The kernel's kill as the kubelet reports it, and a larger limit after it.
        killed = oom_watch.terminations()
        assert ("oom-worker-0", 137, "OOMKilled") in killed, killed
        limit = k.kubectl(
            "get", "pod", "oom-worker-0", "-o",
            "jsonpath={.spec.containers[0].resources.limits.memory}", check=False,
        ).stdout  # fmt: skip
        assert limit != "128Mi", limit

        # The gs:// job trains to its last step; its end is the trainer's export.
        def gcs_end() -> str | None:
            st = k.status("gcs")
            if st.get("phase") in ("Succeeded", "Failed"):
                return st["phase"]
            at_end = int((st.get("progress") or {}).get("step") or 0) >= GCS_STEPS
            failing = [
                c["message"]
                for c in st.get("conditions") or []
                if c["type"] == "Restarting" and "NotFoundError" in c.get("message", "")
            ]
            return f"Restarting at its last step: {failing[0]}" if at_end and failing else None

        end = wait_for(gcs_end, 900, "the gs:// job to end", every=3)
        k.mark(f"gcs: {end}")
        # Before the fix (etj_trainer.task.serving_model.local_io) the export staged in
        # the chief's local directory was written by each ps on its own filesystem:
        # NotFoundError .../etj-export-*/.../variables_temp, the job never Succeeded.
        assert end == "Succeeded", end
    finally:
        watch.stop()
        oom_watch.stop()
        # The jobs' own claims go with them (owner references); the data claim is the test's.
        k.kubectl("delete", "pvc", DATA_CLAIM, "--ignore-not-found", "--wait=false", check=False)
        if stopped and node_back is None:
            docker("start", stopped, check=False)
        if node_back is not None:
            out, _ = node_back.communicate(timeout=600)
            assert node_back.returncode == 0, out[-3000:]
            k.mark(f"node {stopped} back and Ready")


def test_tf_checkpoint_on_fake_gcs_from_a_pod(kind: Kind) -> None:
    """gs:// from inside the cluster, step by step: TensorFlow in the trainer image saves,
    lists, renames and restores checkpoints on fake-gcs-server (the kind cluster's
    stand-in for GCS, tests/cluster/kind-fake-gcs.sh); the objects are seen on the host."""
    k = kind
    name = "gcs-probe"
    prefix = f"probe-{os.getpid()}"
    # The loopback test's roundtrip, keeping the checkpoints (no rmtree) for the host to see.
    script = CHECKPOINT_ROUNDTRIP.replace('step("rmtree", remove_tree)', "")
    assert script != CHECKPOINT_ROUNDTRIP
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {
            "restartPolicy": "Never",
            "hostAliases": [{"ip": GCS_IP, "hostnames": list(GCS_HOSTS)}],
            "containers": [
                {
                    "name": "probe",
                    "image": TRAINER_IMAGE,
                    "imagePullPolicy": "Never",
                    "command": ["python", "-c", script, f"gs://{GCS_BUCKET}/{prefix}"],
                    "env": [*GCS_ENV, {"name": "TF_CPP_MIN_LOG_LEVEL", "value": "2"}],
                    "volumeMounts": [{"name": "ca", "mountPath": GCS_CA_DIR}],
                }
            ],
            "volumes": [{"name": "ca", "configMap": {"name": "etj-gcs-ca"}}],
        },
    }
    k.kubectl("delete", "pod", name, "--ignore-not-found", "--wait=true")
    k.apply(pod)
    try:

        def done() -> str | None:
            got = k.kubectl("get", "pod", name, "-o", "jsonpath={.status.phase}").stdout
            return got if got in ("Succeeded", "Failed") else None

        phase = wait_for(done, 600, "the probe pod to finish")
        logs = k.kubectl("logs", name).stdout
        assert phase == "Succeeded", logs[-3000:]
        result = [ln for ln in logs.splitlines() if ln.startswith("RESULT ")]
        assert result, logs[-3000:]
        steps = json.loads(result[0][len("RESULT ") :])
        failed = {s: v["error"] for s, v in steps.items() if not v["ok"]}
        assert not failed, failed
        assert steps["restore"]["value"] == {"step": 300, "emb_equal": True}
        objects = sorted(p.name for p in (SHARED / "gcs" / GCS_BUCKET / prefix).iterdir())
        assert any("ckpt-300.index" in o for o in objects), objects
    finally:
        k.kubectl("delete", "pod", name, "--ignore-not-found", "--wait=false", check=False)


# The chains a container engine, kube-proxy, kind or a CNI plugin adds (the engine here
# runs with --iptables=false; kube-proxy and kindnet add theirs inside the nodes).
CHAIN_PREFIXES = ("DOCKER", "KUBE-", "KIND-", "CNI-")
# What the chart installs with one replica (as here) and must go with `helm uninstall`
# (asserted present first); with more replicas also a PodDisruptionBudget.
RELEASE_KINDS = {
    "ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Deployment", "Service",
    "ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding",
}  # fmt: skip


def cluster_chains(rules: str) -> list[str]:
    """The chains of CHAIN_PREFIXES that ``iptables -S`` (``-N name``) or ``iptables-save``
    (``:name policy``) output declares."""
    names = [
        line[3:].split()[0] if line.startswith("-N ") else line[1:].split()[0]
        for line in rules.splitlines()
        if line.startswith("-N ") or (line.startswith(":") and len(line) > 1)
    ]
    return [n for n in names if n.startswith(CHAIN_PREFIXES)]


def release_objects(manifest: str) -> list[tuple[str, str, str | None]]:
    """(kind, name, namespace or None) of every object of ``helm get manifest``."""
    docs = [d for d in yaml.safe_load_all(manifest) if d]
    return [(d["kind"], d["metadata"]["name"], d["metadata"].get("namespace")) for d in docs]


def test_the_leftover_checks_find_what_they_look_for() -> None:
    """The e2e's leftover checks on outputs that hold what they look for (no cluster)."""
    save = ":KUBE-SERVICES - [0:0]\n:INPUT ACCEPT [0:0]\n-N KIND-MASQ-AGENT\n-A INPUT -j KUBE-X"
    assert cluster_chains(save) == ["KUBE-SERVICES", "KIND-MASQ-AGENT"]
    assert cluster_chains("-P INPUT ACCEPT\n-N f2b-sshd\n") == []
    manifest = "---\nkind: ClusterRole\nmetadata: {name: etj}\n---\n# empty\n---\n" + (
        "kind: Service\nmetadata: {name: etj-metrics, namespace: etj-system}\n"
    )
    assert release_objects(manifest) == [
        ("ClusterRole", "etj", None), ("Service", "etj-metrics", "etj-system")
    ]  # fmt: skip
    chart = subprocess.run(
        [str(KIND_BIN_DIR / "helm"), "template", RELEASE, "charts/etj", "--namespace", NS,
         "--set", "replicaCount=2"],
        capture_output=True, text=True, cwd=ROOT,
    )  # fmt: skip
    if chart.returncode != 0:
        pytest.skip(f"helm template: {chart.stderr.strip()[:200] or 'no helm binary'}")
    kinds = {kind for kind, _, _ in release_objects(chart.stdout)}
    assert kinds >= RELEASE_KINDS | {"PodDisruptionBudget"}, kinds


def host_leftovers() -> list[str]:
    """What the private Docker engine or the kind nodes could leave on this host."""
    left = []
    procs = subprocess.run(["pgrep", "-af", "etj-docker"], capture_output=True, text=True)
    left += [f"process: {p}" for p in procs.stdout.splitlines() if "pgrep" not in p]
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        point = line.split()[4]
        if "etj-docker" in point or "etj-kind" in point or f"{CACHE}/docker" in point:
            left.append(f"mount: {point}")
    links = subprocess.run(["ip", "-o", "link", "show"], capture_output=True, text=True).stdout
    for line in links.splitlines():
        link = line.split(": ")[1].split("@")[0]
        if link == "docker0" or (link.startswith("br-") and len(link) == 15):
            left.append(f"network link: {link}")
    for tool in filter(shutil.which, ("iptables-legacy", "iptables-nft")):
        for table in ("filter", "nat", "mangle", "raw"):
            got = subprocess.run([tool, "-t", table, "-S"], capture_output=True, text=True)
            left += [f"{tool} -t {table}: -N {c}" for c in cluster_chains(got.stdout)]
    return left


@pytest.mark.extended  # make test-all; CI has the same chain on the local control plane with its process node (tests/integration/scenarios/test_daily_chain_node.py) and the images on kind in the tests above
def test_daily_chain_a_cronjob_creates_each_day_and_day_two_warm_starts(installed: Kind) -> None:
    """examples/daily as its files say to run it: the logs claim filled by its Job (the
    trainer image), the CronJob with its RBAC creating each day's generateName job from
    the ConfigMap template; day 1 trains on day 1's logs, day 2 (a third ps, a table
    added) finds day 1 by its label, mounts its claim read-only and warm-starts from it;
    beside them the day-2 model from scratch on day 2 alone, the same budget. The
    warm-started model's held-out AUC on day 2 beats the other's (printed).

    Here (offline) the CronJob's pod runs the operator's image with the node's own
    kubectl mounted in: the example names Kubernetes' kubectl image, which is not loaded."""
    k = installed
    daily = ROOT / "examples" / "daily"

    def docs(name: str) -> list[dict]:
        return [d for d in yaml.safe_load_all((daily / name).read_text()) if d]

    def template(name: str) -> None:
        """The CronJob's template, made as cronjob.yaml says."""
        made = k.kubectl(
            "create", "configmap", "ctr-daily-job", f"--from-file=job.yaml={daily / name}",
            "--dry-run=client", "-o", "yaml",
        ).stdout  # fmt: skip
        k.kubectl("apply", "-f", "-", input=made)

    def chain_jobs() -> list[str]:
        return k.kubectl(
            "get", "etj", "-l", "chain=ctr-daily", "-o", "jsonpath={.items[*].metadata.name}"
        ).stdout.split()  # fmt: skip

    def run_day(day: int, before: list[str]) -> str:
        k.kubectl("set", "env", "cronjob/ctr-daily", f"DAY=day-{day}")
        k.kubectl("create", "job", "--from=cronjob/ctr-daily", f"ctr-daily-day-{day}")
        (made,) = wait_for(
            lambda: [n for n in chain_jobs() if n not in before] or None,
            300, f"the CronJob to create day {day}'s job",
        )  # fmt: skip
        k.mark(f"day {day}: the CronJob created {made}")
        return str(made)

    def finished(name: str) -> dict:
        wait_for(
            lambda: k.phase(name) in ("Succeeded", "Failed"), 1500, f"{name} to finish", every=3
        )
        status = k.status(name)
        k.mark(f"{name}: {status['phase']}")
        assert status["phase"] == "Succeeded", json.dumps(status, indent=1)[-3000:]
        return status

    logs = docs("logs.yaml")
    generate = logs[1]["spec"]["template"]["spec"]["containers"][0]
    generate["image"], generate["imagePullPolicy"] = TRAINER_IMAGE, "Never"
    cron = docs("cronjob.yaml")
    pod = cron[-1]["spec"]["jobTemplate"]["spec"]["template"]["spec"]
    assert cron[-1]["kind"] == "CronJob"
    container = pod["containers"][0]
    container["image"], container["imagePullPolicy"] = OPERATOR_IMAGE, "Never"
    container["volumeMounts"].append(
        {"name": "kubectl", "mountPath": "/usr/local/bin/kubectl", "readOnly": True}
    )
    pod["volumes"].append(
        {"name": "kubectl", "hostPath": {"path": "/usr/bin/kubectl", "type": "File"}}
    )
    scratch = yaml.safe_load((daily / "day-2.yaml").read_text())
    scratch["metadata"] = {"name": "daily-scratch"}
    del scratch["spec"]["warmStart"]
    cleanup = [
        ("cronjob", "ctr-daily"), ("job", "ctr-daily-day-1"), ("job", "ctr-daily-day-2"),
        ("configmap", "ctr-daily-job"), ("rolebinding", "ctr-daily"), ("role", "ctr-daily"),
        ("serviceaccount", "ctr-daily"), ("etj", "daily-scratch"), ("job", "click-logs"),
    ]  # fmt: skip
    # Nothing left of an earlier run: a job made again under the name of one still being
    # deleted would get its claim deleted under it.
    for kind_, name in cleanup:
        k.kubectl("delete", kind_, name, "--ignore-not-found", timeout=300)
    k.kubectl("delete", "etj", "-l", "chain=ctr-daily", "--ignore-not-found", timeout=300)
    k.kubectl("delete", "pvc", "click-logs", "--ignore-not-found", timeout=300)
    wait_for(
        lambda: not k.kubectl(
            "get", "pvc", "daily-scratch-checkpoints", "--ignore-not-found", "-o", "name"
        ).stdout.strip(),
        300, "an earlier daily-scratch's claim gone",
    )  # fmt: skip
    try:
        k.apply(logs)
        k.kubectl(
            "wait", "--for=condition=Complete", "job/click-logs", "--timeout=600s", timeout=660
        )
        k.mark("click-logs: two days of generated logs on the claim")
        k.apply(cron)
        # The from-scratch day 2 beside day 1: it needs nothing of it.
        k.apply(scratch)
        template("day-1.yaml")
        first = run_day(1, [])
        finished(first)
        # The model grew overnight: the template is now day 2's.
        template("day-2.yaml")
        second = run_day(2, [first])
        warm = finished(second)
        cold = finished("daily-scratch")

        ws = warm["warmStart"]
        assert ws["sourceJob"] == first and ws["step"] == 160, ws
        assert ws["volume"] == {
            "persistentVolumeClaim": {"claimName": f"{first}-checkpoints", "readOnly": True}
        }, ws
        assert [(t["name"], t["action"]) for t in ws["tables"]] == [
            ("user", "Restored"), ("item", "Restored"), ("position", "StartedFresh"),
        ]  # fmt: skip
        # Day 2's serving versions (spec.export) and final export, on its claim's host
        # directory: the newest version is status.export's, whole, and no other is left
        # but the two kept.
        volume = k.kubectl(
            "get", "pvc", f"{second}-checkpoints", "-o", "jsonpath={.spec.volumeName}"
        ).stdout  # fmt: skip
        host_path = k.kubectl("get", "pv", volume, "-o", "jsonpath={.spec.hostPath.path}").stdout
        on_host = SHARED / host_path.removeprefix("/var/lib/etj-shared/")
        assert (on_host / second / "export" / "serving" / "saved_model.pb").is_file(), on_host
        base = on_host / second / "serving"
        versions = sorted(v for p in base.iterdir() if (v := version_of(p.name)) is not None)
        assert 1 <= len(versions) <= 2, versions
        assert warm["export"]["lastVersion"] == versions[-1], (warm["export"], versions)
        assert warm["export"]["step"] == 160, warm["export"]
        assert (base / str(versions[-1]) / "saved_model.pb").is_file()

        auc = {"warm": warm["evaluation"]["auc"], "scratch": cold["evaluation"]["auc"]}
        for status in (warm, cold):
            assert status["evaluation"]["step"] == 160, status["evaluation"]
        k.mark(
            f"day-2 held-out AUC: warm-started from day 1 {auc['warm']:.4f}, from scratch "
            f"on day 2 alone {auc['scratch']:.4f}"
        )
        # The margin of the same check on the local control plane (test_daily_chain_node.py).
        assert auc["warm"] > auc["scratch"] + 0.03, auc
    finally:
        for kind_, name in [*cleanup, ("pvc", "click-logs")]:
            k.kubectl("delete", kind_, name, "--ignore-not-found", "--wait=false", check=False)
        k.kubectl("delete", "etj", "-l", "chain=ctr-daily", "--wait=false", check=False)


def test_uninstall_and_cluster_deletion_leave_nothing(installed: Kind) -> None:
    """Last: helm uninstall leaves no object of etj; deleting the cluster (only one this
    suite brought up) leaves no container, Docker network, iptables chain or mount."""
    k = installed
    k.kubectl("delete", "etj", "--all", "--wait=true", timeout=300)
    release = release_objects(k.helm("get", "manifest", RELEASE, "--namespace", NS).stdout)
    assert {kind for kind, _, _ in release} >= RELEASE_KINDS, release
    k.helm("uninstall", RELEASE, "--namespace", NS, "--wait")

    def managed() -> str:
        return k.kubectl(
            "get", "all,pvc,configmap", "-A", "-l", "app.kubernetes.io/managed-by=etj", "-o", "name"
        ).stdout.strip()  # fmt: skip

    def installed_left() -> list[str]:
        return [
            f"{kind}/{name}"
            for kind, name, ns in release
            if k.kubectl(
                "get", kind, name, "--namespace", ns or NS, "--ignore-not-found", "-o", "name"
            ).stdout.strip()
        ]  # fmt: skip

    wait_for(lambda: managed() == "", 120, "no object etj created left after helm uninstall")
    wait_for(lambda: installed_left() == [], 120, "no object of the release left")
    # A positive control for the host's iptables check: the chains kube-proxy and kindnet
    # add inside a node are found by the same parser (whichever iptables backend it uses).
    if kind_is_ours():
        node = f"{yaml.safe_load((ROOT / 'kind-config.yaml').read_text())['name']}-control-plane"
        inside = [
            c
            for tool in ("iptables-legacy", "iptables-nft")
            for c in cluster_chains(
                docker("exec", node, tool, "-t", "nat", "-S", check=False).stdout
            )
        ]
        assert any(c.startswith("KUBE-") for c in inside), inside
        k.mark(f"inside {node}: {len(inside)} chains of kube-proxy and kind, e.g. {inside[:3]}")
    k.mark(f"helm uninstall: none of the release's {len(release)} objects left, nothing of etj")
    if not kind_is_ours():
        return
    kind_bin = str(CACHE / "bin" / "kind")
    cluster = yaml.safe_load((ROOT / "kind-config.yaml").read_text())["name"]
    env = {**os.environ, "DOCKER_HOST": "unix:///run/etj-docker/docker.sock"}
    subprocess.run(
        [kind_bin, "delete", "cluster", "--name", cluster], check=True, env=env, timeout=300
    )
    assert docker("ps", "-aq").stdout.strip() == "", docker("ps", "-a").stdout
    k.mark("kind delete cluster: no container")
    # kind keeps its Docker network; kind-down.sh removes it with the engine, and the host
    # check below finds its bridge (br-<id>) if anything is left of it.
    got = subprocess.run(
        ["bash", str(ROOT / "tests/cluster/kind-down.sh")], capture_output=True, text=True
    )
    assert got.returncode == 0, got.stdout + got.stderr
    assert host_leftovers() == []
    k.mark("kind-down: engine stopped; no process, mount, network link or iptables chain left")

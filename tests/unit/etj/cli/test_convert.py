"""`etj convert`: Kubeflow TFJob manifests (PS with a chief, MWMS, with an evaluator, and
TFJob's own shapes: dist-mnist's PS + Worker without a Chief, Worker only with OnFailure, a
GPU Worker with a claim, a Volcano gang) become jobs that `etj validate` accepts and that
render the TFJob's containers; what etj cannot express is refused naming the TFJob field."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from etj.api.job import EmbeddingTrainingJob
from etj.api.roles import Role
from etj.api.spec import GangScheduler
from etj.cli.convert import ConversionError, convert_tfjob
from etj.cli.main import main
from etj.core.render import RenderSettings, build_pods
from etj.core.render.pod import replica_set
from etj.core.render.scheduling import build_gang, gang_scheduler
from etj.core.validation import validate_manifest

CASES = Path(__file__).resolve().parents[3] / "cases" / "tfjob"
TFJOBS = [
    "ps.yaml",
    "mwms.yaml",
    "evaluator.yaml",
    "dist-mnist.yaml",
    "simple.yaml",
    "gpu-pvc.yaml",
    "gang-volcano.yaml",
    "generate-name.yaml",
    "exported.yaml",
]
ROLE = {
    "chief": "chief",
    "master": "chief",
    "worker": "worker",
    "ps": "ps",
    "evaluator": "evaluator",
}


def _tfjob(name: str) -> dict:
    return yaml.safe_load((CASES / name).read_text())


@pytest.mark.parametrize("name", TFJOBS)
def test_converted_job_is_valid_and_renders_the_same_containers(name):
    tfjob = _tfjob(name)
    result = validate_manifest(convert_tfjob(tfjob))
    assert result.ok, result.problems
    pods = build_pods(result.job, result.plan, RenderSettings())
    expected = {ROLE[k.lower()]: rs for k, rs in tfjob["spec"]["tfReplicaSpecs"].items()}
    counts = {}
    for pod in pods:
        role = pod["metadata"]["labels"]["training.etj.dev/replica-type"]
        counts[role] = counts.get(role, 0) + 1
        given = expected[role]["template"]["spec"]
        rendered = {c["name"]: c for c in pod["spec"]["containers"]}
        for c in given["containers"]:
            mine = rendered["trainer" if c["name"] == "tensorflow" else c["name"]]
            assert mine["image"] == c["image"]
            assert mine.get("command") == c.get("command")  # none: the image's entrypoint
            assert mine.get("args") == c.get("args")
            env = {e["name"]: e for e in mine.get("env") or []}
            for e in c.get("env") or []:
                assert env[e["name"]] == e
            for m in c.get("volumeMounts") or []:
                assert m in mine["volumeMounts"]
            # the security context the TFJob gives, else none (the image as it was built)
            assert mine.get("securityContext", {}) == c.get("securityContext", {})
            if c["name"] == "tensorflow":
                tf_config = json.loads(env["TF_CONFIG"]["value"])
                assert tf_config["task"]["type"] == role
                given_resources = c.get("resources") or {}
                if role == "ps":
                    # etj sizes the ps for the shard plan: what the TFJob gives stays, the
                    # memory the plan needs is added.
                    for kind in ("limits", "requests"):
                        for k, v in (given_resources.get(kind) or {}).items():
                            if k != "memory" or kind == "limits":
                                assert mine["resources"][kind][k] == v
                else:
                    # The program's own replicas get exactly what the TFJob asks for.
                    assert mine.get("resources", {}) == given_resources
        assert len(rendered) == len(given["containers"])
        assert pod["spec"]["securityContext"] == given.get("securityContext", {})
        for key in ("initContainers", "schedulerName", "topologySpreadConstraints", "nodeSelector"):
            if key in given:
                assert pod["spec"][key] == given[key]
        for v in given.get("volumes") or []:
            assert v in pod["spec"]["volumes"]
        assert pod["spec"]["restartPolicy"] == "Never"  # etj restarts replicas itself
    assert counts == {role: rs.get("replicas", 1) for role, rs in expected.items()}


def test_ps_tfjob_maps_strategy_and_run_policy():
    job = convert_tfjob(_tfjob("ps.yaml"))
    spec = job["spec"]
    assert spec["strategy"] == "ParameterServer"
    assert spec["replicas"]["ps"]["replicas"] == 2
    assert spec["runPolicy"] == {
        "cleanPodPolicy": "Running",
        "backoffLimit": 4,
        "activeDeadlineSeconds": 7200,
        "ttlSecondsAfterFinished": 600,
        "restartPolicy": "OnFailure",
    }
    assert job["metadata"] == {"name": "ctr-ps", "namespace": "ml", "labels": {"team": "ranking"}}
    # The ps memory is where the planner reads it: the role's resources.
    assert spec["replicas"]["ps"]["resources"] == {
        "requests": {"cpu": "2", "memory": "16Gi"},
        "limits": {"memory": "16Gi"},
    }
    assert "resources" not in spec["replicas"]["ps"]["template"]["spec"]["containers"][0]
    assert convert_tfjob(_tfjob("mwms.yaml"))["spec"]["strategy"] == "MultiWorkerMirrored"
    assert convert_tfjob(_tfjob("mwms.yaml"))["spec"]["runPolicy"]["restartPolicy"] == "ExitCode"


def test_model_is_taken_when_given():
    model = {"embeddings": [{"name": "user_id", "vocabularySize": 1000, "dimension": 8}]}
    job = convert_tfjob(_tfjob("ps.yaml"), model)
    result = validate_manifest(job)
    assert result.ok and [t.name for t in result.plan.tables] == ["user_id"]


def _broken(change) -> dict:
    tfjob = copy.deepcopy(_tfjob("evaluator.yaml"))
    change(tfjob)
    return tfjob


@pytest.mark.parametrize(
    ("change", "field"),
    [
        (lambda t: t["spec"].update(successPolicy="AllWorkers"), "spec.successPolicy"),
        (lambda t: t["spec"].update(enableDynamicWorker=True), "spec.enableDynamicWorker"),
        (
            lambda t: t["spec"].update(
                runPolicy={"schedulingPolicy": {"minResources": {"cpu": "3"}}}
            ),
            "spec.runPolicy.schedulingPolicy.minResources",
        ),
        (
            lambda t: t["spec"]["tfReplicaSpecs"]["Worker"]["template"].update(
                metadata={"annotations": {"scheduling.k8s.io/group-name": "someone-elses"}}
            ),
            "spec.tfReplicaSpecs.Worker.template.metadata.annotations",
        ),
        (
            lambda t: t["spec"]["tfReplicaSpecs"]["Master"].update(replicas=2),
            "spec.tfReplicaSpecs.Master.replicas",
        ),
        (
            lambda t: (
                t["spec"]["tfReplicaSpecs"].pop("Master")
                and t["spec"]["tfReplicaSpecs"]["Worker"].update(replicas=0)
            ),
            "spec.tfReplicaSpecs.Worker.replicas",
        ),
        (lambda t: t["spec"].update(successPolicy="AnyWorker"), "spec.successPolicy"),
        (
            lambda t: t["spec"]["tfReplicaSpecs"].update(
                Chief=t["spec"]["tfReplicaSpecs"]["Master"]
            ),
            "spec.tfReplicaSpecs.Chief",
        ),
        (lambda t: t["spec"]["tfReplicaSpecs"].update(Launcher={}), "spec.tfReplicaSpecs.Launcher"),
        (
            lambda t: t["spec"]["tfReplicaSpecs"]["PS"]["template"]["spec"]["containers"][0].update(
                name="main"
            ),
            "spec.tfReplicaSpecs.PS.template.spec.containers",
        ),
        (lambda t: t.update(apiVersion="kubeflow.org/v1beta1"), "apiVersion"),
        (lambda t: t.update(kind="PyTorchJob"), "kind"),
    ],
)
def test_what_etj_cannot_express_names_the_field(change, field):
    with pytest.raises(ConversionError) as e:
        convert_tfjob(_broken(change))
    assert e.value.field.startswith(field), str(e.value)


def test_cli_prints_a_valid_job(tmp_path):
    result = CliRunner().invoke(main, ["convert", str(CASES / "ps.yaml")], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    job = yaml.safe_load(result.stdout)
    assert job["kind"] == "EmbeddingTrainingJob"
    path = tmp_path / "job.yaml"
    path.write_text(result.stdout)
    check = CliRunner().invoke(main, ["validate", str(path)], catch_exceptions=False)
    assert check.exit_code == 0 and "ctr-ps: valid (ParameterServer, 2 ps)" in check.output


def test_cli_fails_naming_the_field(tmp_path):
    tfjob = _tfjob("mwms.yaml")
    tfjob["spec"]["tfReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]["env"] = [
        {"name": "TF_CONFIG", "value": "{}"}
    ]
    path = tmp_path / "tfjob.yaml"
    path.write_text(yaml.safe_dump(tfjob))
    result = CliRunner().invoke(main, ["convert", str(path)])
    assert result.exit_code == 2
    assert "spec.replicas.worker.template" in result.output and "TF_CONFIG" in result.output
    tfjob["spec"]["successPolicy"] = "AnyWorker"
    path.write_text(yaml.safe_dump(tfjob))
    result = CliRunner().invoke(main, ["convert", str(path)])
    assert result.exit_code == 2 and "spec.successPolicy" in result.output


def test_cli_model_option(tmp_path):
    model = tmp_path / "model.yaml"
    model.write_text(
        yaml.safe_dump(
            {"embeddings": [{"name": "ad_id", "vocabularySize": 10**6, "dimension": 32}]}
        )
    )
    result = CliRunner().invoke(
        main, ["convert", str(CASES / "ps.yaml"), "--model", str(model)], catch_exceptions=False
    )
    assert result.exit_code == 0, result.output
    assert "placeholder" not in result.output
    job = yaml.safe_load(result.output)
    assert job["spec"]["model"]["embeddings"][0]["name"] == "ad_id"
    default = CliRunner().invoke(main, ["convert", str(CASES / "ps.yaml")]).output
    assert default.startswith("# Converted by `etj convert` from TFJob ctr-ps.")
    assert "placeholder" in default.splitlines()[1]


def _pods(name: str) -> tuple[dict, list[dict]]:
    job = convert_tfjob(_tfjob(name))
    result = validate_manifest(job)
    assert result.ok, result.problems
    return job, build_pods(result.job, result.plan, RenderSettings())


def _env(pod: dict) -> dict[str, str]:
    return {e["name"]: e.get("value") for e in pod["spec"]["containers"][0]["env"]}


def test_dist_mnist_keeps_tfjobs_shape_worker_0_is_the_chief():
    job, pods = _pods("dist-mnist.yaml")
    assert job["spec"]["strategy"] == "ParameterServer"
    assert job["spec"]["replicas"]["chief"] == {"replicas": 0}
    assert job["spec"]["runPolicy"] == {"restartPolicy": "OnFailure"}
    names = sorted(p["metadata"]["name"] for p in pods)
    assert names == [f"dist-mnist-ps-{i}" for i in range(2)] + [
        f"dist-mnist-worker-{i}" for i in range(4)
    ]
    for pod in pods:
        tf_config = json.loads(_env(pod)["TF_CONFIG"])
        # As TFJob writes it: no chief entry, ps and workers by index.
        assert sorted(tf_config["cluster"]) == ["ps", "worker"]
        assert len(tf_config["cluster"]["worker"]) == 4 and len(tf_config["cluster"]["ps"]) == 2
        ports = {p["name"] for p in pod["spec"]["containers"][0]["ports"]}
        # Worker 0 leads: it alone serves the metrics page etj reads.
        assert ("metrics" in ports) == (pod["metadata"]["name"] == "dist-mnist-worker-0")
        if tf_config["task"]["type"] == "worker":
            # What a worker of the user's program serves is the program's: no probe.
            assert "readinessProbe" not in pod["spec"]["containers"][0]
        else:
            assert pod["spec"]["containers"][0]["readinessProbe"]["tcpSocket"]["port"] == 2222


def test_all_workers_success_policy_is_carried_over():
    tfjob = _tfjob("dist-mnist.yaml")
    tfjob["spec"]["successPolicy"] = "AllWorkers"
    job = convert_tfjob(tfjob)
    assert job["spec"]["runPolicy"]["successPolicy"] == "AllWorkers"
    assert validate_manifest(job).ok
    tfjob["spec"]["successPolicy"] = ""
    assert "successPolicy" not in convert_tfjob(tfjob)["spec"]["runPolicy"]
    # Next to a Chief, TFJob ignores it: refused rather than dropped.
    with_chief = _tfjob("ps.yaml")
    with_chief["spec"]["successPolicy"] = "AllWorkers"
    with pytest.raises(ConversionError, match="Chief's exit decides") as e:
        convert_tfjob(with_chief)
    assert e.value.field == "spec.successPolicy"


def test_worker_only_and_gpu_jobs_have_no_chief_and_keep_their_resources():
    job, pods = _pods("simple.yaml")
    assert job["spec"]["strategy"] == "MultiWorkerMirrored"
    assert "chief" not in job["spec"]["replicas"]
    assert job["spec"]["runPolicy"] == {"restartPolicy": "OnFailure"}
    assert {json.loads(_env(p)["TF_CONFIG"])["task"]["type"] for p in pods} == {"worker"}
    job, pods = _pods("gpu-pvc.yaml")
    (pod,) = pods
    assert pod["spec"]["containers"][0]["resources"] == {"limits": {"nvidia.com/gpu": 1}}
    assert {"name": "tfevent-volume", "persistentVolumeClaim": {"claimName": "tfevent-volume"}} in (
        pod["spec"]["volumes"]
    )
    assert {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"} in pod["spec"][
        "tolerations"
    ]
    assert job["spec"]["runPolicy"] == {"cleanPodPolicy": "All", "restartPolicy": "OnFailure"}


def test_volcano_gang_becomes_the_jobs_scheduling_policy():

    job, pods = _pods("gang-volcano.yaml")
    assert job["spec"]["runPolicy"]["schedulingPolicy"] == {
        "minAvailable": 4,
        "queue": "training",
        "priorityClass": "high-priority",
        "gangScheduler": "Volcano",
    }
    # The template's own group annotation goes: etj sets it to the PodGroup it makes.
    for role in ("chief", "worker", "ps"):
        assert "metadata" not in job["spec"]["replicas"][role]["template"]
    for pod in pods:
        assert pod["metadata"]["annotations"]["scheduling.k8s.io/group-name"] == "tfjob-gang"
        assert pod["spec"]["schedulerName"] == "volcano"
        assert pod["spec"]["priorityClassName"] == "high-priority"
    result = validate_manifest(job)
    parsed = EmbeddingTrainingJob.from_manifest(job)
    backend = gang_scheduler(parsed, GangScheduler.NONE)
    assert backend == GangScheduler.VOLCANO
    group = build_gang(parsed, replica_set(parsed, result.plan), backend, {}, None, lambda r, i: {})
    assert group["kind"] == "PodGroup" and group["metadata"]["name"] == "tfjob-gang"
    assert group["spec"] == {
        "minMember": 4,
        "queue": "training",
        "priorityClassName": "high-priority",
    }
    # A template on volcano alone asks for the gang too.
    tfjob = _tfjob("gang-volcano.yaml")
    del tfjob["spec"]["runPolicy"]
    for rs in tfjob["spec"]["tfReplicaSpecs"].values():
        del rs["template"]["metadata"]
    assert convert_tfjob(tfjob)["spec"]["runPolicy"]["schedulingPolicy"] == {
        "gangScheduler": "Volcano"
    }


def test_worker_and_evaluator_without_a_chief():
    """TFJob's Worker + Evaluator shape: no chief, worker 0 leads; the evaluator gets the
    training cluster (workers only) with its own task, outside ``cluster``."""
    tfjob = _tfjob("evaluator.yaml")
    for key in ("Master", "PS"):
        del tfjob["spec"]["tfReplicaSpecs"][key]
    job = convert_tfjob(tfjob)
    assert job["spec"]["strategy"] == "MultiWorkerMirrored"
    assert set(job["spec"]["replicas"]) == {"worker", "evaluator"}
    result = validate_manifest(job)
    assert result.ok, result.problems
    assert replica_set(result.job, result.plan).leader() == ("worker", 0)
    configs = {
        p["metadata"]["name"]: json.loads(_env(p)["TF_CONFIG"])
        for p in build_pods(result.job, result.plan, RenderSettings())
    }
    assert sorted(configs) == ["wide-deep-eval-evaluator-0"] + [
        f"wide-deep-eval-worker-{i}" for i in range(2)
    ]
    for tf_config in configs.values():
        assert sorted(tf_config["cluster"]) == ["worker"]
    assert configs["wide-deep-eval-evaluator-0"]["task"] == {"type": "evaluator", "index": 0}


def test_a_generate_name_tfjob_keeps_it_and_validates_under_it(tmp_path):
    job = convert_tfjob(_tfjob("generate-name.yaml"))
    assert job["metadata"] == {"generateName": "tfjob", "namespace": "your-user-namespace"}
    result = validate_manifest(job)
    assert result.ok, result.problems
    path = tmp_path / "job.yaml"
    out = CliRunner().invoke(main, ["convert", str(CASES / "generate-name.yaml")])
    assert out.exit_code == 0, out.output
    assert out.stdout.startswith("# Converted by `etj convert` from TFJob tfjob(generated).")
    path.write_text(out.stdout)
    check = CliRunner().invoke(main, ["validate", str(path)])
    assert check.exit_code == 0, check.output
    named = CliRunner().invoke(
        main, ["convert", str(CASES / "generate-name.yaml"), "--name", "mnist-1"]
    )
    assert yaml.safe_load(named.stdout)["metadata"]["name"] == "mnist-1"
    assert "generateName" not in yaml.safe_load(named.stdout)["metadata"]


def test_no_name_at_all_says_what_to_give():
    tfjob = _tfjob("generate-name.yaml")
    del tfjob["metadata"]["generateName"]
    with pytest.raises(ConversionError, match=r"\(or metadata\.generateName, or --name\)"):
        convert_tfjob(tfjob)
    assert convert_tfjob(tfjob, name="given")["metadata"]["name"] == "given"


def test_an_own_program_job_with_a_small_ps_validates_and_keeps_its_requests():
    """etj judges no ps memory it does not plan: the program's own 200Mi ps is rendered
    with the template's own requests."""
    job = convert_tfjob(_tfjob("exported.yaml"))
    result = validate_manifest(job)
    assert result.ok, result.problems
    (ps,) = [
        p
        for p in build_pods(EmbeddingTrainingJob.from_manifest(job), result.plan, RenderSettings())
        if p["metadata"]["labels"]["training.etj.dev/replica-type"] == "ps"
    ]
    (main_container,) = [c for c in ps["spec"]["containers"] if c["name"] == "trainer"]
    assert main_container["resources"] == {
        "requests": {"cpu": "100m", "memory": "200Mi"},
        "limits": {"memory": "200Mi"},
    }


def test_every_field_not_carried_is_one_warning_line_and_the_rest_is_carried():
    warnings: list[str] = []
    job = convert_tfjob(_tfjob("exported.yaml"), warnings=warnings)
    assert warnings == [
        "metadata.uid: not carried: the API server sets it for the new job",
        "metadata.resourceVersion: not carried: the API server sets it for the new job",
        "metadata.generation: not carried: the API server sets it for the new job",
        "metadata.creationTimestamp: not carried: the API server sets it for the new job",
        "metadata.managedFields: not carried: the API server sets it for the new job",
        "status: not carried: the new job reports its own",
        "spec.runPolicy.managedBy: not carried: 'kubeflow.org/training-operator' names "
        "Kubeflow's controller",
    ]
    run_policy = job["spec"]["runPolicy"]
    assert run_policy == {
        "cleanPodPolicy": "None",
        "backoffLimit": 3,
        "activeDeadlineSeconds": 3600,
        "ttlSecondsAfterFinished": 120,
        # The Pod-level restartPolicy (no replica-level one) is the replica's.
        "restartPolicy": "OnFailure",
    }
    out = CliRunner().invoke(main, ["convert", str(CASES / "exported.yaml")])
    lines = [line for line in out.stderr.splitlines() if line]
    assert lines == [f"exported.yaml: warning: {w}" for w in warnings] or lines == [
        f"{CASES / 'exported.yaml'}: warning: {w}" for w in warnings
    ]


def test_a_pod_restart_policy_the_replicas_overrides_is_warned():
    tfjob = _tfjob("simple.yaml")
    tfjob["spec"]["tfReplicaSpecs"]["Worker"]["template"]["spec"]["restartPolicy"] = "Never"
    warnings: list[str] = []
    job = convert_tfjob(tfjob, warnings=warnings)
    assert job["spec"]["runPolicy"]["restartPolicy"] == "OnFailure"
    assert warnings == [
        "spec.tfReplicaSpecs.Worker.template.spec.restartPolicy: not carried: "
        "spec.tfReplicaSpecs.Worker.restartPolicy (OnFailure) overrides it, as in TFJob"
    ]


def test_restart_policies_that_differ_per_role_are_carried_per_role():
    """The one most replicas give is the job's; the others are their roles' own (a ps'
    Never too: the TFJob's author asked that a failed ps fail the job)."""
    tfjob = _tfjob("ps.yaml")
    specs = tfjob["spec"]["tfReplicaSpecs"]
    specs["Chief"]["restartPolicy"] = "OnFailure"
    specs["Worker"]["restartPolicy"] = "Never"
    specs["PS"]["restartPolicy"] = "Never"
    job = convert_tfjob(tfjob)
    assert job["spec"]["runPolicy"]["restartPolicy"] == "Never"
    assert job["spec"]["replicas"]["chief"]["restartPolicy"] == "OnFailure"
    assert "restartPolicy" not in job["spec"]["replicas"]["worker"]
    assert "restartPolicy" not in job["spec"]["replicas"]["ps"]
    spec = EmbeddingTrainingJob.from_manifest(job).spec
    assert (
        spec.replicas.restart_policy_of(Role.CHIEF, spec.run_policy.restart_policy) == "OnFailure"
    )
    assert spec.replicas.restart_policy_of(Role.PS, spec.run_policy.restart_policy) == "Never"

"""Rendering of spec.checkpoint (uri, storage, credentials) and spec.placement (spread over
nodes, short tolerations of a lost node): what every replica's Pod and the trainer get."""

from __future__ import annotations

import copy
import json
from typing import Any

from etj.api import EmbeddingTrainingJob
from etj.api.constants import LABEL_RETAINED
from etj.api.trainer import TrainerConfig
from etj.core.planner import build_plan
from etj.core.render import RenderSettings, build_config_map, build_pod
from etj.core.render.build import build_checkpoint_claim, build_objects
from tests.unit.conftest import job_manifest

BODY: dict[str, Any] = {
    "strategy": "ParameterServer",
    "replicas": {"worker": {"replicas": 2}, "ps": {"replicas": 2}},
    "model": {"embeddings": [{"name": "user_id", "vocabularySize": 1000, "dimension": 8}]},
}


def job(**extra: Any) -> EmbeddingTrainingJob:
    return EmbeddingTrainingJob.from_manifest(
        job_manifest({**copy.deepcopy(BODY), **extra}, name="ctr", uid="u-1")
    )


def pod(j: EmbeddingTrainingJob, role: str = "ps", settings: RenderSettings | None = None):
    return build_pod(j, build_plan(j.spec), role, 0, settings or RenderSettings())


def trainer_config(j: EmbeddingTrainingJob) -> TrainerConfig:
    cm = build_config_map(j, build_plan(j.spec), RenderSettings())
    return TrainerConfig.model_validate(json.loads(cm["data"]["trainer.json"]))


def volumes(p: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {v["name"]: v for v in p["spec"]["volumes"]}


def env(p: dict[str, Any]) -> dict[str, Any]:
    return {e["name"]: e.get("value") for e in p["spec"]["containers"][0]["env"]}


# ---- checkpoint.uri ---------------------------------------------------------------------


def test_the_trainer_checkpoints_to_the_uri_per_namespace_and_job():
    j = job(checkpoint={"uri": "gs://bucket/etj/"})
    config = trainer_config(j)
    assert config.checkpoint is not None
    assert config.checkpoint.directory == "gs://bucket/etj/team-a/ctr"
    assert config.export_dir == "gs://bucket/etj/team-a/ctr/export"
    # No checkpoint volume: the trainer writes to the uri itself.
    assert "checkpoints" not in volumes(pod(j))


def test_without_a_uri_the_trainer_checkpoints_under_the_mount():
    j = job(checkpoint={"storage": {}})
    assert trainer_config(j).checkpoint.directory == "/var/lib/etj/checkpoints/ctr"  # type: ignore[union-attr]


def test_gs_credentials_come_from_the_secret_as_a_file_never_as_a_value():
    j = job(
        checkpoint={
            "uri": "gs://bucket/etj",
            "credentialsSecret": {"name": "gcs-key", "key": "sa.json"},
        }
    )
    p = pod(j)
    secret = volumes(p)["gcs-credentials"]["secret"]
    assert secret == {"secretName": "gcs-key", "items": [{"key": "sa.json", "path": "sa.json"}]}
    mount = next(
        m for m in p["spec"]["containers"][0]["volumeMounts"] if m["name"] == "gcs-credentials"
    )
    assert mount == {
        "name": "gcs-credentials",
        "mountPath": "/var/run/secrets/etj/gcs",
        "readOnly": True,
    }
    assert env(p)["GOOGLE_APPLICATION_CREDENTIALS"] == "/var/run/secrets/etj/gcs/sa.json"
    # Workload identity: nothing set.
    plain = pod(job(checkpoint={"uri": "gs://bucket/etj"}))
    assert "GOOGLE_APPLICATION_CREDENTIALS" not in env(plain)
    assert "gcs-credentials" not in volumes(plain)


# ---- checkpoint.storage: the claim etj makes --------------------------------------------


def test_storage_is_a_read_write_many_claim_owned_by_the_job_and_mounted_everywhere():
    j = job(checkpoint={"storage": {"size": "20Gi"}})
    claim = build_checkpoint_claim(j, RenderSettings())
    assert claim is not None
    assert claim["metadata"]["name"] == "ctr-checkpoints"
    assert claim["metadata"]["ownerReferences"][0]["uid"] == "u-1"
    assert claim["spec"] == {
        "accessModes": ["ReadWriteMany"],
        "resources": {"requests": {"storage": "20Gi"}},
    }
    for role in ("chief", "worker", "ps"):
        source = volumes(pod(j, role))["checkpoints"]
        assert source["persistentVolumeClaim"] == {"claimName": "ctr-checkpoints"}
    kinds = [o["kind"] for o in build_objects(j, build_plan(j.spec))]
    assert kinds.index("PersistentVolumeClaim") < kinds.index("Pod")


def test_the_storage_class_is_the_jobs_else_the_operators_else_the_clusters():
    settings = RenderSettings(storage_class="nfs-rwx")
    mine = job(checkpoint={"storage": {"storageClassName": "efs-sc"}})
    assert build_checkpoint_claim(mine, settings)["spec"]["storageClassName"] == "efs-sc"  # type: ignore[index]
    default = job(checkpoint={"storage": {}})
    assert build_checkpoint_claim(default, settings)["spec"]["storageClassName"] == "nfs-rwx"  # type: ignore[index]
    assert "storageClassName" not in build_checkpoint_claim(default, RenderSettings())["spec"]  # type: ignore[index]


def test_a_retained_claim_has_no_owner_and_is_labelled():
    claim = build_checkpoint_claim(job(checkpoint={"storage": {"retain": True}}), RenderSettings())
    assert claim is not None
    assert "ownerReferences" not in claim["metadata"]
    assert claim["metadata"]["labels"][LABEL_RETAINED] == "true"
    assert claim["metadata"]["labels"]["training.etj.dev/job-name"] == "ctr"


def test_no_storage_no_claim():
    assert build_checkpoint_claim(job(checkpoint={"uri": "/shared"}), RenderSettings()) is None


# ---- placement: spread and node loss ----------------------------------------------------


def test_replicas_of_a_role_spread_over_nodes_by_default():
    j = job(checkpoint={"storage": {}})
    (spread,) = pod(j, "ps")["spec"]["topologySpreadConstraints"]
    assert spread == {
        "maxSkew": 1,
        "topologyKey": "kubernetes.io/hostname",
        "whenUnsatisfiable": "ScheduleAnyway",
        "labelSelector": {
            "matchLabels": {
                "training.etj.dev/job-name": "ctr",
                "training.etj.dev/replica-type": "ps",
            }
        },
    }
    worker = pod(j, "worker")["spec"]["topologySpreadConstraints"][0]
    assert worker["labelSelector"]["matchLabels"]["training.etj.dev/replica-type"] == "worker"


def test_spread_can_be_turned_off_or_replaced_by_a_role_template():
    off = job(checkpoint={"storage": {}}, placement={"spread": False})
    assert "topologySpreadConstraints" not in pod(off)["spec"]
    own = [{"maxSkew": 2, "topologyKey": "topology.kubernetes.io/zone", "whenUnsatisfiable": "DoNotSchedule", "labelSelector": {"matchLabels": {"a": "b"}}}]  # fmt: skip
    body = copy.deepcopy(BODY)
    body["replicas"]["ps"]["template"] = {"spec": {"topologySpreadConstraints": own}}
    j = EmbeddingTrainingJob.from_manifest(
        job_manifest({**body, "checkpoint": {"storage": {}}}, name="ctr")
    )
    assert pod(j, "ps")["spec"]["topologySpreadConstraints"] == own


def _tolerations(p: dict[str, Any]) -> dict[str, Any]:
    return {t["key"]: t.get("tolerationSeconds") for t in p["spec"]["tolerations"]}


def test_a_lost_node_is_tolerated_30s_not_300s_and_both_settings_override_it():
    j = job(checkpoint={"storage": {}})
    assert _tolerations(pod(j)) == {
        "node.kubernetes.io/not-ready": 30,
        "node.kubernetes.io/unreachable": 30,
    }
    assert set(_tolerations(pod(j, "chief", RenderSettings(node_loss_seconds=45))).values()) == {45}
    mine = job(checkpoint={"storage": {}}, placement={"nodeLossSeconds": 10})
    assert set(_tolerations(pod(mine, settings=RenderSettings(node_loss_seconds=45))).values()) == {
        10
    }
    for t in pod(j)["spec"]["tolerations"]:
        assert t["effect"] == "NoExecute" and t["operator"] == "Exists"


def test_the_jobs_own_toleration_of_a_node_taint_wins():
    own = {"key": "node.kubernetes.io/unreachable", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 600}  # fmt: skip
    j = job(checkpoint={"storage": {}}, podTemplate={"tolerations": [own]})
    tolerations = pod(j)["spec"]["tolerations"]
    assert [t for t in tolerations if t["key"] == "node.kubernetes.io/unreachable"] == [own]
    assert _tolerations(pod(j))["node.kubernetes.io/not-ready"] == 30


# ---- spec.export and spec.tensorboard ----------------------------------------------------


def test_serving_versions_go_beside_the_checkpoints_as_the_spec_says():
    j = job(checkpoint={"uri": "gs://bucket/etj/"}, export={"everySeconds": 600, "keep": 2})
    export = trainer_config(j).export
    assert export is not None
    assert export.directory == "gs://bucket/etj/team-a/ctr/serving"
    assert (export.every_steps, export.every_seconds, export.keep) == (None, 600, 2)
    # The final export stays where it was.
    assert trainer_config(j).export_dir == "gs://bucket/etj/team-a/ctr/export"
    assert trainer_config(job(checkpoint={"storage": {}})).export is None
    assert export.delta_directory is None


def test_deltas_go_beside_the_serving_versions():
    spec = {"everySeconds": 600, "deltaSeconds": 60}
    export = trainer_config(job(checkpoint={"uri": "gs://bucket/etj/"}, export=spec)).export
    assert export is not None
    assert export.delta_directory == "gs://bucket/etj/team-a/ctr/deltas"
    assert (export.delta_seconds, export.delta_steps) == (60, None)


def test_summaries_go_beside_the_checkpoints_or_per_job_under_the_tensorboard_uri():
    assert (
        trainer_config(job(checkpoint={"storage": {}})).tensorboard_dir
        == "/var/lib/etj/checkpoints/ctr/tensorboard"
    )
    j = job(checkpoint={"storage": {}}, tensorboard={"uri": "gs://logs/tb/"})
    assert trainer_config(j).tensorboard_dir == "gs://logs/tb/team-a/ctr"

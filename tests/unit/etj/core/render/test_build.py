"""The renderer: golden files for the examples, and the properties every render must have."""

from __future__ import annotations

import json
import os

import pytest
import yaml

from etj.api import EmbeddingTrainingJob, TrainerConfig
from etj.api.constants import (
    LABEL_JOB_NAME,
    LABEL_MANAGED_BY,
    LABEL_NAME,
    LABEL_REPLICA_INDEX,
    LABEL_REPLICA_TYPE,
)
from etj.api.quantity import quantity_bytes
from etj.core.crd import to_yaml
from etj.core.planner import build_plan
from etj.core.render import RenderSettings, build_objects, build_pod
from tests.unit.conftest import ROOT, load_example

GOLDEN = ROOT / "tests" / "unit" / "golden"
EXAMPLES = ["quickstart.yaml", "mirrored.yaml", "large-tables.yaml"]


def rendered(manifest: dict, settings: RenderSettings | None = None) -> list[dict]:
    job = EmbeddingTrainingJob.from_manifest(manifest)
    return build_objects(job, build_plan(job.spec), settings)


@pytest.mark.parametrize("example", EXAMPLES)
def test_golden(example):
    manifest = load_example(example)
    # A uid and generation as the API server would set, so owner references are covered.
    manifest["metadata"].update(uid="0b1c2d3e-0000-4000-8000-000000000001", generation=1)
    text = "---\n".join(to_yaml(o) for o in rendered(manifest))
    golden = GOLDEN / example
    if os.environ.get("ETJ_UPDATE_GOLDEN") == "1":
        golden.write_text(text)
    assert golden.read_text() == text, (
        f"rendering of examples/{example} changed; if intended, rerun with ETJ_UPDATE_GOLDEN=1"
    )


def pods_of(objects: list[dict]) -> list[dict]:
    return [o for o in objects if o["kind"] == "Pod"]


def env_of(pod: dict) -> dict[str, str]:
    return {e["name"]: e.get("value") for e in pod["spec"]["containers"][0]["env"]}


@pytest.mark.parametrize("example", EXAMPLES)
def test_all_pods_agree_on_one_cluster_of_exactly_these_pods(example):
    objects = rendered(load_example(example))
    pods = pods_of(objects)
    configs = [json.loads(env_of(p)["TF_CONFIG"]) for p in pods]
    cluster = configs[0]["cluster"]
    assert all(c["cluster"] == cluster for c in configs)
    service = next(o for o in objects if o["kind"] == "Service")
    ns = pods[0]["metadata"]["namespace"]
    expected = {
        f"{p['spec']['hostname']}.{p['spec']['subdomain']}.{ns}.svc:2222"
        for p in pods
        if p["metadata"]["labels"][LABEL_REPLICA_TYPE] != "evaluator"
    }
    assert {a for addrs in cluster.values() for a in addrs} == expected
    for p, c in zip(pods, configs, strict=True):
        labels = p["metadata"]["labels"]
        assert c["task"] == {
            "type": labels[LABEL_REPLICA_TYPE],
            "index": int(labels[LABEL_REPLICA_INDEX]),
        }
        assert p["spec"]["subdomain"] == service["metadata"]["name"]
        assert all(labels[k] == v for k, v in service["spec"]["selector"].items())


def test_service_is_headless_and_publishes_not_ready_addresses():
    service = rendered(load_example("quickstart.yaml"))[0]
    assert service["spec"]["clusterIP"] == "None"
    assert service["spec"]["publishNotReadyAddresses"] is True


def test_quickstart_pods_are_chief_workers_and_ps():
    pods = pods_of(rendered(load_example("quickstart.yaml")))
    assert sorted(p["metadata"]["name"] for p in pods) == [
        "quickstart-chief-0",
        "quickstart-ps-0",
        "quickstart-ps-1",
        "quickstart-worker-0",
        "quickstart-worker-1",
    ]


def test_mirrored_has_no_ps_no_chief_and_worker_zero_serves_metrics():
    pods = pods_of(rendered(load_example("mirrored.yaml")))
    assert [p["metadata"]["labels"][LABEL_REPLICA_TYPE] for p in pods] == ["worker", "worker"]
    assert "ps" not in json.loads(env_of(pods[0])["TF_CONFIG"])["cluster"]
    ports = [p["name"] for p in pods[0]["spec"]["containers"][0]["ports"]]
    assert "metrics" in ports


@pytest.mark.parametrize("example", EXAMPLES)
def test_every_pod_is_labelled_owned_non_root_with_checkpoints(example):
    manifest = load_example(example)
    manifest["metadata"]["uid"] = "uid-1"
    for obj in rendered(manifest):
        labels = obj["metadata"]["labels"]
        assert labels[LABEL_NAME] == "etj" and labels[LABEL_MANAGED_BY] == "etj"
        assert labels[LABEL_JOB_NAME] == manifest["metadata"]["name"]
        (owner,) = obj["metadata"]["ownerReferences"]
        assert owner["uid"] == "uid-1" and owner["controller"] is True
    for pod in pods_of(rendered(manifest)):
        spec = pod["spec"]
        assert spec["securityContext"]["runAsNonRoot"] is True
        assert spec["restartPolicy"] == "Never"
        container = spec["containers"][0]
        assert container["securityContext"]["allowPrivilegeEscalation"] is False
        mounts = {m["name"]: m["mountPath"] for m in container["volumeMounts"]}
        assert mounts["checkpoints"] == manifest["spec"].get("checkpoint", {}).get(
            "mountPath", "/var/lib/etj/checkpoints"
        )
        assert any(v["name"] == "checkpoints" for v in spec["volumes"])
        assert env_of(pod)["ETJ_TRAINER_CONFIG"] == "/etc/etj/trainer.json"


def test_no_owner_reference_without_uid():
    for obj in rendered(load_example("quickstart.yaml")):
        assert "ownerReferences" not in obj["metadata"]


@pytest.mark.parametrize(
    "text", ["/\U00010000", "/a\\ud800\\udc00b", "/x\U0010ffff\\\\\U00010000", "/<&'>\u0085\ufffe"]
)
def test_any_string_renders_back_unchanged(text):
    # Found by test_spec_fuzz: JSON's surrogate pairs for characters outside the BMP are
    # not YAML, so such a mountPath made rendering raise.
    job = load_example("quickstart.yaml")
    job["spec"]["checkpoint"] = {"mountPath": text}
    pod = rendered(job)[2]
    assert pod["spec"]["containers"][0]["volumeMounts"][1]["mountPath"] == text


def test_trainer_config_carries_the_plan_and_parses():
    manifest = load_example("large-tables.yaml")
    job = EmbeddingTrainingJob.from_manifest(manifest)
    plan = build_plan(job.spec)
    cm = build_objects(job, plan)[1]
    config = TrainerConfig.model_validate_json(cm["data"]["trainer.json"])
    assert config.shard_plan == plan
    assert config.strategy == "ParameterServer"
    assert config.checkpoint is not None and config.checkpoint.directory.endswith("/ctr-large")
    assert config.model == job.spec.model


def test_ps_memory_request_covers_the_plan_and_limit_is_the_budget():
    job = EmbeddingTrainingJob.from_manifest(load_example("large-tables.yaml"))
    plan = build_plan(job.spec)
    for ps in plan.ps:
        pod = build_pod(job, plan, "ps", ps.index, RenderSettings())
        res = pod["spec"]["containers"][0]["resources"]
        assert quantity_bytes(res["requests"]["memory"]) >= ps.memory_request_bytes
        assert quantity_bytes(res["limits"]["memory"]) == quantity_bytes("8Gi")
        assert res["requests"]["cpu"] == "2"


def test_pod_template_overrides_are_merged():
    pod = pods_of(rendered(load_example("large-tables.yaml")))[0]
    spec = pod["spec"]
    assert spec["nodeSelector"] == {"node.kubernetes.io/instance-type": "m6i.4xlarge"}
    # etj's own node-loss tolerations first, the job's after them.
    assert [t["key"] for t in spec["tolerations"]][-1] == "dedicated"
    assert spec["priorityClassName"] == "batch-high"
    assert env_of(pod)["TF_CPP_MIN_LOG_LEVEL"] == "1"
    data = [v for v in spec["volumes"] if v["name"] == "data"]
    assert data and data[0]["persistentVolumeClaim"]["claimName"] == "ctr-data"


def test_oom_memory_override_raises_one_replica_limit():
    job = EmbeddingTrainingJob.from_manifest(load_example("quickstart.yaml"))
    plan = build_plan(job.spec)
    settings = RenderSettings(memory_limits={"quickstart-worker-1": 3 * 2**30})
    w0 = build_pod(job, plan, "worker", 0, settings)
    w1 = build_pod(job, plan, "worker", 1, settings)
    assert w1["spec"]["containers"][0]["resources"]["limits"]["memory"] == "3Gi"
    assert "limits" not in w0["spec"]["containers"][0]["resources"]


def test_rendering_is_deterministic():
    manifest = load_example("large-tables.yaml")
    assert rendered(manifest) == rendered(manifest)


def test_examples_dir_has_only_valid_jobs():
    from etj.core.validation import validate_manifest

    for path in sorted((ROOT / "examples").glob("*.yaml")):
        for doc in yaml.safe_load_all(path.read_text()):
            if doc and doc.get("kind") == "EmbeddingTrainingJob":
                result = validate_manifest(doc)
                assert result.ok, f"{path.name}: {result.problems}"

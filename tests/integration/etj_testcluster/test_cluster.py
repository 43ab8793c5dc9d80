"""The local control plane is a real Kubernetes API server: version, CRD schema, printer
columns, kubectl explain, garbage collection."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from etj_testcluster import LocalCluster
from etj_testcluster.cluster import K8S_VERSION
from tests.integration.conftest import ROOT, apply_invalid, get_json, wait_for

pytestmark = pytest.mark.integration


def quickstart() -> dict:
    return yaml.safe_load((ROOT / "examples" / "quickstart.yaml").read_text())


def test_server_reports_the_version_built(cluster: LocalCluster):
    out = json.loads(cluster.kubectl("version", "-o", "json").stdout)
    assert out["serverVersion"]["gitVersion"] == K8S_VERSION
    assert out["clientVersion"]["gitVersion"] == K8S_VERSION


def test_node_is_registered_and_ready(cluster: LocalCluster):
    node = get_json(cluster, "node", "etj-local-node")
    ready = {c["type"]: c["status"] for c in node["status"]["conditions"]}
    assert ready["Ready"] == "True"
    # The API server canonicalises quantities: "1000" is stored as "1k".
    assert node["status"]["allocatable"]["pods"] == "1k"
    assert node["status"]["allocatable"]["cpu"] == "64"
    assert node["status"]["nodeInfo"]["kubeletVersion"] == K8S_VERSION
    # The not-ready taint admission put on it is lifted, or nothing would schedule.
    assert not node["spec"].get("taints")


def test_scheduler_binds_a_pod_to_the_node(api_client, namespace: str):
    from kubernetes import client

    core = client.CoreV1Api(api_client)
    pod = client.V1Pod(
        metadata=client.V1ObjectMeta(name="p"),
        spec=client.V1PodSpec(
            containers=[
                client.V1Container(
                    name="c",
                    image="busybox",
                    resources=client.V1ResourceRequirements(requests={"cpu": "1", "memory": "1Gi"}),
                )
            ]
        ),
    )
    core.create_namespaced_pod(namespace, pod)
    node = wait_for(
        lambda: core.read_namespaced_pod("p", namespace).spec.node_name,
        120,
        "the scheduler to bind the pod",
    )
    assert node == "etj-local-node"


def test_valid_job_is_stored_and_read_back_with_defaults(crds: LocalCluster, namespace: str):
    crds.kubectl("apply", "-n", namespace, "-f", str(ROOT / "examples" / "quickstart.yaml"))
    job = get_json(crds, "etj", "quickstart", "-n", namespace)
    assert job["spec"]["model"]["embeddings"][0]["vocabularySize"] == 200000
    # Schema defaults are applied by the API server.
    assert job["spec"]["model"]["embeddings"][0]["dtype"] == "float32"
    assert job["spec"]["runPolicy"]["backoffLimit"] == 5


def test_bad_job_rejected_by_the_api_server(crds: LocalCluster, namespace: str):
    bad = quickstart()
    bad["spec"]["strategy"] = "Sideways"
    bad["spec"]["model"]["embeddings"][0]["vocabularySize"] = -1
    error = apply_invalid(crds, bad, namespace)
    assert "spec.strategy" in error and "Unsupported value" in error
    assert "vocabularySize" in error


def test_cel_rule_rejects_ps_for_mirrored(crds: LocalCluster, namespace: str):
    bad = quickstart()
    bad["spec"]["strategy"] = "MultiWorkerMirrored"
    error = apply_invalid(crds, bad, namespace)
    assert "replicas.ps is only for strategy ParameterServer" in error


def test_get_prints_the_printer_columns(crds: LocalCluster, namespace: str):
    crds.kubectl("apply", "-n", namespace, "-f", str(ROOT / "examples" / "quickstart.yaml"))
    status = {
        "status": {
            "phase": "Running",
            "strategy": "ParameterServer",
            "workers": "2/2",
            "restarts": 1,
            "shardPlan": {
                "strategy": "ParameterServer",
                "psReplicas": 2,
                "totalBytes": 1,
                "tables": [],
                "ps": [],
            },
            "progress": {"step": 1234},
            "evaluation": {"step": 1000, "auc": 0.7812, "logloss": 0.45, "examples": 5000},
        }
    }
    crds.kubectl(
        "patch",
        "etj",
        "quickstart",
        "-n",
        namespace,
        "--subresource=status",
        "--type=merge",
        "-p",
        json.dumps(status),
    )
    out = crds.kubectl("get", "etj", "-n", namespace).stdout.splitlines()
    assert out[0].split() == [
        "NAME",
        "STRATEGY",
        "PHASE",
        "WORKERS",
        "PS",
        "STEP",
        "RESTARTS",
        "AUC",
        "AGE",
    ]
    assert out[1].split()[:8] == [
        "quickstart",
        "ParameterServer",
        "Running",
        "2/2",
        "2",
        "1234",
        "1",
        "0.7812",
    ]


def test_explain_shows_field_descriptions(crds: LocalCluster):
    out = wait_for(lambda: crds.kubectl("explain", "etj.spec", check=False).stdout, 120, "explain")
    assert "The desired training job." in out
    assert "strategy" in out and "ParameterServer (tables sharded over ps)" in out
    deep = crds.kubectl("explain", "etj.spec.sharding.maxShardBytes").stdout
    assert "Largest shard, counting its optimizer slots." in deep


def test_owned_object_is_garbage_collected(crds: LocalCluster, namespace: str):
    crds.kubectl("apply", "-n", namespace, "-f", str(ROOT / "examples" / "quickstart.yaml"))
    uid = get_json(crds, "etj", "quickstart", "-n", namespace)["metadata"]["uid"]
    cm = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": "child",
            "namespace": namespace,
            "ownerReferences": [
                {
                    "apiVersion": "training.etj.dev/v1alpha1",
                    "kind": "EmbeddingTrainingJob",
                    "name": "quickstart",
                    "uid": uid,
                }
            ],
        },
    }
    crds.kubectl("apply", "-f", "-", input=json.dumps(cm))
    crds.kubectl("delete", "etj", "quickstart", "-n", namespace, "--wait=false")
    wait_for(
        lambda: (
            crds.kubectl("get", "configmap", "child", "-n", namespace, check=False).returncode != 0
        ),
        120,
        "the owned ConfigMap to be garbage-collected",
    )


def test_component_logs_are_files(cluster: LocalCluster):
    for component in ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler"):
        assert Path(cluster.logs / f"{component}.log").exists()

"""Converted TFJobs on the real API server: the CRD stores every template whole (a pruned
command or volume would silently run something else), under kubectl's strict field
validation; and the pods etj renders from them pass the server's own Pod validation."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from etj.cli.convert import convert_tfjob
from etj.core.render import RenderSettings, build_pods
from etj.core.validation import validate_manifest
from etj_testcluster import LocalCluster

pytestmark = pytest.mark.integration

CASES = Path(__file__).resolve().parents[3] / "cases" / "tfjob"


@pytest.mark.parametrize(
    "name",
    [
        "ps.yaml",
        "mwms.yaml",
        "evaluator.yaml",
        "dist-mnist.yaml",
        "simple.yaml",
        "gpu-pvc.yaml",
        "gang-volcano.yaml",
    ],
)
def test_converted_job_is_stored_whole_and_its_pods_are_valid(
    crds: LocalCluster, namespace: str, name: str
):
    job = convert_tfjob(yaml.safe_load((CASES / name).read_text()))
    job["metadata"]["namespace"] = namespace
    # (dist-mnist: a ParameterServer job without a chief passes the CRD's CEL rules too.)
    crds.kubectl("apply", "--validate=strict", "-f", "-", input=json.dumps(job))
    stored = json.loads(
        crds.kubectl(
            "get", "embeddingtrainingjobs", job["metadata"]["name"], "-n", namespace, "-o", "json"
        ).stdout
    )
    for role, spec in job["spec"]["replicas"].items():
        if "template" in spec:
            assert stored["spec"]["replicas"][role]["template"] == spec["template"], role
    result = validate_manifest(stored)
    assert result.ok, result.problems
    for pod in build_pods(result.job, result.plan, RenderSettings()):
        pod["metadata"].pop("ownerReferences", None)
        if "priorityClassName" in pod["spec"]:
            # The gang's priority class is the cluster's to define (the server checks it).
            priority_class = {
                "apiVersion": "scheduling.k8s.io/v1",
                "kind": "PriorityClass",
                "metadata": {"name": pod["spec"]["priorityClassName"]},
                "value": 1000,
            }
            crds.kubectl("apply", "-f", "-", input=json.dumps(priority_class))
        out = crds.kubectl(
            "create", "--dry-run=server", "-f", "-", input=json.dumps(pod), check=False
        )
        assert out.returncode == 0, f"{pod['metadata']['name']}: {out.stderr}"

"""How the local Kueue's webhooks are pointed at a process on 127.0.0.1
(etj_testcluster.kueue)."""

from __future__ import annotations

import fcntl
from pathlib import Path

import pytest
import yaml

from etj_testcluster.kueue import (
    build_lock,
    crds_with_conversion,
    kueue_version,
    wait_for_build,
    webhook_configurations,
)
from etj_testcluster.waiting import WaitTimeout

MANIFESTS = """
apiVersion: admissionregistration.k8s.io/v1
kind: MutatingWebhookConfiguration
metadata: {name: mutating-webhook-configuration}
webhooks:
- name: mjob.kb.io
  clientConfig: {service: {name: webhook-service, namespace: system, path: /mutate-batch-v1-job}}
  rules: [{apiGroups: [batch], apiVersions: [v1], operations: [CREATE], resources: [jobs]}]
- name: mpod.kb.io
  clientConfig: {service: {name: webhook-service, namespace: system, path: /mutate--v1-pod}}
  failurePolicy: Fail
  rules: [{apiGroups: [""], apiVersions: [v1], operations: [CREATE], resources: [pods]}]
---
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingWebhookConfiguration
metadata: {name: validating-webhook-configuration}
webhooks:
- name: vworkload.kb.io
  clientConfig: {service: {name: webhook-service, namespace: system, path: /validate-kueue-x-k8s-io-v1beta2-workload}}
  rules: [{apiGroups: [kueue.x-k8s.io], apiVersions: [v1beta2], operations: [CREATE], resources: [workloads]}]
- name: vdeployment.kb.io
  clientConfig: {service: {name: webhook-service, namespace: system, path: /validate-apps-v1-deployment}}
  rules: [{apiGroups: [apps], apiVersions: [v1], operations: [CREATE], resources: [deployments]}]
"""


def test_only_pod_and_kueue_webhooks_are_kept_and_called_by_url():
    mutating, validating = webhook_configurations(MANIFESTS, 9443, "Q0E=")
    (pod,) = mutating["webhooks"]
    assert pod["name"] == "mpod.kb.io" and pod["failurePolicy"] == "Fail"
    assert pod["clientConfig"] == {
        "url": "https://127.0.0.1:9443/mutate--v1-pod",
        "caBundle": "Q0E=",
    }
    (workload,) = validating["webhooks"]
    assert workload["clientConfig"]["url"].endswith("/validate-kueue-x-k8s-io-v1beta2-workload")


def test_a_configuration_left_empty_is_dropped():
    only_jobs = MANIFESTS.split("---")[0].replace("resources: [pods]", "resources: [replicasets]")
    assert webhook_configurations(only_jobs, 1, "x") == []


def test_converted_kinds_get_the_conversion_webhook_by_url(tmp_path: Path):
    for plural in ("workloads", "resourceflavors"):
        crd = {"kind": "CustomResourceDefinition", "spec": {"names": {"plural": plural}}}
        (tmp_path / f"{plural}.yaml").write_text(yaml.safe_dump(crd))
    by_plural = {
        c["spec"]["names"]["plural"]: c for c in crds_with_conversion(tmp_path, 9443, "Q0E=")
    }
    conversion = by_plural["workloads"]["spec"]["conversion"]
    assert conversion["strategy"] == "Webhook"
    assert conversion["webhook"]["clientConfig"]["url"] == "https://127.0.0.1:9443/convert"
    assert "conversion" not in by_plural["resourceflavors"]["spec"]


def test_a_test_waits_for_the_kueue_build_beside_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    """make test builds Kueue beside the cluster lane's tests: while build-kueue.sh holds
    its lock, the Kueue test waits (here: misses a short deadline); once it is released,
    it goes on. No lock file (no build ever started): no wait."""
    monkeypatch.setenv("ETJ_CACHE", str(tmp_path))
    wait_for_build(timeout=0.1)  # no lock file
    lock = build_lock()
    lock.parent.mkdir(parents=True)
    with lock.open("w") as held:
        fcntl.flock(held, fcntl.LOCK_EX)
        with pytest.raises(WaitTimeout, match="Kueue build"):
            wait_for_build(timeout=0.5)
        fcntl.flock(held, fcntl.LOCK_UN)
    wait_for_build(timeout=60)


def test_the_build_script_and_the_tests_name_one_lock():
    script = (Path(__file__).parents[3] / "tests/cluster/build-kueue.sh").read_text()
    assert 'exec 9>"$CACHE/bin/kueue-$KUEUE_VERSION.lock"' in script
    assert build_lock().name == f"kueue-{kueue_version()}.lock"

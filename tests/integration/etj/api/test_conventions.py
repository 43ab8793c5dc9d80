"""Kubernetes conventions on the real API server (issue 15, item 3): a change of
``spec.runPolicy.managedBy`` is rejected, a condition without a reason is rejected, and
``kubectl get etj-all`` (etj's own category) lists the jobs while ``kubectl get etj``
keeps meaning the jobs."""

from __future__ import annotations

import json

import pytest

from etj_testcluster import LocalCluster
from tests.integration.conftest import get_json
from tests.integration.etj.controller.test_operator import apply, job

pytestmark = pytest.mark.integration


def _patch(cluster: LocalCluster, namespace: str, patch: dict, *extra: str):  # type: ignore[no-untyped-def]
    return cluster.kubectl(
        "patch",
        "etj",
        "ctr",
        "-n",
        namespace,
        "--type=merge",
        "-p",
        json.dumps(patch),
        *extra,
        check=False,
    )


def test_managed_by_cannot_change_on_a_live_job(crds: LocalCluster, namespace: str):
    apply(crds, namespace, job())
    stored = get_json(crds, "etj", "ctr", "-n", namespace)
    # Not given: the schema's default is stored, so the rule has something to hold on to.
    assert stored["spec"]["runPolicy"]["managedBy"] == "training.etj.dev/operator"

    changed = _patch(
        crds, namespace, {"spec": {"runPolicy": {"managedBy": "kueue.x-k8s.io/multikueue"}}}
    )
    assert changed.returncode != 0
    assert "managedBy is immutable" in changed.stderr
    assert "spec.runPolicy.managedBy" in changed.stderr
    after = get_json(crds, "etj", "ctr", "-n", namespace)
    assert after["spec"]["runPolicy"]["managedBy"] == "training.etj.dev/operator"

    # Other fields of runPolicy stay mutable (suspend is how Kueue drives a job).
    ok = _patch(crds, namespace, {"spec": {"runPolicy": {"suspend": True}}})
    assert ok.returncode == 0, ok.stderr
    assert get_json(crds, "etj", "ctr", "-n", namespace)["spec"]["runPolicy"]["suspend"] is True


def test_a_job_created_without_run_policy_cannot_gain_another_manager(
    crds: LocalCluster, namespace: str
):
    doc = job()
    del doc["spec"]["runPolicy"]
    apply(crds, namespace, doc)
    assert "runPolicy" not in get_json(crds, "etj", "ctr", "-n", namespace)["spec"]
    changed = _patch(
        crds, namespace, {"spec": {"runPolicy": {"managedBy": "kueue.x-k8s.io/multikueue"}}}
    )
    assert changed.returncode != 0 and "managedBy is immutable" in changed.stderr
    # Naming etj's own manager explicitly changes nothing, so it is allowed.
    same = _patch(
        crds, namespace, {"spec": {"runPolicy": {"managedBy": "training.etj.dev/operator"}}}
    )
    assert same.returncode == 0, same.stderr


def test_a_job_created_for_another_manager_keeps_it(crds: LocalCluster, namespace: str):
    apply(crds, namespace, job(managedBy="kueue.x-k8s.io/multikueue"))
    back = _patch(
        crds, namespace, {"spec": {"runPolicy": {"managedBy": "training.etj.dev/operator"}}}
    )
    assert back.returncode != 0 and "managedBy is immutable" in back.stderr


def test_a_condition_without_a_reason_is_rejected(crds: LocalCluster, namespace: str):
    apply(crds, namespace, job())
    bare = {"status": {"conditions": [{"type": "Running", "status": "True"}]}}
    rejected = _patch(crds, namespace, bare, "--subresource=status")
    assert rejected.returncode != 0 and "reason" in rejected.stderr
    empty = {"status": {"conditions": [{"type": "Running", "status": "True", "reason": ""}]}}
    assert _patch(crds, namespace, empty, "--subresource=status").returncode != 0
    good = {"status": {"conditions": [{"type": "Running", "status": "True", "reason": "Test"}]}}
    ok = _patch(crds, namespace, good, "--subresource=status")
    assert ok.returncode == 0, ok.stderr


def test_etj_all_category_lists_jobs_and_the_short_name_still_works(
    crds: LocalCluster, namespace: str
):
    apply(crds, namespace, job())
    for what in ("etj-all", "etj", "all"):
        names = crds.kubectl("get", what, "-n", namespace, "-o", "name").stdout.split()
        assert "embeddingtrainingjob.training.etj.dev/ctr" in names, (what, names)
    # The category has only etj's kinds: nothing built in comes along.
    listed = crds.kubectl("get", "etj-all", "-n", namespace, "-o", "name").stdout.split()
    assert all(n.startswith("embeddingtrainingjob.training.etj.dev/") for n in listed), listed

"""End to end on kind: helm install, a job runs to Succeeded surviving a killed worker,
a malformed job is rejected, helm uninstall leaves nothing behind."""

from __future__ import annotations

import json

import pytest
import yaml

from .conftest import ROOT, sh, wait_for

pytestmark = pytest.mark.e2e

RELEASE = "etj"
NS = "etj-system"


def kubectl(context: str, *args: str, **kw):  # type: ignore[no-untyped-def]
    return sh("kubectl", "--context", context, *args, **kw)


def job_json(context: str, name: str) -> dict:
    return json.loads(kubectl(context, "get", "etj", name, "-o", "json").stdout)


def test_install_train_recover_reject_uninstall(kind_cluster: str) -> None:
    ctx = kind_cluster
    sh(
        "helm",
        "--kube-context",
        ctx,
        "install",
        RELEASE,
        "charts/etj",
        "--namespace",
        NS,
        "--create-namespace",
        "--wait",
        "--set",
        "image.repository=etj-operator",
        "--set",
        "image.tag=e2e",
        "--set",
        "image.pullPolicy=Never",
        "--set",
        "defaultTrainerImage=etj-trainer:e2e",
    )
    quickstart = yaml.safe_load((ROOT / "examples" / "quickstart.yaml").read_text())
    quickstart["spec"]["imagePullPolicy"] = "Never"
    quickstart["spec"]["training"]["steps"] = 4000
    kubectl(ctx, "apply", "-f", "-", input=yaml.safe_dump(quickstart))
    wait_for(
        lambda: job_json(ctx, "quickstart").get("status", {}).get("phase") == "Running",
        600,
        "Running",
    )
    wait_for(
        lambda: (job_json(ctx, "quickstart")["status"].get("progress") or {}).get("step", 0) > 500,
        600,
        "progress",
    )
    kubectl(ctx, "delete", "pod", "quickstart-worker-1", "--wait=false")
    wait_for(
        lambda: job_json(ctx, "quickstart")["status"]["restarts"] >= 1,
        120,
        "the restart to be counted",
    )
    wait_for(
        lambda: job_json(ctx, "quickstart")["status"]["phase"] == "Succeeded", 1800, "Succeeded"
    )
    pods = kubectl(
        ctx,
        "get",
        "pods",
        "-l",
        "training.etj.dev/job-name=quickstart,training.etj.dev/replica-type=ps",
        "-o",
        "name",
    ).stdout
    assert pods.strip() == "", "ps pods must be stopped when the job succeeds"

    bad = yaml.safe_load((ROOT / "examples" / "quickstart.yaml").read_text())
    bad["metadata"]["name"] = "bad"
    bad["spec"]["strategy"] = "Sideways"
    rejected = kubectl(ctx, "apply", "-f", "-", input=yaml.safe_dump(bad), check=False)
    assert rejected.returncode != 0 and "strategy" in rejected.stderr

    kubectl(ctx, "delete", "etj", "--all", "--wait=true", timeout=300)
    sh("helm", "--kube-context", ctx, "uninstall", RELEASE, "--namespace", NS, "--wait")
    leftovers = kubectl(
        ctx, "get", "all", "-A", "-l", "app.kubernetes.io/managed-by=etj", "-o", "name"
    ).stdout
    assert leftovers.strip() == ""

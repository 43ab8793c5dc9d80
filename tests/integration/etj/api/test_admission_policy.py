"""The chart's admission policies on a real API server: with the chart installed, every job
that asks for host access, privilege or an identity (tests/cases/host_access.py: the issue's
own and a held-out set) is refused at create with the policy's message, the same job is
created in a namespace that allows it (labelled training.etj.dev/allow-privileged=true for
host access; its own label or annotation for each deputy rule, which allow-privileged does
not lift), an ordinary job and every example job are created everywhere; and ``etj
validate`` gives the same verdict on each, from the same list.

Also the chart's switches: admissionPolicy.enabled=false leaves the policy out, and
networkPolicy.enabled passes the operator its --network-policy with the RBAC it needs."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner

from etj.api.admission import ALLOW_PRIVILEGED_LABEL, CHECKS, PRIVILEGED
from etj.cli.main import main
from etj_testcluster import LocalCluster
from tests.cases.host_access import HOSTILE, ORDINARY_CASES, Case, example_jobs
from tests.integration.conftest import (
    ROOT,
    apply_crds,
    create_namespace,
    require_binaries,
    wait_for,
)

pytestmark = pytest.mark.integration
CHART = str(ROOT / "charts" / "etj")
RELEASE, RELEASE_NS = "etj", "etj-system"
MESSAGES = {c.name: c.message for c in CHECKS}
CHECKS_BY_NAME = {c.name: c for c in CHECKS}


def helm(cluster: LocalCluster, *args: str) -> str:
    import subprocess

    result = subprocess.run(
        [str(cluster.binary("helm")), "--kubeconfig", str(cluster.kubeconfig), *args],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    return result.stdout


def create(cluster: LocalCluster, manifest: dict[str, Any], namespace: str, name: str) -> str:
    """Create the job (really: nothing is dry); the API server's error, or '' if stored."""
    doc = {**manifest, "metadata": {**manifest["metadata"], "name": name, "namespace": namespace}}
    result = cluster.kubectl("create", "-f", "-", input=json.dumps(doc), check=False)
    return result.stderr.strip() if result.returncode != 0 else ""


def etj_validate(tmp_path: Path, manifest: dict[str, Any], *flags: str) -> tuple[int, str]:
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(manifest))
    result = CliRunner().invoke(main, ["validate", str(path), *flags])
    return result.exit_code, result.output


@pytest.fixture(scope="module")
def policed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    """A control plane of its own (the policy binds cluster-wide) with the chart installed."""
    c = LocalCluster(tmp_path_factory.mktemp("policed"), require_binaries())
    c.start()
    try:
        apply_crds(c)
        helm(c, "install", RELEASE, CHART, "-n", RELEASE_NS, "--create-namespace", "--skip-crds")
        probe = create_namespace(c)
        hostile = HOSTILE[0]
        # The API server loads a new policy within a moment; until then it admits all.
        wait_for(
            lambda: MESSAGES[hostile.refusals[0][0]] in create(c, hostile.manifest, probe, "probe"),
            120,
            "the admission policy in force",
        )
        yield c
    finally:
        c.stop()


@pytest.fixture(scope="module")
def plain(policed: LocalCluster) -> str:
    return create_namespace(policed)


@pytest.fixture(scope="module")
def opted_in(policed: LocalCluster) -> str:
    return create_namespace(policed, {ALLOW_PRIVILEGED_LABEL: "true"})


_ALLOWING: dict[str, str] = {}


def allowing(cluster: LocalCluster, case: Case) -> str:
    """A namespace with the case's grants (one per distinct grant set)."""
    key = json.dumps([case.allowed_in.labels, case.allowed_in.annotations], sort_keys=True)
    if key not in _ALLOWING:
        _ALLOWING[key] = create_namespace(
            cluster, dict(case.allowed_in.labels), dict(case.allowed_in.annotations)
        )
    return _ALLOWING[key]


@pytest.mark.parametrize("case", HOSTILE, ids=lambda c: c.id)
def test_hostile_job_is_refused_unless_the_namespace_opted_in(
    policed: LocalCluster, plain: str, opted_in: str, case: Case, tmp_path: Path
):
    error = create(policed, case.manifest, plain, case.id)
    assert "ValidatingAdmissionPolicy" in error and "denied request" in error, error
    # The API server stops at the first validation that fails, in the policy's order;
    # etj validate names every field.
    order = list(MESSAGES)
    first = min((check for check, _ in case.refusals), key=order.index)
    assert MESSAGES[first] in error, error
    code, output = etj_validate(tmp_path, case.manifest)
    assert code == 2, output
    assert len(output.strip().splitlines()) == len(case.refusals)

    assert create(policed, case.manifest, allowing(policed, case), case.id) == ""
    assert etj_validate(tmp_path, case.manifest, *case.validate_flags)[0] == 0
    if any(CHECKS_BY_NAME[n].grant != PRIVILEGED for n, _ in case.refusals):
        # A namespace open to privilege lends no identity.
        assert "denied request" in create(policed, case.manifest, opted_in, case.id)


@pytest.mark.parametrize("case", ORDINARY_CASES, ids=lambda c: c.id)
def test_ordinary_job_is_accepted_everywhere(
    policed: LocalCluster, plain: str, opted_in: str, case: Case, tmp_path: Path
):
    for namespace in (plain, opted_in):
        assert create(policed, case.manifest, namespace, case.id) == ""
    assert etj_validate(tmp_path, case.manifest)[0] == 0


def test_every_example_job_is_admitted(policed: LocalCluster, plain: str):
    refused = {}
    for i, (path, doc) in enumerate(example_jobs()):
        doc = {**doc, "metadata": {k: v for k, v in doc["metadata"].items() if k != "generateName"}}
        error = create(policed, doc, plain, f"example-{i}")
        if error:
            refused[path] = error
    assert refused == {}


def test_an_update_that_leaves_the_spec_alone_is_not_judged(policed: LocalCluster):
    # A job admitted where it was allowed keeps working when the label goes: the
    # operator's own writes (labels, annotations, finalizers) still pass.
    namespace = create_namespace(policed, {ALLOW_PRIVILEGED_LABEL: "true"})
    assert create(policed, HOSTILE[0].manifest, namespace, "kept") == ""
    policed.kubectl("label", "namespace", namespace, f"{ALLOW_PRIVILEGED_LABEL}-")
    wait_for(
        lambda: (
            MESSAGES[HOSTILE[0].refusals[0][0]]
            in create(policed, HOSTILE[0].manifest, namespace, "new")
        ),
        120,
        "the namespace no longer exempt",
    )
    result = policed.kubectl(
        "annotate", "etj", "kept", "-n", namespace, "example.com/note=x", check=False
    )
    assert result.returncode == 0, result.stderr
    spec_change = policed.kubectl(
        "patch", "etj", "kept", "-n", namespace, "--type=merge",
        "-p", json.dumps({"spec": {"training": {"steps": 11}}}), check=False,
    )  # fmt: skip
    assert spec_change.returncode != 0 and "denied request" in spec_change.stderr


def _kinds(text: str) -> list[str]:
    return sorted(d["kind"] for d in yaml.safe_load_all(text) if d)


def test_chart_switches(policed: LocalCluster):
    default = helm(policed, "template", "etj", CHART)
    assert {"ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding"} <= set(_kinds(default))
    off = helm(policed, "template", "etj", CHART, "--set", "admissionPolicy.enabled=false")
    assert "ValidatingAdmissionPolicy" not in _kinds(off)
    assert "--network-policy" not in default and "networkpolicies" not in default
    on = [
        d
        for d in yaml.safe_load_all(
            helm(
                policed,
                "template",
                "etj",
                CHART,
                "-n",
                "ops",
                "--set",
                "networkPolicy.enabled=true",
            )
        )
        if d
    ]
    deployment = next(d for d in on if d["kind"] == "Deployment")
    args = deployment["spec"]["template"]["spec"]["containers"][0]["args"]
    labels = deployment["spec"]["template"]["metadata"]["labels"]
    (flag,) = [a for a in args if a.startswith("--network-policy=")]
    namespace, _, pairs = flag.removeprefix("--network-policy=").partition("/")
    assert namespace == "ops"
    assert dict(p.split("=", 1) for p in pairs.split(",")) == labels  # the operator's pods
    role = next(d for d in on if d["kind"] == "ClusterRole")
    assert {
        "apiGroups": ["networking.k8s.io"],
        "resources": ["networkpolicies"],
        "verbs": ["create"],
    } in role["rules"]


def test_the_operator_creates_each_jobs_network_policy_under_the_charts_rbac(
    policed: LocalCluster, tmp_path: Path
):
    # networkPolicy.enabled: the chart passes --network-policy and grants the create; the
    # operator, under the chart's ServiceAccount, makes the policy the API server stores.
    from tests.integration.charts.test_chart import service_account_kubeconfig
    from tests.integration.etj.controller.test_operator import apply, job
    from tests.integration.operator_helpers import OperatorProcess

    helm(policed, "upgrade", RELEASE, CHART, "-n", RELEASE_NS, "--reuse-values", "--skip-crds",
         "--set", "networkPolicy.enabled=true")  # fmt: skip
    deployment = json.loads(
        policed.kubectl("get", "deployment", RELEASE, "-n", RELEASE_NS, "-o", "json").stdout
    )
    args = deployment["spec"]["template"]["spec"]["containers"][0]["args"]
    (flag,) = [a for a in args if a.startswith("--network-policy=")]
    namespace = create_namespace(policed)
    kubeconfig = service_account_kubeconfig(policed, tmp_path / "sa.kubeconfig")
    op = OperatorProcess(
        policed, namespace, tmp_path / "op.log", (flag,), kubeconfig=kubeconfig
    ).start()
    try:
        apply(policed, namespace, job())
        stored = wait_for(
            lambda: (
                (
                    r := policed.kubectl(
                        "get", "networkpolicy", "ctr", "-n", namespace, "-o", "json", check=False
                    )
                ).returncode
                == 0
                and json.loads(r.stdout)
            ),
            120,
            "the job's NetworkPolicy",
        )
        pods = wait_for(
            lambda: json.loads(
                policed.kubectl("get", "pods", "-n", namespace, "-o", "json").stdout
            )["items"],
            120,
            "the job's pods",
        )
    except AssertionError as exc:
        raise AssertionError(f"{exc}\n--- the operator's log ---\n{op.tail(30)}") from exc
    finally:
        op.stop()
    selector = stored["spec"]["podSelector"]["matchLabels"]
    assert all(selector.items() <= p["metadata"]["labels"].items() for p in pods)
    metrics_from = stored["spec"]["ingress"][1]["from"][0]
    assert metrics_from["namespaceSelector"]["matchLabels"] == {
        "kubernetes.io/metadata.name": RELEASE_NS
    }
    assert (
        metrics_from["podSelector"]["matchLabels"]
        == (deployment["spec"]["template"]["metadata"]["labels"])
    )
    assert "Forbidden" not in op.tail(400) and "forbidden" not in op.tail(400)

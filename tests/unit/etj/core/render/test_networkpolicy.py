"""The optional NetworkPolicy per job (etj.core.render.networkpolicy): rendered with the job's
objects when the operator's settings ask for it, admitting exactly the job's pods on the
TensorFlow port and the operator's pods on the metrics port; created by the operator."""

from __future__ import annotations

import asyncio

import pytest

from etj.api.constants import METRICS_PORT, TF_PORT
from etj.controller.reconciler import Reconciler
from etj.controller.settings import OperatorSettings
from etj.core.render import RenderSettings, build_objects
from etj.core.render.settings import NetworkPolicySettings
from etj.core.validation import validate_manifest
from tests.unit.etj.controller.test_reconciler import NS, manifest, no_metrics
from tests.unit.fake_api import FakeKube

OPERATOR = NetworkPolicySettings(
    "etj-system", {"app.kubernetes.io/name": "etj", "app.kubernetes.io/instance": "etj"}
)


def _objects(settings: RenderSettings) -> list[dict]:
    result = validate_manifest(manifest())
    assert result.job is not None and result.plan is not None
    return build_objects(result.job, result.plan, settings)


def test_no_network_policy_by_default():
    assert not [o for o in _objects(RenderSettings()) if o["kind"] == "NetworkPolicy"]


def test_the_policy_admits_the_jobs_pods_on_tf_and_the_operator_on_metrics():
    objects = _objects(RenderSettings(network_policy=OPERATOR))
    (policy,) = [o for o in objects if o["kind"] == "NetworkPolicy"]
    pods = [o for o in objects if o["kind"] == "Pod"]
    spec = policy["spec"]
    assert policy["metadata"]["name"] == "ctr" and policy["metadata"]["namespace"] == NS
    assert policy["metadata"]["ownerReferences"][0]["uid"] == "u-1"  # deleted with the job
    assert spec["policyTypes"] == ["Ingress"]
    selector = spec["podSelector"]["matchLabels"]
    # It selects every pod of the job (and so closes every other port of them).
    assert all(selector.items() <= p["metadata"]["labels"].items() for p in pods)
    tf, metrics = spec["ingress"]
    assert tf["ports"] == [{"port": TF_PORT, "protocol": "TCP"}]
    assert tf["from"] == [{"podSelector": {"matchLabels": selector}}]
    assert metrics["ports"] == [{"port": METRICS_PORT, "protocol": "TCP"}]
    assert metrics["from"] == [
        {
            "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "etj-system"}},
            "podSelector": {"matchLabels": OPERATOR.operator_labels},
        }
    ]
    # The ports it names are the ones the pods serve.
    served = {port["containerPort"] for p in pods for port in p["spec"]["containers"][0]["ports"]}
    assert served == {TF_PORT, METRICS_PORT}


def test_another_jobs_pods_are_not_selected():
    (policy,) = [
        o for o in _objects(RenderSettings(network_policy=OPERATOR)) if o["kind"] == "NetworkPolicy"
    ]
    other = {**manifest(), "metadata": {"name": "other", "namespace": NS}}
    result = validate_manifest(other)
    assert result.job is not None and result.plan is not None
    pod = next(o for o in build_objects(result.job, result.plan) if o["kind"] == "Pod")
    selector = policy["spec"]["podSelector"]["matchLabels"]
    assert not selector.items() <= pod["metadata"]["labels"].items()


def test_parse_the_operator_option():
    parsed = NetworkPolicySettings.parse("etj-system/a=b,c.d/e=f")
    assert parsed == NetworkPolicySettings("etj-system", {"a": "b", "c.d/e": "f"})
    for bad in ("etj-system", "etj-system/", "/a=b", "ns/a"):
        with pytest.raises(ValueError, match="NAMESPACE/KEY=VALUE"):
            NetworkPolicySettings.parse(bad)


def test_the_operator_creates_it_with_the_service():
    api = FakeKube()
    reconciler = Reconciler(
        api,  # type: ignore[arg-type]
        OperatorSettings(network_policy=OPERATOR),
        lambda obj, event: None,
        scrape=no_metrics,
    )
    api.add_job(manifest())
    asyncio.run(reconciler.reconcile(NS, "ctr"))
    created = [c for c in api.calls("create")]
    assert ("create", "NetworkPolicy", "ctr") in created
    assert created.index(("create", "NetworkPolicy", "ctr")) < created.index(
        ("create", "Service", "ctr")
    )


def test_without_the_setting_the_operator_creates_none():
    api = FakeKube()
    reconciler = Reconciler(
        api,  # type: ignore[arg-type]
        OperatorSettings(),
        lambda obj, event: None,
        scrape=no_metrics,
    )
    api.add_job(manifest())
    asyncio.run(reconciler.reconcile(NS, "ctr"))
    assert not [c for c in api.calls("create") if c[1] == "NetworkPolicy"]

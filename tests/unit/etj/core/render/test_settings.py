"""etj.core.render.settings: the render settings' defaults and the NetworkPolicy flag."""

from __future__ import annotations

import pytest

from etj.api.constants import DEFAULT_IMAGE, METRICS_PORT, TF_PORT
from etj.api.spec import GangScheduler
from etj.core.render.settings import NetworkPolicySettings, RenderSettings


def test_the_defaults_are_the_shipped_ones():
    s = RenderSettings()
    assert (s.default_image, s.tf_port, s.metrics_port) == (DEFAULT_IMAGE, TF_PORT, METRICS_PORT)
    assert s.command == ("python", "-m", "etj_trainer")
    assert s.gang_scheduler == GangScheduler.WORKLOAD and s.network_policy is None
    assert s.node_loss_seconds == 30 and s.memory_limits == {}
    assert RenderSettings().memory_limits is not s.memory_limits


def test_a_network_policy_flag_is_a_namespace_and_labels():
    parsed = NetworkPolicySettings.parse("etj-system/app.kubernetes.io/name=etj,tier=ops")
    assert parsed.operator_namespace == "etj-system"
    assert parsed.operator_labels == {"app.kubernetes.io/name": "etj", "tier": "ops"}
    assert NetworkPolicySettings.parse("ops/a=").operator_labels == {"a": ""}


@pytest.mark.parametrize(
    "bad", ["", "etj-system", "etj-system/", "/a=b", "ns/a", "ns/=b", "ns/a=b,c"]
)
def test_a_malformed_flag_says_the_form(bad):
    with pytest.raises(ValueError, match=r"expected NAMESPACE/KEY=VALUE"):
        NetworkPolicySettings.parse(bad)

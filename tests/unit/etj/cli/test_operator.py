"""etj.cli.operator (``etj operator``): its flags turned into the operator's settings before
anything runs. (A bad kubeconfig: test_files.py; the operator itself on an API server:
tests/integration/etj/controller/test_operator*.py.)"""

from __future__ import annotations

import logging

import click
import pytest
from click.testing import CliRunner

from etj.cli.main import main
from etj.cli.operator import _configure_logging, _network_policy
from etj.core.render.settings import NetworkPolicySettings

KUBECONFIG = """apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "https://127.0.0.1:1"}}]
users: [{name: u, user: {token: t}}]
contexts: [{name: x, context: {cluster: c, user: u}}]
current-context: x
"""


def test_the_network_policy_flag_names_the_namespace_and_labels():
    assert _network_policy("") is None
    assert _network_policy("etj-system/app=etj,tier=ops") == NetworkPolicySettings(
        "etj-system", {"app": "etj", "tier": "ops"}
    )


@pytest.mark.parametrize("bad", ["etj-system", "etj-system/", "/app=etj", "ns/app"])
def test_a_malformed_network_policy_is_a_usage_error_naming_the_flag(bad):
    with pytest.raises(click.BadParameter) as caught:
        _network_policy(bad)
    assert caught.value.param_hint == "--network-policy"
    assert "NAMESPACE/KEY=VALUE" in caught.value.message


def test_kopfs_per_object_lines_are_quiet_unless_verbose():
    objects = logging.getLogger("kopf.objects")
    before = objects.level
    try:
        objects.setLevel(logging.NOTSET)
        _configure_logging(verbose=True)
        assert objects.level == logging.NOTSET
        _configure_logging(verbose=False)
        assert objects.level == logging.WARNING
    finally:
        objects.setLevel(before)


@pytest.mark.parametrize(
    ("flags", "words"),
    [
        (["--leader-election", "no-slash"], "expected NAMESPACE/NAME"),
        (["--network-policy", "ns"], "--network-policy"),
        (["--gang-scheduler", "Yunikorn"], "--gang-scheduler"),
        (["--node-loss-seconds", "7200"], "--node-loss-seconds"),
    ],
)
def test_a_bad_flag_stops_before_the_operator_runs(tmp_path, monkeypatch, flags, words):
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(KUBECONFIG)
    started = []
    monkeypatch.setattr("asyncio.run", lambda *a, **k: started.append(a))
    # No global state of kopf's or the logging's changed for the other tests.
    monkeypatch.setattr("kopf.configure", lambda **_: None)
    monkeypatch.setattr("etj.controller.login.register_login", lambda cfg: None)
    monkeypatch.setattr("etj.cli.operator._configure_logging", lambda verbose: None)
    args = ["operator", "--kubeconfig", str(kubeconfig), "--metrics-port", "0", *flags]
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 2, result.output
    assert words in result.output
    assert started == []

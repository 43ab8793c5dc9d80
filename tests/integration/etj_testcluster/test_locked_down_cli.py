"""``etj cluster up --locked-down``: the API server admits as OpenShift's does. A client
allowed to create ConfigMaps but not to update its owner's finalizers cannot set
``blockOwnerDeletion``, which the default local cluster lets it do."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from tests.integration.conftest import require_binaries
from tests.integration.etj_testcluster.test_cluster_lifecycle import etj_cluster

pytestmark = pytest.mark.integration

USER = "system:serviceaccount:default:maker"


def kubectl(
    kubeconfig: str, *args: str, input: str | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(require_binaries() / "kubectl"), f"--kubeconfig={kubeconfig}", *args],
        input=input,
        capture_output=True,
        text=True,
        timeout=120,
    )


def create_owned_config_map(kubeconfig: str) -> subprocess.CompletedProcess[str]:
    """As USER (may create ConfigMaps, nothing else): a ConfigMap owned by another one,
    with blockOwnerDeletion."""
    assert kubectl(kubeconfig, "create", "configmap", "owner").returncode == 0
    kubectl(kubeconfig, "create", "role", "maker", "--verb=create", "--resource=configmaps")
    kubectl(kubeconfig, "create", "rolebinding", "maker", "--role=maker", f"--user={USER}")
    owner = json.loads(kubectl(kubeconfig, "get", "configmap", "owner", "-o", "json").stdout)
    owned = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": "owned",
            "ownerReferences": [
                {
                    "apiVersion": "v1",
                    "kind": "ConfigMap",
                    "name": "owner",
                    "uid": owner["metadata"]["uid"],
                    "blockOwnerDeletion": True,
                }
            ],
        },
    }
    return kubectl(kubeconfig, f"--as={USER}", "create", "-f", "-", input=json.dumps(owned))


@pytest.mark.parametrize("locked", [True, False], ids=["locked-down", "default"])
def test_locked_down_enforces_owner_reference_permissions(tmp_path: Path, locked: bool):
    require_binaries()
    state = tmp_path / "state"
    up = etj_cluster(
        "up",
        "--node",
        "none",
        "--state-dir",
        str(state),
        *(["--locked-down"] if locked else []),
        timeout=240,
    )
    try:
        assert up.returncode == 0, up.stderr
        result = create_owned_config_map(up.stdout.strip().splitlines()[-1])
        if locked:
            assert result.returncode != 0
            assert "cannot set blockOwnerDeletion" in result.stderr
        else:
            assert result.returncode == 0, result.stderr
    finally:
        etj_cluster("down", "--state-dir", str(state))

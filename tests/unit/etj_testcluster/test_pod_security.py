"""The process-backed node's reading of a pod's securityContext (etj_testcluster.pod_security)."""

from __future__ import annotations

from typing import Any

import pytest

from etj_testcluster.pod_security import ProcessSecurity, Refused, process_security


def pod(pod_sc: dict[str, Any] | None = None, sc: dict[str, Any] | None = None) -> dict[str, Any]:
    container: dict[str, Any] = {"name": "trainer", "image": "x"}
    if sc is not None:
        container["securityContext"] = sc
    spec: dict[str, Any] = {"containers": [container]}
    if pod_sc is not None:
        spec["securityContext"] = pod_sc
    return {"metadata": {"name": "p"}, "spec": spec}


RESTRICTED_CONTAINER = {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}}


def test_restricted_pod_runs_without_privileges_on_a_root_node():
    p = pod({"runAsNonRoot": True, "runAsUser": 1000}, RESTRICTED_CONTAINER)
    assert process_security(p, 0) == ProcessSecurity(no_new_privs=True, drop_capabilities=True)


def test_a_pod_without_security_context_runs_as_the_node_does():
    assert process_security(pod(), 0) == ProcessSecurity()
    assert process_security(pod(), 1000) == ProcessSecurity()


def test_a_non_root_uid_on_a_root_node_has_no_capabilities():
    assert process_security(pod({"runAsUser": 1000}), 0).drop_capabilities
    assert not process_security(pod({"runAsUser": 1000}), 1000).drop_capabilities


@pytest.mark.parametrize(
    ("pod_sc", "sc", "node_uid", "message"),
    [
        ({"runAsNonRoot": True, "runAsUser": 0}, None, 1000, "runAsUser breaks non-root"),
        ({"runAsNonRoot": True}, None, 0, "image will run as root"),
        # The container's setting wins over the pod's.
        ({"runAsNonRoot": True, "runAsUser": 1000}, {"runAsUser": 0}, 0, "breaks non-root"),
        ({}, {"runAsNonRoot": True}, 0, "image will run as root"),
    ],
)
def test_run_as_non_root_is_refused_as_a_kubelet_refuses(pod_sc, sc, node_uid, message):
    with pytest.raises(Refused, match=message):
        process_security(pod(pod_sc, sc), node_uid)


def test_run_as_non_root_on_a_non_root_node_without_uid_runs():
    assert process_security(pod({"runAsNonRoot": True}), 1000) == ProcessSecurity()
    # The container may lift the pod's demand.
    p = pod({"runAsNonRoot": True}, {"runAsNonRoot": False})
    assert process_security(p, 0) == ProcessSecurity()

"""Locked-down clusters (issue 15, item 4): every pod etj renders, and the chart's operator
pod, carries what Pod Security ``restricted`` demands, with the same numeric non-root user
the images run as (so ``runAsNonRoot`` holds whichever of the two a cluster reads).
The real API server's admission of these pods is tested in tests/integration/charts/test_chart.py."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from tests.unit.conftest import ROOT, load_example
from tests.unit.etj.core.render.test_build import EXAMPLES, rendered

DOCKERFILES = ["operator/Dockerfile", "trainer_image/Dockerfile"]


def image_user(dockerfile: str) -> tuple[int, int]:
    """The final ``USER uid:gid`` of a Dockerfile; numeric, or the kubelet cannot check
    runAsNonRoot against the image without a runAsUser."""
    users = re.findall(r"^USER\s+(\S+)\s*$", (ROOT / dockerfile).read_text(), re.MULTILINE)
    assert users, f"{dockerfile} never sets USER: it would run as root"
    match = re.fullmatch(r"(\d+):(\d+)", users[-1])
    assert match, f"{dockerfile}: USER {users[-1]} is not numeric uid:gid"
    return int(match[1]), int(match[2])


def assert_restricted(pod_spec: dict, container_security: dict) -> None:
    pod_security = pod_spec.get("securityContext") or {}
    assert pod_security["runAsNonRoot"] is True
    assert pod_security["seccompProfile"] == {"type": "RuntimeDefault"}
    assert container_security["allowPrivilegeEscalation"] is False
    assert container_security["capabilities"]["drop"] == ["ALL"]
    assert not container_security["capabilities"].get("add")
    assert not container_security.get("privileged")


@pytest.mark.parametrize("dockerfile", DOCKERFILES)
def test_images_run_as_a_numeric_non_root_user(dockerfile: str):
    uid, gid = image_user(dockerfile)
    assert uid != 0 and gid != 0


@pytest.mark.parametrize("example", EXAMPLES)
def test_rendered_pods_are_restricted_and_run_as_the_trainer_images_user(example: str):
    uid, gid = image_user("trainer_image/Dockerfile")
    pods = [o for o in rendered(load_example(example)) if o["kind"] == "Pod"]
    assert pods
    for pod in pods:
        spec = pod["spec"]
        assert_restricted(spec, spec["containers"][0]["securityContext"])
        assert (spec["securityContext"]["runAsUser"], spec["securityContext"]["runAsGroup"]) == (
            uid,
            gid,
        )
        assert not any("hostPath" in v for v in spec["volumes"])


def test_chart_defaults_are_restricted_and_run_as_the_operator_images_user():
    uid, gid = image_user("operator/Dockerfile")
    values = yaml.safe_load(Path(ROOT / "charts/etj/values.yaml").read_text())
    assert_restricted({"securityContext": values["podSecurityContext"]}, values["securityContext"])
    pod = values["podSecurityContext"]
    assert (pod["runAsUser"], pod["runAsGroup"]) == (uid, gid)

"""etj.api.podtemplate: what a replica's Pod template may not set, each problem naming its
field, and whether a template runs its own program. (The merge over etj's Pod:
tests/unit/etj/core/render/test_podtemplate.py.)"""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from etj.api.constants import (
    CONTAINER_NAME,
    ETJ_ENV_PREFIX,
    ETJ_VOLUMES,
    TF_CONFIG_ENV,
    TFJOB_CONTAINER_NAME,
    TRAINER_CONFIG_MOUNT,
)
from etj.api.podtemplate import (
    FORBIDDEN_POD_FIELDS,
    PodTemplate,
    main_container,
    runs_own_program,
    template_problems,
)


def test_a_template_of_sidecars_volumes_and_scheduling_is_accepted():
    spec = {
        "containers": [
            {"name": CONTAINER_NAME, "image": "me/train:1", "env": [{"name": "MY_VAR"}]},
            {"name": "logs", "env": [{"name": TF_CONFIG_ENV}]},  # a sidecar may read it
        ],
        "initContainers": [{"name": "fetch"}],
        "volumes": [{"name": "scratch"}],
        "nodeSelector": {"pool": "train"},
    }
    assert template_problems(spec) == []


@pytest.mark.parametrize("field", sorted(FORBIDDEN_POD_FIELDS))
def test_every_field_etj_owns_is_named_with_the_reason(field):
    (problem,) = template_problems({field: "x"})
    assert problem == f"spec.{field} may not be set: {FORBIDDEN_POD_FIELDS[field]}"


def test_the_main_containers_env_and_mounts_etj_sets_are_refused_by_index():
    spec = {
        "containers": [
            {"name": "sidecar"},
            {
                "name": TFJOB_CONTAINER_NAME,
                "env": [{"name": "OK"}, {"name": f"{ETJ_ENV_PREFIX}ANYTHING"}],
                "volumeMounts": [{"name": "cfg", "mountPath": TRAINER_CONFIG_MOUNT + "/"}],
            },
        ]
    }
    problems = template_problems(spec)
    assert problems == [
        f"spec.containers[1].env[1]: {ETJ_ENV_PREFIX}ANYTHING is set by etj for every replica",
        f"spec.containers[1].volumeMounts[0]: {TRAINER_CONFIG_MOUNT} is where etj mounts the "
        "trainer config and shard plan",
    ]


def test_names_are_required_unique_and_one_main_container():
    problems = template_problems(
        {
            "containers": [
                {"name": CONTAINER_NAME},
                {"name": TFJOB_CONTAINER_NAME},
                {"image": "x"},
            ],
            "initContainers": [{"name": CONTAINER_NAME}],
        }
    )
    assert "spec.containers[2].name is required" in problems
    assert f"container name {CONTAINER_NAME!r} appears twice" in problems
    assert any("are the same (etj's main container)" in p for p in problems)


def test_containers_must_be_a_list_and_volumes_not_etjs():
    assert template_problems({"containers": {"name": "x"}}) == [
        "spec.containers must be a list of containers"
    ]
    (problem,) = template_problems({"volumes": [{"name": ETJ_VOLUMES[0]}]})
    assert problem.startswith(f"spec.volumes[0]: the name {ETJ_VOLUMES[0]!r} is one of etj's")


def test_the_model_refuses_with_every_problem_in_one_message():
    with pytest.raises(ValidationError) as caught:
        PodTemplate.model_validate({"spec": {"hostname": "h", "subdomain": "s"}})
    text = str(caught.value)
    assert "spec.hostname may not be set" in text and "spec.subdomain may not be set" in text


def test_the_main_container_and_whether_it_runs_its_own_program():
    spec = {"containers": [{"name": "side"}, {"name": TFJOB_CONTAINER_NAME, "args": ["--x"]}]}
    assert main_container(spec) == {"name": TFJOB_CONTAINER_NAME, "args": ["--x"]}
    assert not runs_own_program(spec)  # args alone: etj's trainer with other arguments
    assert runs_own_program({"containers": [{"name": CONTAINER_NAME, "command": ["python"]}]})
    assert runs_own_program({"containers": [{"name": CONTAINER_NAME, "image": "mine:1"}]})
    assert not runs_own_program(None) and main_container({"containers": [{"name": "x"}]}) is None

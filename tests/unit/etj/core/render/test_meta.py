"""etj.core.render.meta: what every rendered object shares (plain copies, metadata, labels,
the owner reference)."""

from __future__ import annotations

from enum import StrEnum

import pytest

from etj.api.constants import API_VERSION, KIND, LABEL_JOB_NAME, LABEL_MANAGED_BY
from etj.api.conventions import trainer_config_map_name
from etj.api.job import EmbeddingTrainingJob
from etj.core.render.meta import (
    _metadata,
    _plain,
    common_labels,
    config_map_name,
    job_selector,
    owner_reference,
)
from tests.unit.conftest import job_manifest, load_example


class Shade(StrEnum):
    DARK = "Dark"


def _job(uid: str | None = None) -> EmbeddingTrainingJob:
    spec = load_example("quickstart.yaml")["spec"]
    return EmbeddingTrainingJob.from_manifest(job_manifest(spec, name="ctr", uid=uid))


def test_plain_sorts_keys_at_every_level_and_copies():
    source = {"b": [{"z": 1, "a": (2, 3)}], "a": {"y": None, "x": True}}
    out = _plain(source)
    assert list(out) == ["a", "b"] and list(out["a"]) == ["x", "y"]
    assert out["b"][0] == {"a": [2, 3], "z": 1} and list(out["b"][0]) == ["a", "z"]
    out["b"][0]["z"] = 99
    assert source["b"][0]["z"] == 1  # a copy: nothing shared with the job


def test_plain_writes_an_enums_value_not_its_name():
    out = _plain({"shade": Shade.DARK, "list": [Shade.DARK]})
    assert out == {"shade": "Dark", "list": ["Dark"]}
    assert type(out["shade"]) is str and type(out["list"][0]) is str


def test_plain_refuses_what_is_no_json():
    with pytest.raises(TypeError, match="cannot render a set"):
        _plain({"a": {1, 2}})


def test_metadata_has_its_keys_in_order_and_annotations_and_owner_only_when_given():
    owner = {"kind": KIND, "uid": "u"}
    meta = _metadata("n", "ns", {"b": "2", "a": "1"}, owner, {"note": "x"})
    assert list(meta) == ["name", "namespace", "labels", "annotations", "ownerReferences"]
    assert list(meta["labels"]) == ["a", "b"] and meta["ownerReferences"] == [owner]
    assert list(_metadata("n", "ns", {}, None)) == ["name", "namespace", "labels"]


def test_the_job_selector_is_part_of_every_objects_labels():
    job = _job()
    labels = common_labels(job)
    assert job_selector("ctr").items() <= labels.items()
    assert labels[LABEL_JOB_NAME] == "ctr" and LABEL_MANAGED_BY in labels


def test_the_owner_reference_needs_the_jobs_uid():
    assert owner_reference(_job()) is None  # etj render: not stored yet
    ref = owner_reference(_job(uid="1234"))
    assert ref == {
        "apiVersion": API_VERSION,
        "kind": KIND,
        "name": "ctr",
        "uid": "1234",
        "controller": True,
        "blockOwnerDeletion": True,
    }


def test_the_config_maps_name_is_the_one_the_api_package_gives():
    # The ConfigMap etj creates is the one the local runner and the tests look up.
    assert config_map_name("ctr") == trainer_config_map_name("ctr")
    assert config_map_name("ctr") != config_map_name("ctr2")

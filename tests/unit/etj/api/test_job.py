"""etj.api.job: a whole job resource parsed from a manifest."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from etj.api.constants import API_VERSION, KIND
from etj.api.job import EmbeddingTrainingJob
from tests.unit.conftest import job_manifest, load_example


def test_a_manifest_parses_with_its_name_namespace_and_spec():
    manifest = job_manifest(load_example("quickstart.yaml")["spec"], name="ctr", uid="u-1")
    job = EmbeddingTrainingJob.from_manifest(manifest)
    assert (job.name, job.namespace, job.metadata.uid) == ("ctr", "team-a", "u-1")
    assert (job.apiVersion, job.kind) == (API_VERSION, KIND)
    assert job.status is None
    assert job.spec.model.embeddings  # the spec is parsed, not kept as a dict


def test_the_namespace_defaults_and_other_metadata_is_kept():
    manifest = job_manifest(load_example("quickstart.yaml")["spec"])
    del manifest["metadata"]["namespace"]
    manifest["metadata"]["resourceVersion"] = "42"
    job = EmbeddingTrainingJob.from_manifest(manifest)
    assert job.namespace == "default"
    assert job.metadata.model_extra == {"resourceVersion": "42"}


def test_an_unknown_top_level_field_or_a_nameless_job_is_refused():
    manifest = job_manifest(load_example("quickstart.yaml")["spec"])
    with pytest.raises(ValidationError, match="extra"):
        EmbeddingTrainingJob.from_manifest({**manifest, "extra": 1})
    manifest["metadata"]["name"] = ""
    with pytest.raises(ValidationError, match="name"):
        EmbeddingTrainingJob.from_manifest(manifest)


def test_a_malformed_spec_is_a_validation_error():
    manifest = job_manifest(load_example("quickstart.yaml")["spec"])
    manifest["spec"]["model"]["embeddings"][0]["vocabularySize"] = -1
    with pytest.raises(ValidationError):
        EmbeddingTrainingJob.from_manifest(manifest)

"""etj.core.render.validate_names: the derived names of a valid job's objects checked as
the API server checks them, added to the job's problems."""

from __future__ import annotations

import dataclasses

from etj.core.render.validate_names import with_derived_names
from etj.core.validation import Problem, validate_manifest
from tests.unit.conftest import job_manifest, load_example


def _valid(name: str = "ctr"):
    result = validate_manifest(job_manifest(load_example("quickstart.yaml")["spec"], name=name))
    assert result.ok
    return result


def test_a_job_whose_names_all_fit_is_returned_as_it_was():
    result = _valid()
    assert with_derived_names(result) is result


def test_a_name_too_long_for_a_derived_object_is_a_metadata_name_problem():
    result = _valid()
    long = result.job.model_copy(
        update={"metadata": result.job.metadata.model_copy(update={"name": "x" * 60})}
    )
    checked = with_derived_names(dataclasses.replace(result, job=long))
    assert not checked.ok
    assert {p.field for p in checked.problems} == {"metadata.name"}
    assert all(p.message.endswith(": shorten or rename the job") for p in checked.problems)
    assert any("'s hostname" in p.message for p in checked.problems)


def test_an_invalid_job_is_not_rendered_and_keeps_its_problems():
    invalid = dataclasses.replace(_valid(), problems=[Problem("spec.model", "broken")])
    assert with_derived_names(invalid) is invalid
    unplanned = dataclasses.replace(_valid(), plan=None)
    assert with_derived_names(unplanned) is unplanned

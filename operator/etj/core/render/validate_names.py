"""The names of the objects etj would create for a job, checked as the API server checks
them (``etj.api.names``), for ``etj validate``, ``etj render`` and ``etj run``.

Rendering the objects (not repeating how each name is made) keeps the limits true when a
name changes. Pure: no I/O.
"""

from __future__ import annotations

import dataclasses

from etj.api.names import object_name_problems
from etj.core.render.build import build_objects
from etj.core.validation import Problem, Validated


def with_derived_names(result: Validated) -> Validated:
    """``result`` with a ``metadata.name`` problem for every derived name the API server
    would refuse (only for a job that is otherwise valid: the objects must render)."""
    if not result.ok or result.job is None or result.plan is None:
        return result
    lines = object_name_problems(build_objects(result.job, result.plan))
    extra = [Problem("metadata.name", f"{line}: shorten or rename the job") for line in lines]
    return dataclasses.replace(result, problems=[*result.problems, *extra]) if extra else result

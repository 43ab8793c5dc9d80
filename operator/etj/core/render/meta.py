"""What every rendered object shares: its metadata (labels, owner reference, the job's
selector), the names of the job's objects, and ``_plain``.

Every value that comes from the job or the settings goes through ``_plain``: a fresh copy
as the JSON it stands for (mappings' keys sorted, enums as their values), so an object
shares nothing with the job and renders the same bytes every time. Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from etj.api.constants import (
    API_VERSION,
    APP_NAME,
    KIND,
    LABEL_INSTANCE,
    LABEL_JOB_NAME,
    LABEL_MANAGED_BY,
    LABEL_NAME,
    MANAGED_BY_VALUE,
)
from etj.api.conventions import trainer_config_map_name
from etj.api.job import EmbeddingTrainingJob

_SCALARS = (str, int, float, bool, type(None))


def _plain(value: Any) -> Any:
    """``value`` as the JSON it stands for, as a fresh copy: mappings with their keys sorted
    at every level, tuples as lists, and str/int/float subclasses (enums) as plain values.
    (Sorted keys keep ``etj render``'s output stable; a copy keeps a later change to one
    object out of the job and the other objects.)"""
    kind = type(value)
    if kind in _SCALARS:
        return value
    if kind is dict or isinstance(value, Mapping):
        return {_plain(k): _plain(value[k]) for k in sorted(value)}
    if kind is list or kind is tuple:
        return [_plain(v) for v in value]
    if isinstance(value, str):
        return str.__str__(value)  # an enum's value, not its name
    if isinstance(value, int | float):
        return (int if isinstance(value, int) else float)(value)
    raise TypeError(f"cannot render a {kind.__name__} ({value!r}) into an object")


def _metadata(
    name: str,
    namespace: str,
    labels: dict[str, str],
    owner: dict[str, Any] | None,
    annotations: dict[str, str] | None = None,
) -> dict[str, Any]:
    """An object's metadata, keys in the order etj writes them."""
    meta: dict[str, Any] = {
        "name": _plain(name),
        "namespace": _plain(namespace),
        "labels": _plain(labels),
    }
    if annotations is not None:
        meta["annotations"] = _plain(annotations)
    if owner:
        meta["ownerReferences"] = [_plain(owner)]
    return meta


def common_labels(job: EmbeddingTrainingJob) -> dict[str, str]:
    return {
        LABEL_NAME: APP_NAME,
        LABEL_INSTANCE: job.name,
        LABEL_MANAGED_BY: MANAGED_BY_VALUE,
        LABEL_JOB_NAME: job.name,
    }


def job_selector(job_name: str) -> dict[str, str]:
    """Labels that select every object of one job."""
    return {LABEL_MANAGED_BY: MANAGED_BY_VALUE, LABEL_JOB_NAME: job_name}


def owner_reference(job: EmbeddingTrainingJob) -> dict[str, Any] | None:
    """The controller reference to the job; None when the job has no uid yet (``etj render``)."""
    if not job.metadata.uid:
        return None
    return {
        "apiVersion": API_VERSION,
        "kind": KIND,
        "name": job.name,
        "uid": job.metadata.uid,
        "controller": True,
        "blockOwnerDeletion": True,
    }


def config_map_name(job_name: str) -> str:
    return trainer_config_map_name(job_name)

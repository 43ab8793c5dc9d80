"""``spec.replicas.<role>.template``: a Pod template merged over the Pod etj renders.

This is how a job runs its own TensorFlow program (the TFJob path): the template's
container named ``trainer`` (or ``tensorflow``, TFJob's name, which means the same
container) gives the command, args, image, env, volumeMounts and resources; the rest of the
Pod spec adds volumes, initContainers, sidecar containers, securityContext, schedulerName,
topologySpreadConstraints, nodeSelector, tolerations, affinity, ... . ``etj.core.render.podtemplate``
does the merge.

The inner Pod spec is free-form in the CRD (``x-kubernetes-preserve-unknown-fields``, as
Kubeflow's TFJob CRD is in practice): the API server validates the Pod etj creates from it,
with Kubernetes' own messages, and a copy of the whole PodSpec schema in this CRD would
grow it by ~400 kB. What etj must own is checked here, with a message that names the field:

- no env ``TF_CONFIG`` or ``ETJ_*`` in the main container (etj sets them per replica);
- no ``restartPolicy``, ``hostname`` or ``subdomain`` (etj restarts replicas itself and
  addresses them by hostname through the job's headless Service);
- no volume named as one of etj's (``trainer-config``, ``checkpoints``, ``tmp``, ``data``),
  no volumeMount at ``/etc/etj`` (the trainer config and shard plan);
- at most one main container (``trainer`` and ``tensorflow`` are the same one), every
  container with a unique name.

Labels and annotations etj sets itself win over the template's (the operator selects its
pods by them); that is done by the merge, not refused here.

Pure: no I/O, no environment, no kopf or Kubernetes client.
"""

from __future__ import annotations

from typing import Any

from pydantic import Field, model_validator

from etj.api.base import ApiModel
from etj.api.constants import (
    CONTAINER_NAME,
    ETJ_ENV_PREFIX,
    ETJ_VOLUMES,
    TF_CONFIG_ENV,
    TFJOB_CONTAINER_NAME,
    TRAINER_CONFIG_MOUNT,
)

# The main container's names: etj's and TFJob's.
MAIN_CONTAINER_NAMES = (CONTAINER_NAME, TFJOB_CONTAINER_NAME)
# Pod spec fields etj owns (why: the module docstring).
FORBIDDEN_POD_FIELDS = {
    "restartPolicy": "etj restarts replicas itself (runPolicy.restartPolicy)",
    "hostname": "etj names every replica's host <job>-<role>-<index> (TF_CONFIG uses it)",
    "subdomain": "etj puts every replica under the job's headless Service",
}


class TemplateMetadata(ApiModel):
    """Labels and annotations added to the replica's Pod (etj's own keys win)."""

    labels: dict[str, str] | None = Field(default=None, description="Extra Pod labels.")
    annotations: dict[str, str] | None = Field(default=None, description="Extra Pod annotations.")


def main_container(spec: dict[str, Any]) -> dict[str, Any] | None:
    """The template's container that is etj's own (named trainer or tensorflow), if any."""
    for c in spec.get("containers") or []:
        if isinstance(c, dict) and c.get("name") in MAIN_CONTAINER_NAMES:
            return c
    return None


def template_problems(spec: dict[str, Any]) -> list[str]:
    """What in a template's Pod spec etj cannot accept, each naming the field."""
    problems: list[str] = []
    for key, why in FORBIDDEN_POD_FIELDS.items():
        if key in spec:
            problems.append(f"spec.{key} may not be set: {why}")
    names: list[str] = []
    for kind in ("containers", "initContainers"):
        items = spec.get(kind)
        if items is None:
            continue
        if not isinstance(items, list):
            problems.append(f"spec.{kind} must be a list of containers")
            continue
        for i, c in enumerate(items):
            if not isinstance(c, dict) or not isinstance(c.get("name"), str) or not c["name"]:
                problems.append(f"spec.{kind}[{i}].name is required")
                continue
            names.append(c["name"])
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        problems.append(f"container name {twice[0]!r} appears twice")
    main = [n for n in names if n in MAIN_CONTAINER_NAMES]
    if len(main) > 1:
        problems.append(
            f"containers {CONTAINER_NAME!r} and {TFJOB_CONTAINER_NAME!r} are the same "
            "(etj's main container); give only one"
        )
    for i, c in enumerate(spec.get("containers") or []):
        if not isinstance(c, dict) or c.get("name") not in MAIN_CONTAINER_NAMES:
            continue
        for j, e in enumerate(c.get("env") or []):
            name = e.get("name") if isinstance(e, dict) else None
            if name == TF_CONFIG_ENV or (isinstance(name, str) and name.startswith(ETJ_ENV_PREFIX)):
                problems.append(
                    f"spec.containers[{i}].env[{j}]: {name} is set by etj for every replica"
                )
        for j, m in enumerate(c.get("volumeMounts") or []):
            if isinstance(m, dict) and m.get("mountPath", "").rstrip("/") == TRAINER_CONFIG_MOUNT:
                problems.append(
                    f"spec.containers[{i}].volumeMounts[{j}]: {TRAINER_CONFIG_MOUNT} is where "
                    "etj mounts the trainer config and shard plan"
                )
    for i, v in enumerate(spec.get("volumes") or []):
        if isinstance(v, dict) and v.get("name") in ETJ_VOLUMES:
            problems.append(
                f"spec.volumes[{i}]: the name {v['name']!r} is one of etj's own volumes "
                f"({', '.join(ETJ_VOLUMES)}); rename it"
            )
    return problems


def runs_own_program(spec: dict[str, Any] | None) -> bool:
    """Whether a template's Pod spec runs its own program instead of etj's trainer: its
    main container gives a command, or an image (whose entrypoint then runs)."""
    main = main_container(spec or {})
    return main is not None and bool(main.get("command") or main.get("image"))


class PodTemplate(ApiModel):
    """A PodTemplateSpec merged over the replica's Pod: containers by name (``trainer``,
    or TFJob's ``tensorflow``, is etj's own: its command, args, image, env, volumeMounts,
    resources; other names are sidecars), volumes, initContainers, securityContext,
    schedulerName, topologySpreadConstraints, nodeSelector, tolerations, affinity, ..."""

    metadata: TemplateMetadata | None = Field(
        default=None, description="Labels and annotations of the Pod (etj's own keys win)."
    )
    spec: dict[str, Any] | None = Field(
        default=None,
        description=(
            "A Pod spec merged over etj's: containers by name (trainer or tensorflow is etj's "
            "own), env and volumes by name; restartPolicy, hostname, subdomain, env TF_CONFIG "
            "and ETJ_* are etj's and may not be set."
        ),
    )

    @property
    def runs_own_program(self) -> bool:
        """Whether this template runs its own program (``runs_own_program``)."""
        return runs_own_program(self.spec)

    @model_validator(mode="after")
    def _owned_by_etj(self) -> PodTemplate:
        problems = template_problems(self.spec or {})
        if problems:
            raise ValueError("; ".join(problems))
        return self

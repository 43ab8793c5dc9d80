"""``spec.podTemplate`` (fields merged into every replica's Pod) and ``spec.placement``
(spreading replicas over nodes).

Pure: no I/O, no environment, no kopf or Kubernetes client.
"""

from __future__ import annotations

from typing import Any

from pydantic import Field

from etj.api.base import ApiModel


class EnvVar(ApiModel):
    """An environment variable added to every replica."""

    name: str = Field(
        min_length=1, pattern=r"^[-._a-zA-Z][-._a-zA-Z0-9]*$", description="Variable name."
    )
    value: str | None = Field(default=None, description="Literal value.")
    value_from: dict[str, Any] | None = Field(
        default=None, description="A Kubernetes EnvVarSource."
    )


class PodTemplateOverrides(ApiModel):
    """Fields merged into every replica's Pod."""

    labels: dict[str, str] | None = Field(default=None, description="Extra labels.")
    annotations: dict[str, str] | None = Field(default=None, description="Extra annotations.")
    node_selector: dict[str, str] | None = Field(default=None, description="Node selector.")
    tolerations: list[dict[str, Any]] | None = Field(default=None, description="Tolerations.")
    affinity: dict[str, Any] | None = Field(default=None, description="Affinity rules.")
    priority_class_name: str | None = Field(default=None, description="Priority class.")
    service_account_name: str | None = Field(
        default=None, description="Service account of the pods."
    )
    image_pull_secrets: list[dict[str, Any]] | None = Field(
        default=None, description="Image pull secrets."
    )
    env: list[EnvVar] | None = Field(default=None, description="Extra environment variables.")


class Placement(ApiModel):
    """Where replicas go, and how fast a lost node's replicas are replaced."""

    spread: bool = Field(
        default=True,
        description=(
            "Spread the replicas of each role over nodes (a topologySpreadConstraint on "
            "kubernetes.io/hostname, ScheduleAnyway), so one node's loss takes one ps, not "
            "all. A role template's topologySpreadConstraints replace it."
        ),
    )
    node_loss_seconds: int | None = Field(
        default=None,
        ge=0,
        le=3600,
        description=(
            "How long a replica stays bound to a node that is NotReady or unreachable before "
            "it is evicted and replaced (its tolerationSeconds; Kubernetes' default is 300). "
            "Default: the operator's setting (30)."
        ),
    )

"""A NetworkPolicy per job (optional: the operator's ``--network-policy``): only the job's
own pods reach its TensorFlow port, and only the operator's pods its metrics port.

TensorFlow's gRPC servers take any connection: on a shared cluster any pod could otherwise
send a ps or worker graph ops. The policy selects every pod of the job and admits
ingress on exactly those two ports; egress is left alone. Pure: no I/O.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from etj.api.job import EmbeddingTrainingJob
from etj.core.render.objects import (
    RenderSettings,
    _render,
    common_labels,
    job_selector,
    owner_reference,
)


@dataclass(frozen=True)
class NetworkPolicySettings:
    """Who may read a job's metrics: the operator's namespace and its pods' labels."""

    operator_namespace: str
    operator_labels: dict[str, str] = field(default_factory=dict)

    @classmethod
    def parse(cls, text: str) -> NetworkPolicySettings:
        """From ``NAMESPACE/KEY=VALUE,KEY=VALUE`` (the operator's ``--network-policy``)."""
        namespace, sep, labels = text.partition("/")
        pairs = [p.partition("=") for p in labels.split(",") if p]
        if not namespace or not sep or not pairs or any(not k or not eq for k, eq, _ in pairs):
            raise ValueError(
                f"{text!r}: expected NAMESPACE/KEY=VALUE[,KEY=VALUE...], the operator's "
                "namespace and its pods' labels"
            )
        return cls(namespace, {k: v for k, _, v in pairs})


def build_network_policy(
    job: EmbeddingTrainingJob, settings: RenderSettings
) -> dict[str, Any] | None:
    """The job's NetworkPolicy; None unless the operator's settings ask for one."""
    policy = settings.network_policy
    if policy is None:
        return None
    return _render(
        "networkpolicy.yaml.j2",
        job=job.name,
        namespace=job.namespace,
        labels=common_labels(job),
        owner=owner_reference(job),
        selector=job_selector(job.name),
        tf_port=settings.tf_port,
        metrics_port=settings.metrics_port,
        operator_namespace=policy.operator_namespace,
        operator_labels=policy.operator_labels,
    )

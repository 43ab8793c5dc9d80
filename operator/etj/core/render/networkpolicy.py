"""A NetworkPolicy per job (optional: the operator's ``--network-policy``): only the job's
own pods reach its TensorFlow port, and only the operator's pods its metrics port.

TensorFlow's gRPC servers take any connection: on a shared cluster any pod could otherwise
send a ps or worker graph ops. The policy selects every pod of the job and admits
ingress on exactly those two ports; egress is left alone. Its settings
(``NetworkPolicySettings``) live in ``etj.core.render.settings``. Pure: no I/O.
"""

from __future__ import annotations

from typing import Any

from etj.api.constants import NAMESPACE_NAME_LABEL
from etj.api.job import EmbeddingTrainingJob
from etj.core.render.meta import _metadata, _plain, common_labels, job_selector, owner_reference
from etj.core.render.settings import RenderSettings


def build_network_policy(
    job: EmbeddingTrainingJob, settings: RenderSettings
) -> dict[str, Any] | None:
    """The job's NetworkPolicy; None unless the operator's settings ask for one."""
    policy = settings.network_policy
    if policy is None:
        return None
    selector = _plain(job_selector(job.name))
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": _metadata(job.name, job.namespace, common_labels(job), owner_reference(job)),
        "spec": {
            "podSelector": {"matchLabels": selector},
            # Ingress only: what the job's pods reach is left alone (the data, the API
            # server...).
            "policyTypes": ["Ingress"],
            "ingress": [
                # TensorFlow's gRPC: the job's own replicas only.
                {
                    "from": [{"podSelector": {"matchLabels": _plain(selector)}}],
                    "ports": [{"port": settings.tf_port, "protocol": "TCP"}],
                },
                # The chief's progress page: the operator's pods.
                {
                    "from": [
                        {
                            "namespaceSelector": {
                                "matchLabels": {
                                    NAMESPACE_NAME_LABEL: _plain(policy.operator_namespace)
                                }
                            },
                            "podSelector": {"matchLabels": _plain(policy.operator_labels)},
                        }
                    ],
                    "ports": [{"port": settings.metrics_port, "protocol": "TCP"}],
                },
            ],
        },
    }

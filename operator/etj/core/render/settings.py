"""What the operator (or ``etj render``) decides beyond the job itself: ``RenderSettings``,
and the NetworkPolicy's ``NetworkPolicySettings`` among them.

Plain values, no logic beyond parsing a flag; nothing here reads the environment.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from etj.api.constants import DEFAULT_IMAGE, METRICS_PORT, TF_PORT
from etj.api.spec import GangScheduler


@dataclass(frozen=True)
class RenderSettings:
    """What the operator (or ``etj render``) decides beyond the job itself."""

    default_image: str = DEFAULT_IMAGE
    tf_port: int = TF_PORT
    metrics_port: int = METRICS_PORT
    grace_seconds: int = 60
    command: tuple[str, ...] = ("python", "-m", "etj_trainer")
    # Per-replica memory limit overrides (after OOM kills), keyed by pod name.
    memory_limits: dict[str, int] = field(default_factory=dict)
    # The gang scheduler of jobs whose schedulingPolicy names none (etj.core.render.scheduling).
    gang_scheduler: GangScheduler = GangScheduler.WORKLOAD
    # A NetworkPolicy per job (etj.core.render.networkpolicy); None: none.
    network_policy: NetworkPolicySettings | None = None
    # The StorageClass of checkpoint.storage claims that name none (None: the cluster's
    # default class).
    storage_class: str | None = None
    # tolerationSeconds for node.kubernetes.io/not-ready and unreachable of jobs whose
    # placement.nodeLossSeconds is not set (Kubernetes' default is 300).
    node_loss_seconds: int = 30


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

"""The operator's settings, filled from ``etj operator``'s options (and their env vars)."""

from __future__ import annotations

from dataclasses import dataclass

from etj.api.constants import DEFAULT_IMAGE
from etj.api.spec import GangScheduler
from etj.core.render.settings import NetworkPolicySettings


@dataclass(frozen=True)
class OperatorSettings:
    default_image: str = DEFAULT_IMAGE
    # A full pass at least this often even without events (TTL, deadlines, missed events).
    resync_seconds: float = 30.0
    # How often the chief's metrics are read into status.progress.
    progress_seconds: float = 10.0
    max_memory_on_oom: int = 64 * 2**30
    metrics_port: int = 8080
    # The gang scheduler of jobs whose runPolicy.schedulingPolicy names none.
    gang_scheduler: GangScheduler = GangScheduler.WORKLOAD
    # A NetworkPolicy per job (--network-policy); None: none.
    network_policy: NetworkPolicySettings | None = None
    # The StorageClass of checkpoint.storage claims that name none (None: the cluster's).
    checkpoint_storage_class: str | None = None
    # tolerationSeconds of the not-ready/unreachable taints (placement.nodeLossSeconds).
    node_loss_seconds: int = 30

"""Every object the operator creates for a job (``build_objects``): the NetworkPolicy, the
Service, the trainer's ConfigMap, the checkpoint claim, the gang object, then the Pods.

Objects are built as Python data (dicts and lists), as the API server will store them.
Nothing here talks to the API server or reads the environment: the operator's settings
come in as ``RenderSettings``.
"""

from __future__ import annotations

import json
from typing import Any

from etj.api.constants import LABEL_RETAINED, PORT_NAME_TF, SHARD_PLAN_FILE, TRAINER_CONFIG_FILE
from etj.api.job import EmbeddingTrainingJob
from etj.api.plan import ShardPlan
from etj.core.render.meta import (
    _metadata,
    _plain,
    common_labels,
    config_map_name,
    job_selector,
    owner_reference,
)
from etj.core.render.networkpolicy import build_network_policy
from etj.core.render.pod import build_pods, replica_resources, replica_set
from etj.core.render.scheduling import build_gang, gang_scheduler
from etj.core.render.settings import RenderSettings
from etj.core.render.trainer_config import build_trainer_config
from etj.core.render.warmstart import checkpoint_claim_name


def build_checkpoint_claim(
    job: EmbeddingTrainingJob, settings: RenderSettings
) -> dict[str, Any] | None:
    """The ReadWriteMany claim of ``checkpoint.storage``; None when the job has none. Owned
    by the job (deleted with it) unless ``retain``: then only labelled with the job's name."""
    storage = job.spec.checkpoint.storage
    if storage is None:
        return None
    labels = common_labels(job)
    meta: dict[str, Any] = {
        "name": checkpoint_claim_name(job.name),
        "namespace": job.namespace,
        "labels": labels,
    }
    owner = owner_reference(job)
    if storage.retain:
        labels[LABEL_RETAINED] = "true"
    elif owner is not None:
        meta["ownerReferences"] = [owner]
    spec: dict[str, Any] = {
        "accessModes": ["ReadWriteMany"],
        "resources": {"requests": {"storage": storage.size}},
    }
    storage_class = storage.storage_class_name or settings.storage_class
    if storage_class:
        spec["storageClassName"] = storage_class
    return {"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": meta, "spec": spec}


def build_service(job: EmbeddingTrainingJob, settings: RenderSettings) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": _metadata(job.name, job.namespace, common_labels(job), owner_reference(job)),
        "spec": {
            # Headless, and DNS records exist before pods are ready: peers resolve each
            # other while TensorFlow servers start (the start-up race users of other
            # operators hit).
            "clusterIP": "None",
            "publishNotReadyAddresses": True,
            "selector": _plain(job_selector(job.name)),
            "ports": [
                {
                    "name": PORT_NAME_TF,
                    "port": settings.tf_port,
                    "targetPort": settings.tf_port,
                    "protocol": "TCP",
                }
            ],
        },
    }


def build_config_map(
    job: EmbeddingTrainingJob, plan: ShardPlan, settings: RenderSettings
) -> dict[str, Any]:
    config = build_trainer_config(job, plan, settings)
    meta = _metadata(
        config_map_name(job.name), job.namespace, common_labels(job), owner_reference(job)
    )
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": meta,
        "data": {
            TRAINER_CONFIG_FILE: json.dumps(config.to_wire(), indent=1, sort_keys=True),
            # The plan alone, for a job's own program (``ETJ_SHARD_PLAN``, etj_trainer.sdk).
            SHARD_PLAN_FILE: json.dumps(plan.to_wire(), indent=1, sort_keys=True),
        },
    }


def build_gang_object(
    job: EmbeddingTrainingJob, plan: ShardPlan, settings: RenderSettings
) -> dict[str, Any] | None:
    """The job's gang object (Workload or PodGroup); None when it is not gang-scheduled."""
    backend = gang_scheduler(job, settings.gang_scheduler)
    if backend is None:
        return None
    return build_gang(
        job,
        replica_set(job, plan),
        backend,
        common_labels(job),
        owner_reference(job),
        lambda role, index: replica_resources(job, plan, role, index, settings).get("requests"),
    )


def build_objects(
    job: EmbeddingTrainingJob, plan: ShardPlan, settings: RenderSettings | None = None
) -> list[dict[str, Any]]:
    """Every object the operator creates for a job: the NetworkPolicy (if the settings ask
    for one), Service, ConfigMap, the checkpoint claim (checkpoint.storage), the gang object
    (if gang-scheduled), then the Pods."""
    settings = settings or RenderSettings()
    gang = build_gang_object(job, plan, settings)
    policy = build_network_policy(job, settings)
    claim = build_checkpoint_claim(job, settings)
    return [
        *([policy] if policy is not None else []),
        build_service(job, settings),
        build_config_map(job, plan, settings),
        *([claim] if claim is not None else []),
        *([gang] if gang is not None else []),
        *build_pods(job, plan, settings),
    ]

"""Pure ``build_*`` functions: a job and its shard plan in, Kubernetes objects out.

The jinja2 templates next to this module give the manifests their shape; every value is
inserted as JSON (``tojson``), and TF_CONFIG is built by ``etj.core.tfconfig`` with ``json``,
never by text templating. Nothing here talks to the API server or reads the environment:
the operator's settings come in as ``RenderSettings``.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from functools import cache
from typing import TYPE_CHECKING, Any

import jinja2
import yaml

from etj.api.constants import (
    API_VERSION,
    APP_NAME,
    CONTAINER_NAME,
    DEFAULT_IMAGE,
    KIND,
    LABEL_JOB_NAME,
    LABEL_MANAGED_BY,
    LABEL_NAME,
    LABEL_REPLICA_INDEX,
    LABEL_REPLICA_TYPE,
    MANAGED_BY_VALUE,
    METRICS_PORT,
    MODEL_CODE_ENV,
    MODEL_CODE_MOUNT,
    SHARD_PLAN_ENV,
    SHARD_PLAN_FILE,
    TERMINATION_LOG,
    TERMINATION_LOG_ENV,
    TF_PORT,
    TRAINER_CONFIG_FILE,
    TRAINER_CONFIG_MOUNT,
    VOLUME_CHECKPOINTS,
    VOLUME_DATA,
    VOLUME_GCS_CREDENTIALS,
    VOLUME_MODEL_CODE,
    VOLUME_TMP,
    VOLUME_TRAINER_CONFIG,
)
from etj.api.job import EmbeddingTrainingJob
from etj.api.plan import ShardPlan
from etj.api.podtemplate import runs_own_program
from etj.api.quantity import format_bytes, quantity_bytes
from etj.api.spec import GCS_CREDENTIALS_MOUNT, GangScheduler, ResourceRequirements, Strategy
from etj.api.trainer import TrainerCheckpoint, TrainerConfig
from etj.core.render.kueue import kueue_pod_metadata
from etj.core.render.podtemplate import merge_pod_template, template_resources
from etj.core.render.scheduling import build_gang, gang_scheduler, pod_scheduling
from etj.core.tfconfig import AddressFn, ReplicaSet, dns_address, pod_name, tf_config

if TYPE_CHECKING:
    from etj.core.render.networkpolicy import NetworkPolicySettings

# Annotation carrying the memory limit an OOM-killed replica was recreated with.
ANNOTATION_MEMORY_LIMIT = "training.etj.dev/memory-limit"
ANNOTATION_SPEC_HASH = "training.etj.dev/spec-generation"


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


# JSON escapes a character outside the BMP as a UTF-16 surrogate pair (backslash-u d800
# backslash-u dc00), which YAML refuses: YAML spells it backslash-U 00010000. Escaped
# backslashes are matched first, so a value that itself contains "backslash-u d800" stays.
_SURROGATE_PAIR = re.compile(r"(\\\\)|\\u(d[89ab][0-9a-f]{2})\\u(d[c-f][0-9a-f]{2})")


def _pair_to_yaml(m: re.Match[str]) -> str:
    if m.group(1):
        return m.group(1)
    high, low = int(m.group(2), 16), int(m.group(3), 16)
    return f"\\U{0x10000 + ((high - 0xD800) << 10) + (low - 0xDC00):08x}"


def _tojson(value: Any) -> str:
    """A value as a JSON literal YAML reads back as the same value."""
    return _SURROGATE_PAIR.sub(_pair_to_yaml, json.dumps(value, sort_keys=True))


@cache
def _env() -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.PackageLoader("etj.core.render", "templates"),
        undefined=jinja2.StrictUndefined,
        autoescape=False,
        keep_trailing_newline=True,
    )
    env.filters["tojson"] = _tojson
    return env


def _render(template: str, **values: Any) -> dict[str, Any]:
    text = _env().get_template(template).render(**values)
    # libyaml's parser when present: rendering is on the operator's hot path.
    obj = yaml.load(text, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
    assert isinstance(obj, dict)
    return obj


def replica_set(job: EmbeddingTrainingJob, plan: ShardPlan) -> ReplicaSet:
    """The tasks a job runs: chief defaults to one under ParameterServer, none otherwise."""
    r = job.spec.replicas
    ps_strategy = plan.strategy == Strategy.PARAMETER_SERVER.value
    chief = r.chief.replicas if r.chief is not None else (1 if ps_strategy else 0)
    return ReplicaSet(
        chief=chief,
        worker=r.worker.replicas,
        ps=plan.ps_replicas,
        evaluator=r.evaluator.replicas if r.evaluator is not None else 0,
    )


def common_labels(job: EmbeddingTrainingJob) -> dict[str, str]:
    return {
        LABEL_NAME: APP_NAME,
        "app.kubernetes.io/instance": job.name,
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
    return f"{job_name}-trainer-config"


def checkpoint_dir(job: EmbeddingTrainingJob) -> str:
    # A per-job directory: one checkpoint volume may serve several jobs, and one bucket
    # prefix (or shared path) several namespaces.
    ckpt = job.spec.checkpoint
    if ckpt.uri is not None:
        return f"{ckpt.uri.rstrip('/')}/{job.namespace}/{job.name}"
    return f"{ckpt.mount_path.rstrip('/')}/{job.name}"


def checkpoint_claim_name(job_name: str) -> str:
    return f"{job_name}-checkpoints"


# Label of a checkpoint claim kept after its job (checkpoint.storage.retain).
LABEL_RETAINED = "training.etj.dev/retained"


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


def build_trainer_config(
    job: EmbeddingTrainingJob, plan: ShardPlan, settings: RenderSettings
) -> TrainerConfig:
    spec = job.spec
    return TrainerConfig(
        job_name=job.name,
        strategy=plan.strategy,
        model=spec.model,
        data=spec.data,
        training=spec.training,
        checkpoint=TrainerCheckpoint(
            directory=checkpoint_dir(job),
            every_steps=spec.checkpoint.every_steps,
            keep=spec.checkpoint.keep,
        ),
        shard_plan=plan,
        metrics_port=settings.metrics_port,
        export_dir=f"{checkpoint_dir(job)}/export",
        watchdog_seconds=spec.run_policy.watchdog_seconds,
    )


def build_service(job: EmbeddingTrainingJob, settings: RenderSettings) -> dict[str, Any]:
    return _render(
        "service.yaml.j2",
        job=job.name,
        namespace=job.namespace,
        labels=common_labels(job),
        owner=owner_reference(job),
        selector=job_selector(job.name),
        tf_port=settings.tf_port,
    )


def build_config_map(
    job: EmbeddingTrainingJob, plan: ShardPlan, settings: RenderSettings
) -> dict[str, Any]:
    config = build_trainer_config(job, plan, settings)
    return _render(
        "configmap.yaml.j2",
        name=config_map_name(job.name),
        namespace=job.namespace,
        labels=common_labels(job),
        owner=owner_reference(job),
        files={
            TRAINER_CONFIG_FILE: json.dumps(config.to_wire(), indent=1, sort_keys=True),
            # The plan alone, for a job's own program (``ETJ_SHARD_PLAN``, etj_trainer.sdk).
            SHARD_PLAN_FILE: json.dumps(plan.to_wire(), indent=1, sort_keys=True),
        },
    )


def _role_spec(job: EmbeddingTrainingJob, role: str) -> Any:
    r = job.spec.replicas
    return {"chief": r.chief, "worker": r.worker, "ps": r.ps, "evaluator": r.evaluator}[role]


def role_template(job: EmbeddingTrainingJob, role: str) -> dict[str, Any] | None:
    """The wire form of ``spec.replicas.<role>.template``, if the role has one."""
    spec = _role_spec(job, role)
    template = getattr(spec, "template", None) if spec is not None else None
    return template.to_wire() if template is not None else None


def _role_resources(job: EmbeddingTrainingJob, role: str) -> ResourceRequirements | None:
    """The role's resources: ``resources``, with the template container's over them."""
    spec = _role_spec(job, role)
    given = spec.resources if spec is not None else None
    extra = template_resources(role_template(job, role))
    if not extra:
        return given
    base = given.to_wire() if given else {}
    merged = {
        k: {**(base.get(k) or {}), **(extra.get(k) or {})}
        for k in ("requests", "limits")
        if base.get(k) or extra.get(k)
    }
    return ResourceRequirements.model_validate(merged)


def replica_resources(
    job: EmbeddingTrainingJob,
    plan: ShardPlan,
    role: str,
    index: int,
    settings: RenderSettings,
) -> dict[str, Any]:
    """A replica's container resources: the user's, with memory raised to what the plan needs."""
    given = _role_resources(job, role)
    requests: dict[str, Any] = dict(given.requests or {}) if given else {}
    limits: dict[str, Any] = dict(given.limits or {}) if given else {}
    need: int | None = None
    if role == "ps" and plan.ps:
        need = plan.ps[index].memory_request_bytes
        if "memory" not in limits:
            # The budget the plan was fitted into is the ps's limit.
            limits["memory"] = job.spec.sharding.default_ps_memory
    elif role in ("chief", "worker") and plan.replica_memory_bytes is not None:
        # etj's trainer mirrors every table on each replica; a program of the user's own
        # (a converted TFJob) is sized by the resources it asks for, as in a TFJob.
        template = role_template(job, role)
        if not runs_own_program((template or {}).get("spec")):
            need = plan.replica_memory_bytes
    if need is not None:
        current = quantity_bytes(requests["memory"]) if "memory" in requests else 0
        if need > current:
            requests["memory"] = format_bytes(need)
    override = settings.memory_limits.get(pod_name(job.name, role, index))
    if override is not None:
        limits["memory"] = format_bytes(override)
    out: dict[str, Any] = {}
    if requests:
        out["requests"] = requests
    if limits:
        out["limits"] = limits
    return out


def _volumes(job: EmbeddingTrainingJob) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    spec = job.spec
    ckpt = spec.checkpoint
    volumes = [
        {"name": VOLUME_TRAINER_CONFIG, "configMap": {"name": config_map_name(job.name)}},
        # TensorFlow writes temporary files; the root filesystem is read-only.
        {"name": VOLUME_TMP, "emptyDir": {}},
    ]
    mounts: list[dict[str, Any]] = [
        {"name": VOLUME_TRAINER_CONFIG, "mountPath": TRAINER_CONFIG_MOUNT, "readOnly": True},
        {"name": VOLUME_TMP, "mountPath": "/tmp"},
    ]
    if ckpt.uri is None:
        # (With a uri the trainer writes there: gs://, or a path the user's template mounts.)
        source = ckpt.volume or {"emptyDir": {}}
        if ckpt.storage is not None:
            source = {"persistentVolumeClaim": {"claimName": checkpoint_claim_name(job.name)}}
        volumes.insert(1, {"name": VOLUME_CHECKPOINTS, **source})
        mounts.insert(1, {"name": VOLUME_CHECKPOINTS, "mountPath": ckpt.mount_path})
    if ckpt.credentials_secret is not None:
        secret = ckpt.credentials_secret
        volumes.append(
            {
                "name": VOLUME_GCS_CREDENTIALS,
                "secret": {
                    "secretName": secret.name,
                    "items": [{"key": secret.key, "path": secret.key}],
                },
            }
        )
        mounts.append(
            {"name": VOLUME_GCS_CREDENTIALS, "mountPath": GCS_CREDENTIALS_MOUNT, "readOnly": True}
        )
    files = spec.data.files
    if spec.data.source == "files" and files is not None and files.volume:
        volumes.append({"name": VOLUME_DATA, **files.volume})
        mounts.append({"name": VOLUME_DATA, "mountPath": "/data", "readOnly": True})
    code = model_code_config_map(job)
    if code is not None:
        # The custom tower's files, read-only: the trainer imports them (MODEL_CODE_ENV).
        volumes.append({"name": VOLUME_MODEL_CODE, "configMap": {"name": code}})
        mounts.append({"name": VOLUME_MODEL_CODE, "mountPath": MODEL_CODE_MOUNT, "readOnly": True})
    return volumes, mounts


def model_code_config_map(job: EmbeddingTrainingJob) -> str | None:
    """The ConfigMap holding the job's own tower code (``spec.model.custom.configMap``)."""
    custom = job.spec.model.custom
    return custom.config_map if custom is not None else None


NODE_LOSS_TAINTS = ("node.kubernetes.io/not-ready", "node.kubernetes.io/unreachable")


def placement(job: EmbeddingTrainingJob, role: str, settings: RenderSettings) -> dict[str, Any]:
    """Pod spec fields that spread a role's replicas over nodes and replace those of a lost
    node soon: a ScheduleAnyway spread on kubernetes.io/hostname (a role template's own
    topologySpreadConstraints replace it), and NoExecute tolerations of the not-ready and
    unreachable taints for nodeLossSeconds instead of the 300 s the API server adds."""
    spec = job.spec
    given = {
        t.get("key") for t in (spec.pod_template.tolerations or [] if spec.pod_template else [])
    }
    seconds = spec.placement.node_loss_seconds
    seconds = settings.node_loss_seconds if seconds is None else seconds
    out: dict[str, Any] = {}
    tolerations = [
        {"key": key, "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": seconds}
        for key in NODE_LOSS_TAINTS
        if key not in given  # the user's own toleration of the taint wins
    ]
    tolerations += spec.pod_template.tolerations or [] if spec.pod_template else []
    out["tolerations"] = tolerations
    if spec.placement.spread:
        out["topologySpreadConstraints"] = [
            {
                "maxSkew": 1,
                "topologyKey": "kubernetes.io/hostname",
                "whenUnsatisfiable": "ScheduleAnyway",
                "labelSelector": {
                    "matchLabels": {LABEL_JOB_NAME: job.name, LABEL_REPLICA_TYPE: role}
                },
            }
        ]
    return out


def _pod_overrides(job: EmbeddingTrainingJob) -> dict[str, Any]:
    t = job.spec.pod_template
    if t is None:
        return {}
    wire = t.to_wire()
    keys = (
        "nodeSelector",
        "tolerations",  # (with etj's own: ``placement``)
        "affinity",
        "priorityClassName",
        "serviceAccountName",
        "imagePullSecrets",
    )
    return {k: wire[k] for k in keys if k in wire}


def build_pod(
    job: EmbeddingTrainingJob,
    plan: ShardPlan,
    role: str,
    index: int,
    settings: RenderSettings,
    address: AddressFn | None = None,
) -> dict[str, Any]:
    """The Pod of one replica."""
    replicas = replica_set(job, plan)
    address = address or dns_address(job.name, job.namespace, settings.tf_port)
    name = pod_name(job.name, role, index)
    template = job.spec.pod_template
    labels = {
        **(template.labels or {} if template else {}),
        **common_labels(job),
        "app.kubernetes.io/component": role,
        LABEL_REPLICA_TYPE: role,
        LABEL_REPLICA_INDEX: str(index),
    }
    annotations = dict(template.annotations or {}) if template else {}
    gang = pod_scheduling(job, settings.gang_scheduler)
    labels.update(gang.labels)
    annotations.update(gang.annotations)
    if job.metadata.generation is not None:
        annotations[ANNOTATION_SPEC_HASH] = str(job.metadata.generation)
    # Kueue's plain-Pod group (etj.core.render.kueue): nothing unless the job names a queue.
    kueue = kueue_pod_metadata(
        job.metadata.labels, job.name, job.metadata.uid, len(replicas.tasks()), role
    )
    labels |= kueue.labels
    annotations |= kueue.annotations
    env: list[dict[str, Any]] = [
        {"name": "TF_CONFIG", "value": tf_config(replicas, role, index, address)},
        {"name": "ETJ_TRAINER_CONFIG", "value": f"{TRAINER_CONFIG_MOUNT}/{TRAINER_CONFIG_FILE}"},
        {"name": SHARD_PLAN_ENV, "value": f"{TRAINER_CONFIG_MOUNT}/{SHARD_PLAN_FILE}"},
        {"name": "ETJ_JOB_NAME", "value": job.name},
        {"name": "ETJ_REPLICA_TYPE", "value": role},
        {"name": "ETJ_REPLICA_INDEX", "value": str(index)},
        {"name": "TF_USE_LEGACY_KERAS", "value": "1"},
        # Where the trainer writes why it ended (read back as the pod's termination message).
        {"name": TERMINATION_LOG_ENV, "value": TERMINATION_LOG},
        {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
    ]
    if model_code_config_map(job) is not None:
        # The trainer puts this directory on sys.path before it imports custom.module.
        env.append({"name": MODEL_CODE_ENV, "value": MODEL_CODE_MOUNT})
    secret = job.spec.checkpoint.credentials_secret
    if secret is not None:
        # TensorFlow's gs:// client reads the key file this names (never its contents here).
        env.append(
            {
                "name": "GOOGLE_APPLICATION_CREDENTIALS",
                "value": f"{GCS_CREDENTIALS_MOUNT}/{secret.key}",
            }
        )
    env += [e.to_wire() for e in (template.env or [])] if template else []
    ports = [{"name": "tf", "containerPort": settings.tf_port, "protocol": "TCP"}]
    if (role, index) == replicas.leader():
        ports.append({"name": "metrics", "containerPort": settings.metrics_port, "protocol": "TCP"})
    # ps and PS-strategy workers serve gRPC on the TF port as soon as they are up. Without
    # a chief (a TFJob-shaped own program) what a worker serves is the program's: no probe,
    # as in a TFJob.
    serves_tf = role == "ps" or (
        role == "worker" and plan.strategy == Strategy.PARAMETER_SERVER.value and replicas.chief > 0
    )
    readiness = {"tcpSocket": {"port": settings.tf_port}, "periodSeconds": 5} if serves_tf else None
    volumes, mounts = _volumes(job)
    pod = _render(
        "pod.yaml.j2",
        name=name,
        job=job.name,
        namespace=job.namespace,
        labels=labels,
        annotations=annotations,
        owner=owner_reference(job),
        grace_seconds=settings.grace_seconds,
        pod_overrides={**_pod_overrides(job), **placement(job, role, settings), **gang.spec},
        container=CONTAINER_NAME,
        image=job.spec.image or settings.default_image,
        image_pull_policy=job.spec.image_pull_policy,
        command=list(settings.command),
        env=env,
        ports=ports,
        resources=replica_resources(job, plan, role, index, settings),
        volume_mounts=mounts,
        readiness=readiness,
        termination_log=TERMINATION_LOG,
        volumes=volumes,
    )
    return merge_pod_template(pod, role_template(job, role))


def build_pods(
    job: EmbeddingTrainingJob,
    plan: ShardPlan,
    settings: RenderSettings,
    address: AddressFn | None = None,
) -> list[dict[str, Any]]:
    return [
        build_pod(job, plan, role, index, settings, address)
        for role, index in replica_set(job, plan).tasks()
    ]


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
    from etj.core.render.networkpolicy import build_network_policy  # it builds on this module

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

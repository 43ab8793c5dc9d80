"""Pure ``build_*`` functions: a job and its shard plan in, Kubernetes objects out.

Objects are built as Python data (dicts and lists), as the API server will store them; no
text templates, no YAML parsed back. TF_CONFIG is built by ``etj.core.tfconfig`` with
``json``. Every value that comes from the job or the settings goes through ``_plain``: a
fresh copy as the JSON it stands for (mappings' keys sorted, enums as their values), so
an object shares nothing with the job and renders the same bytes every time. Nothing here
talks to the API server or reads the environment: the operator's settings come in as
``RenderSettings``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from etj.api.constants import (
    ANNOTATION_CLUSTER_WORKERS,
    ANNOTATION_SPEC_GENERATION,
    API_VERSION,
    APP_NAME,
    CONTAINER_NAME,
    DEFAULT_IMAGE,
    GCS_CREDENTIALS_ENV,
    JOB_NAME_ENV,
    KIND,
    LABEL_COMPONENT,
    LABEL_INSTANCE,
    LABEL_JOB_NAME,
    LABEL_MANAGED_BY,
    LABEL_NAME,
    LABEL_REPLICA_INDEX,
    LABEL_REPLICA_TYPE,
    LABEL_RETAINED,
    LEGACY_KERAS_ENV,
    MANAGED_BY_VALUE,
    METRICS_PORT,
    METRICS_PORT_NAME,
    MODEL_CODE_ENV,
    MODEL_CODE_MOUNT,
    POD_NAME_ENV,
    PORT_NAME_TF,
    REPLICA_INDEX_ENV,
    REPLICA_TYPE_ENV,
    SHARD_PLAN_ENV,
    SHARD_PLAN_FILE,
    TERMINATION_LOG,
    TERMINATION_LOG_ENV,
    TF_CONFIG_ENV,
    TF_PORT,
    TRAINER_CONFIG_ENV,
    TRAINER_CONFIG_FILE,
    TRAINER_CONFIG_MOUNT,
    VOLUME_CHECKPOINTS,
    VOLUME_DATA,
    VOLUME_GCS_CREDENTIALS,
    VOLUME_MODEL_CODE,
    VOLUME_TMP,
    VOLUME_TRAINER_CONFIG,
    VOLUME_WARM_START,
)
from etj.api.conventions import trainer_config_map_name
from etj.api.job import EmbeddingTrainingJob
from etj.api.plan import ShardPlan
from etj.api.podtemplate import runs_own_program
from etj.api.quantity import format_bytes, quantity_bytes
from etj.api.roles import Role
from etj.api.spec import GCS_CREDENTIALS_MOUNT, GangScheduler, ResourceRequirements, Strategy
from etj.api.trainer import TrainerCheckpoint, TrainerConfig
from etj.api.warmstart import WARM_START_MOUNT
from etj.core.render.kueue import kueue_pod_metadata
from etj.core.render.podtemplate import merge_pod_template, template_resources
from etj.core.render.scheduling import build_gang, gang_scheduler, pod_scheduling
from etj.core.render.warmstart import (
    checkpoint_claim_name,
    checkpoint_dir,
    trainer_warm_start,
    warm_start_volume,
)
from etj.core.tfconfig import AddressFn, ReplicaSet, dns_address, pod_name, tf_config

if TYPE_CHECKING:
    from etj.core.render.networkpolicy import NetworkPolicySettings


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
        warm_start=trainer_warm_start(job),
    )


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


def _role_spec(job: EmbeddingTrainingJob, role: str) -> Any:
    r = job.spec.replicas
    return {
        Role.CHIEF: r.chief,
        Role.WORKER: r.worker,
        Role.PS: r.ps,
        Role.EVALUATOR: r.evaluator,
    }[Role(role)]


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
    if role == Role.PS and plan.ps:
        need = plan.ps[index].memory_request_bytes
        if "memory" not in limits:
            # The budget the plan was fitted into is the ps's limit.
            limits["memory"] = job.spec.sharding.default_ps_memory
    elif role in (Role.CHIEF, Role.WORKER) and plan.replica_memory_bytes is not None:
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
    warm = warm_start_volume(job)
    if warm is not None:
        # The source's checkpoints, read-only: a warm start never writes to them.
        volumes.append({"name": VOLUME_WARM_START, **warm})
        mounts.append({"name": VOLUME_WARM_START, "mountPath": WARM_START_MOUNT, "readOnly": True})
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
        LABEL_COMPONENT: role,
        LABEL_REPLICA_TYPE: role,
        LABEL_REPLICA_INDEX: str(index),
    }
    annotations = dict(template.annotations or {}) if template else {}
    gang = pod_scheduling(job, settings.gang_scheduler)
    labels.update(gang.labels)
    annotations.update(gang.annotations)
    if job.metadata.generation is not None:
        annotations[ANNOTATION_SPEC_GENERATION] = str(job.metadata.generation)
    # The cluster size its TF_CONFIG names: the operator restarts what runs a cluster of
    # another size when the job is scaled (etj.core.reconcile.policies.scale).
    annotations[ANNOTATION_CLUSTER_WORKERS] = str(replicas.worker)
    # Kueue's plain-Pod group (etj.core.render.kueue): nothing unless the job names a queue.
    kueue = kueue_pod_metadata(
        job.metadata.labels, job.name, job.metadata.uid, len(replicas.tasks()), role
    )
    labels |= kueue.labels
    annotations |= kueue.annotations
    env: list[dict[str, Any]] = [
        {"name": TF_CONFIG_ENV, "value": tf_config(replicas, role, index, address)},
        {"name": TRAINER_CONFIG_ENV, "value": f"{TRAINER_CONFIG_MOUNT}/{TRAINER_CONFIG_FILE}"},
        {"name": SHARD_PLAN_ENV, "value": f"{TRAINER_CONFIG_MOUNT}/{SHARD_PLAN_FILE}"},
        {"name": JOB_NAME_ENV, "value": job.name},
        {"name": REPLICA_TYPE_ENV, "value": role},
        {"name": REPLICA_INDEX_ENV, "value": str(index)},
        {"name": LEGACY_KERAS_ENV, "value": "1"},
        # Where the trainer writes why it ended (read back as the pod's termination message).
        {"name": TERMINATION_LOG_ENV, "value": TERMINATION_LOG},
        {"name": POD_NAME_ENV, "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
    ]
    if model_code_config_map(job) is not None:
        # The trainer puts this directory on sys.path before it imports custom.module.
        env.append({"name": MODEL_CODE_ENV, "value": MODEL_CODE_MOUNT})
    secret = job.spec.checkpoint.credentials_secret
    if secret is not None:
        # TensorFlow's gs:// client reads the key file this names (never its contents here).
        env.append({"name": GCS_CREDENTIALS_ENV, "value": f"{GCS_CREDENTIALS_MOUNT}/{secret.key}"})
    env += [e.to_wire() for e in (template.env or [])] if template else []
    ports = [{"name": PORT_NAME_TF, "containerPort": settings.tf_port, "protocol": "TCP"}]
    if (role, index) == replicas.leader():
        ports.append(
            {"name": METRICS_PORT_NAME, "containerPort": settings.metrics_port, "protocol": "TCP"}
        )
    # ps and PS-strategy workers serve gRPC on the TF port as soon as they are up. Without
    # a chief (a TFJob-shaped own program) what a worker serves is the program's: no probe,
    # as in a TFJob.
    serves_tf = role == Role.PS or (
        role == Role.WORKER
        and plan.strategy == Strategy.PARAMETER_SERVER.value
        and replicas.chief > 0
    )
    volumes, mounts = _volumes(job)
    container: dict[str, Any] = {
        "name": CONTAINER_NAME,
        "image": _plain(job.spec.image or settings.default_image),
    }
    if job.spec.image_pull_policy:
        container["imagePullPolicy"] = _plain(job.spec.image_pull_policy)
    container |= {
        "command": _plain(settings.command),
        "env": _plain(env),
        "ports": _plain(ports),
        "resources": _plain(replica_resources(job, plan, role, index, settings)),
        "volumeMounts": _plain(mounts),
        # The trainer writes its failure reason here (the operator acts on
        # WatchdogTimeout); a replica that wrote nothing still leaves the end of its log.
        "terminationMessagePath": TERMINATION_LOG,
        "terminationMessagePolicy": "FallbackToLogsOnError",
    }
    if serves_tf:
        container["readinessProbe"] = {"periodSeconds": 5, "tcpSocket": {"port": settings.tf_port}}
    container["securityContext"] = {
        "allowPrivilegeEscalation": False,
        "readOnlyRootFilesystem": True,
        "capabilities": {"drop": ["ALL"]},
    }
    spec: dict[str, Any] = {
        # The operator, not the kubelet, restarts replicas: it applies the strategy-aware
        # rules and counts restarts against the job's backoffLimit.
        "restartPolicy": "Never",
        "hostname": name,
        "subdomain": job.name,
        "enableServiceLinks": False,
        "terminationGracePeriodSeconds": settings.grace_seconds,
        "securityContext": {
            "runAsNonRoot": True,
            "runAsUser": 1000,
            "runAsGroup": 1000,
            "fsGroup": 1000,
            "seccompProfile": {"type": "RuntimeDefault"},
        },
    }
    overrides = {**_pod_overrides(job), **placement(job, role, settings), **gang.spec}
    spec |= {key: _plain(value) for key, value in overrides.items()}
    spec["containers"] = [container]
    spec["volumes"] = _plain(volumes)
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": _metadata(name, job.namespace, labels, owner_reference(job), annotations),
        "spec": spec,
    }
    template_wire = role_template(job, role)
    # (A freshly built pod needs no copy: the merge copies only when there is a template.)
    return merge_pod_template(pod, template_wire) if template_wire else pod


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

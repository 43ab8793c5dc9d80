"""The Pod of each replica: its tasks (``replica_set``), resources raised to what the plan
needs, volumes, placement over nodes, TF_CONFIG and environment, merged with the role's
template. TF_CONFIG is built by ``etj.core.tfconfig`` with ``json``.

Objects are built as Python data (dicts and lists), as the API server will store them; no
text templates, no YAML parsed back. Pure: no I/O, no environment.
"""

from __future__ import annotations

from typing import Any

from etj.api.constants import (
    ANNOTATION_CLUSTER_WORKERS,
    ANNOTATION_SPEC_GENERATION,
    CONTAINER_NAME,
    DISK_MOUNT,
    DISK_TABLES_ENV,
    GCS_CREDENTIALS_ENV,
    JOB_NAME_ENV,
    LABEL_COMPONENT,
    LABEL_JOB_NAME,
    LABEL_REPLICA_INDEX,
    LABEL_REPLICA_TYPE,
    LEGACY_KERAS_ENV,
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
    TRAINER_CONFIG_ENV,
    TRAINER_CONFIG_FILE,
    TRAINER_CONFIG_MOUNT,
    VOLUME_CHECKPOINTS,
    VOLUME_DATA,
    VOLUME_DISK_TABLES,
    VOLUME_GCS_CREDENTIALS,
    VOLUME_MODEL_CODE,
    VOLUME_TMP,
    VOLUME_TRAINER_CONFIG,
    VOLUME_WARM_START,
)
from etj.api.disk import disk_volume_bytes
from etj.api.job import EmbeddingTrainingJob
from etj.api.plan import ShardPlan
from etj.api.podtemplate import runs_own_program
from etj.api.quantity import format_bytes, quantity_bytes
from etj.api.roles import Role
from etj.api.spec import GCS_CREDENTIALS_MOUNT, ResourceRequirements, Strategy
from etj.api.warmstart import WARM_START_MOUNT
from etj.core.render.kueue import kueue_pod_metadata
from etj.core.render.meta import _metadata, _plain, common_labels, config_map_name, owner_reference
from etj.core.render.podtemplate import merge_pod_template, template_resources
from etj.core.render.scheduling import pod_scheduling
from etj.core.render.settings import RenderSettings
from etj.core.render.warmstart import checkpoint_claim_name, warm_start_volume
from etj.core.tfconfig import AddressFn, ReplicaSet, dns_address, pod_name, tf_config


def replica_set(job: EmbeddingTrainingJob, plan: ShardPlan) -> ReplicaSet:
    """The tasks a job runs: chief defaults to one under ParameterServer, none otherwise."""
    r = job.spec.replicas
    ps_strategy = plan.strategy == Strategy.PARAMETER_SERVER
    chief = r.chief.replicas if r.chief is not None else (1 if ps_strategy else 0)
    return ReplicaSet(
        chief=chief,
        worker=r.worker.replicas,
        ps=plan.ps_replicas,
        evaluator=r.evaluator.replicas if r.evaluator is not None else 0,
    )


def _role_spec(job: EmbeddingTrainingJob, role: Role) -> Any:
    r = job.spec.replicas
    return {
        Role.CHIEF: r.chief,
        Role.WORKER: r.worker,
        Role.PS: r.ps,
        Role.EVALUATOR: r.evaluator,
    }[Role(role)]


def role_template(job: EmbeddingTrainingJob, role: Role) -> dict[str, Any] | None:
    """The wire form of ``spec.replicas.<role>.template``, if the role has one."""
    spec = _role_spec(job, role)
    template = getattr(spec, "template", None) if spec is not None else None
    return template.to_wire() if template is not None else None


def _role_resources(job: EmbeddingTrainingJob, role: Role) -> ResourceRequirements | None:
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
    role: Role,
    index: int,
    settings: RenderSettings,
) -> dict[str, Any]:
    """A replica's container resources: the user's, with memory raised to what the plan needs."""
    given = _role_resources(job, role)
    requests: dict[str, Any] = dict(given.requests or {}) if given else {}
    limits: dict[str, Any] = dict(given.limits or {}) if given else {}
    need: int | None = None
    own = runs_own_program((role_template(job, role) or {}).get("spec"))
    if role == Role.PS and plan.ps and not own:
        # (A ps of the job's own program asks for what its template says, as in a TFJob.)
        need = plan.ps[index].memory_request_bytes
        if "memory" not in limits:
            # The budget the plan was fitted into is the ps's limit.
            limits["memory"] = job.spec.sharding.default_ps_memory
    elif role in (Role.CHIEF, Role.WORKER) and plan.replica_memory_bytes is not None and not own:
        # etj's trainer mirrors every table on each replica; a program of the user's own
        # (a converted TFJob) is sized by the resources it asks for, as in a TFJob.
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


def disk_tables_volume(plan: ShardPlan, index: int) -> dict[str, Any] | None:
    """The emptyDir of ps ``index``'s disk-table files (those of tables naming no path of
    their own), sized to them with a margin; None when it holds none."""
    held = 0
    for t in plan.tables:
        if t.disk is None or t.disk.path != DISK_MOUNT:
            continue
        held += sum(
            rows * t.disk.record_bytes
            for rows, ps in zip(t.rows_per_shard, t.ps_of_shard, strict=True)
            if ps == index
        )
    if not held:
        return None
    return {"emptyDir": {"sizeLimit": format_bytes(disk_volume_bytes(held))}}


def model_code_config_map(job: EmbeddingTrainingJob) -> str | None:
    """The ConfigMap holding the job's own tower code (``spec.model.custom.configMap``)."""
    custom = job.spec.model.custom
    return custom.config_map if custom is not None else None


NODE_LOSS_TAINTS = ("node.kubernetes.io/not-ready", "node.kubernetes.io/unreachable")


def placement(job: EmbeddingTrainingJob, role: Role, settings: RenderSettings) -> dict[str, Any]:
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
    role: Role,
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
    disk = disk_tables_volume(plan, index) if role == Role.PS else None
    if disk is not None:
        # Where the ps' disk tables keep their files (the trainer reads the directory here,
        # so a process-backed node's remapping of the mount reaches it).
        env.append({"name": DISK_TABLES_ENV, "value": DISK_MOUNT})
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
        role == Role.WORKER and plan.strategy == Strategy.PARAMETER_SERVER and replicas.chief > 0
    )
    volumes, mounts = _volumes(job)
    if disk is not None:
        volumes.append({"name": VOLUME_DISK_TABLES, **disk})
        mounts.append({"name": VOLUME_DISK_TABLES, "mountPath": DISK_MOUNT})
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

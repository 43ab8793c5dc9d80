"""``etj convert tfjob.yaml``: a Kubeflow TFJob (``kubeflow.org/v1``) as an EmbeddingTrainingJob.

The converted job runs the same containers: every ``tfReplicaSpecs.<Type>.template`` becomes
``spec.replicas.<role>.template`` (Chief and Master become the chief, Worker the workers, PS
the ps, Evaluator the evaluator); the TFJob's ``tensorflow`` container is etj's main
container, so it keeps its image, command, args, env and mounts (its resources move to
``spec.replicas.<role>.resources``, where the planner reads the ps memory) and its
security context (none when the TFJob gives none: not etj's hardened default), and etj adds
TF_CONFIG (the same JSON shape TFJob gives) and ``ETJ_SHARD_PLAN``. With PS replicas the
strategy is ParameterServer, else MultiWorkerMirrored. ``runPolicy`` maps field by field.

TFJob's shapes are kept, because the converted job runs the TFJob's own command: PS +
Worker without a Chief (dist-mnist's between-graph replication) becomes a ParameterServer
job with ``replicas.chief.replicas: 0``, where worker 0 is the chief, as in TFJob; Worker
only, and Worker + Evaluator, run without a chief too. ``successPolicy: AllWorkers``
becomes ``runPolicy.successPolicy: AllWorkers``. Gang scheduling — ``runPolicy.
schedulingPolicy``, the templates' ``schedulerName`` (``volcano``, or scheduler-plugins')
and Volcano's ``scheduling.k8s.io/group-name`` annotation — becomes etj's
``runPolicy.schedulingPolicy``, whose gang object (PodGroup) etj creates, named as the job,
as Kubeflow's operator does.

What has no etj equivalent is refused with a ``ConversionError`` naming the TFJob field
(``enableDynamicWorker``, ``schedulingPolicy.minResources``, ``AllWorkers`` next to a
Chief, ...); what is left behind because the new job does not need it (``status``, the
metadata the API server sets, ``runPolicy.managedBy``, a Pod-level ``restartPolicy`` the
replica's overrides) is a warning line naming the field: nothing is dropped silently.
Restart policies are carried per role: the one most replicas give becomes the job's
``runPolicy.restartPolicy``, a role that gives another gets its own
``replicas.<role>.restartPolicy``. A Pod-level ``restartPolicy`` with none on the replica
is the replica's (what ``kubectl create`` users write). ``metadata.generateName``
is kept (the API server names the job; ``etj run``/``etj validate`` name it from it), and a
name can be given instead (``--name``).

A TFJob has no embedding tables; etj's shard plan needs at least one, so the job gets the
``model`` the caller passes (``--model``) or a one-row placeholder table.

Pure: a manifest dict in, a manifest dict out; the CLI (``etj.cli``) does the file I/O.
Kubeflow's TFJob API is read from its documented fields, not imported (no Go types here).
"""

from __future__ import annotations

import copy
from collections import Counter
from typing import Any

from etj.api.constants import API_VERSION, KIND, MAX_JOB_NAME_LENGTH
from etj.api.spec import GangScheduler, Strategy, SuccessPolicy
from etj.core.render.scheduling import DEFAULT_SCHEDULER_NAMES, VOLCANO_GROUP_ANNOTATION

TFJOB_API_VERSIONS = ("kubeflow.org/v1",)
TFJOB_KIND = "TFJob"

# TFJob replica type (its keys are case-insensitive) -> etj role.
ROLE_OF = {
    "chief": "chief",
    "master": "chief",
    "worker": "worker",
    "ps": "ps",
    "evaluator": "evaluator",
}
# TFJob restart policy -> etj runPolicy.restartPolicy. Always has no job-level meaning in
# etj (a replica that exits 0 is done); under it TFJob restarts failures like OnFailure.
RESTART_POLICY = {
    "OnFailure": "OnFailure",
    "Never": "Never",
    "ExitCode": "ExitCode",
    "Always": "OnFailure",
}
# runPolicy fields carried over as they are.
RUN_POLICY_FIELDS = (
    "cleanPodPolicy",
    "ttlSecondsAfterFinished",
    "activeDeadlineSeconds",
    "backoffLimit",
    "suspend",
)

# TFJob's runPolicy.schedulingPolicy fields etj takes as they are (etj's names).
SCHEDULING_FIELDS = {
    "minAvailable": "minAvailable",
    "queue": "queue",
    "priorityClass": "priorityClass",
    "scheduleTimeoutSeconds": "scheduleTimeoutSeconds",
}
# A Pod schedulerName that says which gang scheduler the TFJob was written for.
GANG_OF_SCHEDULER = {name: gang for gang, name in DEFAULT_SCHEDULER_NAMES.items()}
# TFJob's successPolicy -> etj's runPolicy.successPolicy ("" is TFJob's default).
SUCCESS_POLICY = {"": None, SuccessPolicy.ALL_WORKERS.value: SuccessPolicy.ALL_WORKERS.value}

# What the API server appends to a generateName.
GENERATED_NAME_SUFFIX_LENGTH = 5

PLACEHOLDER_MODEL: dict[str, Any] = {
    "embeddings": [{"name": "placeholder", "vocabularySize": 1, "dimension": 1}],
    "denseFeatures": 0,
}


class ConversionError(ValueError):
    """The TFJob uses something etj cannot express; ``field`` is its path in the TFJob."""

    def __init__(self, field: str, message: str):
        super().__init__(f"{field}: {message}")
        self.field = field
        self.message = message


def _replica_specs(spec: dict[str, Any]) -> dict[str, tuple[str, dict[str, Any]]]:
    """etj role -> (the TFJob's key for it, its ReplicaSpec)."""
    given = spec.get("tfReplicaSpecs")
    if not isinstance(given, dict) or not given:
        raise ConversionError("spec.tfReplicaSpecs", "is required (Chief/Worker/PS/Evaluator)")
    out: dict[str, tuple[str, dict[str, Any]]] = {}
    for key, rs in given.items():
        field = f"spec.tfReplicaSpecs.{key}"
        role = ROLE_OF.get(str(key).lower())
        if role is None:
            raise ConversionError(
                field, f"unknown replica type; one of {', '.join(sorted(ROLE_OF))}"
            )
        if role in out:
            raise ConversionError(field, f"{out[role][0]} and {key} are both the chief; keep one")
        if not isinstance(rs, dict):
            raise ConversionError(field, "must be a ReplicaSpec mapping")
        out[role] = (str(key), rs)
    return out


def _replica_restart_policy(key: str, rs: dict[str, Any], warnings: list[str]) -> tuple[Any, str]:
    """A replica's restart policy and the field it comes from: its own, else its Pod
    template's (TFJob's operator sets the Pod's from the replica's; a Pod-level one alone is
    what the author meant)."""
    field = f"spec.tfReplicaSpecs.{key}.restartPolicy"
    pod_field = f"spec.tfReplicaSpecs.{key}.template.spec.restartPolicy"
    pod = ((rs.get("template") or {}).get("spec") or {}).get("restartPolicy")
    given = rs.get("restartPolicy")
    if given is None:
        return pod, pod_field
    if pod is not None and pod != given:
        warnings.append(f"{pod_field}: not carried: {field} ({given}) overrides it, as in TFJob")
    return given, field


def _restart_policies(
    roles: dict[str, tuple[str, dict[str, Any]]], warnings: list[str]
) -> tuple[str | None, dict[str, str]]:
    """The job's restart policy (runPolicy.restartPolicy) and each role's that differs from
    it (replicas.<role>.restartPolicy), as the TFJob's replicas give them. The job's is the
    one most roles give (the first such in TFJob order on a tie)."""
    given: dict[str, str] = {}
    for role, (key, rs) in roles.items():
        policy, field = _replica_restart_policy(key, rs, warnings)
        if policy is None:
            continue
        if policy not in RESTART_POLICY:
            raise ConversionError(field, f"{policy!r} is not one of {', '.join(RESTART_POLICY)}")
        given[role] = RESTART_POLICY[policy]
    if not given:
        return None, {}
    counts = Counter(given.values())
    job = max(counts, key=lambda p: (counts[p], -list(given.values()).index(p)))
    return job, {role: p for role, p in given.items() if p != job}


def _run_policy(spec: dict[str, Any], warnings: list[str]) -> dict[str, Any]:
    given = spec.get("runPolicy") or {}
    # TFJob v1 once had these at the top of the spec; read them there too.
    legacy = {k: spec[k] for k in RUN_POLICY_FIELDS if k in spec}
    given = {**legacy, **given}
    out: dict[str, Any] = {}
    for key, value in given.items():
        field = f"spec.runPolicy.{key}"
        if key in RUN_POLICY_FIELDS:
            out[key] = value
        elif key == "managedBy":
            # TFJob's value names Kubeflow's controller; the new job is etj's.
            warnings.append(f"{field}: not carried: {value!r} names Kubeflow's controller")
        elif key == "schedulingPolicy":
            out[key] = _scheduling_policy(value)
        else:
            raise ConversionError(field, "has no etj equivalent")
    return out


def _scheduling_policy(given: Any) -> dict[str, Any]:
    field = "spec.runPolicy.schedulingPolicy"
    if not isinstance(given, dict):
        raise ConversionError(field, "must be a mapping")
    out: dict[str, Any] = {}
    for key, value in given.items():
        if key in SCHEDULING_FIELDS:
            out[SCHEDULING_FIELDS[key]] = value
        elif key == "minResources":
            raise ConversionError(
                f"{field}.minResources",
                "etj sums the gang's requests itself (from the shard plan); remove it",
            )
        else:
            raise ConversionError(f"{field}.{key}", "has no etj equivalent")
    return out


def _gang_scheduler(
    name: str, roles: dict[str, tuple[str, dict[str, Any]]]
) -> GangScheduler | None:
    """The gang scheduler the templates were written for, from their schedulerName or
    Volcano's group annotation; None when they name none."""
    found: dict[GangScheduler, str] = {}
    for key, rs in roles.values():
        template = rs.get("template") or {}
        field = f"spec.tfReplicaSpecs.{key}.template"
        scheduler = (template.get("spec") or {}).get("schedulerName")
        if scheduler in GANG_OF_SCHEDULER:
            found.setdefault(GANG_OF_SCHEDULER[scheduler], f"{field}.spec.schedulerName")
        annotations = (template.get("metadata") or {}).get("annotations") or {}
        if VOLCANO_GROUP_ANNOTATION in annotations:
            group = annotations[VOLCANO_GROUP_ANNOTATION]
            where = f"{field}.metadata.annotations[{VOLCANO_GROUP_ANNOTATION}]"
            if group != name:
                raise ConversionError(
                    where,
                    f"names PodGroup {group!r}; etj creates the job's own PodGroup, named "
                    f"{name!r} as Kubeflow's operator names it: set it to {name!r} or remove it",
                )
            found.setdefault(GangScheduler.VOLCANO, where)
    if len(found) > 1:
        a, b = sorted(found.values())[:2]
        raise ConversionError(b, f"asks for another gang scheduler than {a}; use one")
    return next(iter(found), None)


def _template(key: str, rs: dict[str, Any], warnings: list[str]) -> dict[str, Any]:
    template = rs.get("template")
    field = f"spec.tfReplicaSpecs.{key}.template"
    if not isinstance(template, dict) or not isinstance(template.get("spec"), dict):
        raise ConversionError(field, "a Pod template with a spec is required")
    out: dict[str, Any] = {"spec": copy.deepcopy(template["spec"])}
    meta = template.get("metadata") or {}
    for k in sorted(set(meta) - {"labels", "annotations"}):
        if meta[k] is not None:  # (`creationTimestamp: null` of every exported template)
            warnings.append(f"{field}.metadata.{k}: not carried: etj names and owns its Pods")
    kept = {k: dict(meta[k]) for k in ("labels", "annotations") if meta.get(k)}
    # etj sets Volcano's group annotation itself when the job has a Volcano gang.
    kept.get("annotations", {}).pop(VOLCANO_GROUP_ANNOTATION, None)
    kept = {k: v for k, v in kept.items() if v}
    if kept:
        out["metadata"] = kept
    containers = out["spec"].get("containers") or []
    if not any(isinstance(c, dict) and c.get("name") == "tensorflow" for c in containers):
        raise ConversionError(
            f"{field}.spec.containers",
            "needs a container named 'tensorflow' (the one TFJob gives TF_CONFIG)",
        )
    # The Pod and the container run as the TFJob ran them: the template's security context,
    # else none (etj's hardened default would change the user and make the root read-only).
    out["spec"].setdefault("securityContext", {})
    for c in containers:
        if isinstance(c, dict) and c.get("name") == "tensorflow":
            c.setdefault("securityContext", {})
    # A Pod-level restartPolicy is etj's to set (the job's runPolicy.restartPolicy; see
    # _replica_restart_policy for how it is read).
    out["spec"].pop("restartPolicy", None)
    return out


# Metadata the API server sets; a new job gets its own.
SERVER_METADATA = (
    "uid",
    "resourceVersion",
    "generation",
    "creationTimestamp",
    "deletionTimestamp",
    "deletionGracePeriodSeconds",
    "managedFields",
    "selfLink",
)


def convert_tfjob(
    tfjob: dict[str, Any],
    model: dict[str, Any] | None = None,
    name: str | None = None,
    warnings: list[str] | None = None,
) -> dict[str, Any]:
    """The EmbeddingTrainingJob manifest that runs ``tfjob``'s containers, named ``name``
    (default: the TFJob's name, or its generateName); ``warnings`` gets one line for each
    TFJob field the new job does not carry."""
    warnings = warnings if warnings is not None else []
    if not isinstance(tfjob, dict):
        raise ConversionError("(root)", "a TFJob manifest must be a mapping")
    if tfjob.get("kind") != TFJOB_KIND:
        raise ConversionError("kind", f"must be {TFJOB_KIND}, not {tfjob.get('kind')!r}")
    if tfjob.get("apiVersion") not in TFJOB_API_VERSIONS:
        raise ConversionError(
            "apiVersion", f"{tfjob.get('apiVersion')!r}: only {', '.join(TFJOB_API_VERSIONS)}"
        )
    meta = tfjob.get("metadata") or {}
    generate = meta.get("generateName") if name is None else None
    name = name if name is not None else meta.get("name")
    naming: dict[str, Any]
    if isinstance(name, str) and name:
        if len(name) > MAX_JOB_NAME_LENGTH:
            raise ConversionError(
                "metadata.name", f"at most {MAX_JOB_NAME_LENGTH} characters in etj (or --name)"
            )
        naming = {"name": name}
    elif isinstance(generate, str) and generate:
        if len(generate) + GENERATED_NAME_SUFFIX_LENGTH > MAX_JOB_NAME_LENGTH:
            raise ConversionError(
                "metadata.generateName",
                f"at most {MAX_JOB_NAME_LENGTH - GENERATED_NAME_SUFFIX_LENGTH} characters in "
                "etj (the API server adds 5), or give --name",
            )
        naming = {"generateName": generate}
        # The gang object and messages use a name; the API server's is not known yet.
        name = generate
    else:
        raise ConversionError("metadata.name", "is required (or metadata.generateName, or --name)")
    for k in SERVER_METADATA:
        if k in meta:
            warnings.append(f"metadata.{k}: not carried: the API server sets it for the new job")
    for k in sorted(
        set(meta) - {"name", "generateName", "namespace", "labels", "annotations", *SERVER_METADATA}
    ):
        warnings.append(f"metadata.{k}: not carried: etj sets its own for the new job")
    if "status" in tfjob:
        warnings.append("status: not carried: the new job reports its own")
    spec = tfjob.get("spec") or {}
    given_success = spec.get("successPolicy") or ""
    if given_success not in SUCCESS_POLICY:
        raise ConversionError(
            "spec.successPolicy", f"{given_success!r} is not one of '', AllWorkers"
        )
    if spec.get("enableDynamicWorker"):
        raise ConversionError("spec.enableDynamicWorker", "dynamic workers have no etj equivalent")
    unknown = set(spec) - {
        "tfReplicaSpecs",
        "runPolicy",
        "successPolicy",
        "enableDynamicWorker",
        *RUN_POLICY_FIELDS,
    }
    if unknown:
        raise ConversionError(f"spec.{sorted(unknown)[0]}", "has no etj equivalent")

    roles = _replica_specs(spec)
    strategy = Strategy.PARAMETER_SERVER if "ps" in roles else Strategy.MULTI_WORKER_MIRRORED
    replicas: dict[str, Any] = {}
    for role, (key, rs) in roles.items():
        count = rs.get("replicas", 1)
        if not isinstance(count, int) or count < 0:
            raise ConversionError(f"spec.tfReplicaSpecs.{key}.replicas", "must be an integer >= 0")
        template = _template(key, rs, warnings)
        replicas[role] = {"replicas": count, "template": template}
        # The tensorflow container's resources become the role's: the planner sizes the
        # ps from replicas.ps.resources (a template's resources only reach the Pod).
        main = next(c for c in template["spec"]["containers"] if c.get("name") == "tensorflow")
        if main.get("resources"):
            replicas[role]["resources"] = main.pop("resources")
    if "worker" not in replicas:
        replicas["worker"] = {"replicas": 0}  # etj's default is 2 workers
    chiefs = replicas.get("chief", {}).get("replicas", 0)
    if chiefs > 1:
        key = roles["chief"][0]
        raise ConversionError(f"spec.tfReplicaSpecs.{key}.replicas", "at most one chief")
    if chiefs == 0:
        if replicas["worker"]["replicas"] < 1:
            raise ConversionError(
                "spec.tfReplicaSpecs.Worker.replicas",
                "must be >= 1 without a Chief: worker 0 is then the chief",
            )
        if strategy == Strategy.PARAMETER_SERVER:
            # As in TFJob (dist-mnist): the workers' own command runs; worker 0 is the
            # chief. Said explicitly: etj's default under ParameterServer is one chief.
            replicas["chief"] = {"replicas": 0}
    if strategy == Strategy.PARAMETER_SERVER and replicas["ps"]["replicas"] < 1:
        raise ConversionError("spec.tfReplicaSpecs.PS.replicas", "must be >= 1")
    run_policy = _run_policy(spec, warnings)
    restart, per_role = _restart_policies(roles, warnings)
    if restart is not None:
        run_policy["restartPolicy"] = restart
    for role, policy in per_role.items():
        replicas[role]["restartPolicy"] = policy
    success = SUCCESS_POLICY[given_success]
    if success is not None:
        if chiefs:
            raise ConversionError(
                "spec.successPolicy",
                "AllWorkers has no effect in a TFJob with a Chief (the Chief's exit decides); "
                "remove it",
            )
        run_policy["successPolicy"] = success
    gang = _gang_scheduler(name, roles)
    if gang is not None:
        run_policy.setdefault("schedulingPolicy", {})["gangScheduler"] = gang.value

    out_meta: dict[str, Any] = dict(naming)
    for k in ("namespace", "labels", "annotations"):
        if meta.get(k):
            out_meta[k] = copy.deepcopy(meta[k])
    job_spec: dict[str, Any] = {
        "strategy": strategy.value,
        "replicas": replicas,
        "model": copy.deepcopy(model) if model is not None else copy.deepcopy(PLACEHOLDER_MODEL),
    }
    if run_policy:
        job_spec["runPolicy"] = run_policy
    return {"apiVersion": API_VERSION, "kind": KIND, "metadata": out_meta, "spec": job_spec}

"""How etj names what it derives from a job, and the closed lists of the contract's names.

The ConfigMap name is built here once; the operator (which looks for it) and the renderer
(which makes it) both call ``trainer_config_map_name``. ``ENV_VARS``, ``LABELS`` and
``ANNOTATIONS`` list every name of etj.api.constants the operator, ``etj run`` and the
trainer share: a test fails when one of them is written out as a literal anywhere else.

Pure: no I/O.
"""

from __future__ import annotations

from etj.api import constants as c

TRAINER_CONFIG_MAP_SUFFIX = "-trainer-config"


def trainer_config_map_name(job_name: str) -> str:
    """The ConfigMap with the job's trainer config and shard plan (mounted in every pod)."""
    return f"{job_name}{TRAINER_CONFIG_MAP_SUFFIX}"


# Environment variables the operator (or ``etj run``) sets and the trainer reads.
ENV_VARS: tuple[str, ...] = (
    c.TF_CONFIG_ENV,
    c.TRAINER_CONFIG_ENV,
    c.REPLICA_TYPE_ENV,
    c.REPLICA_INDEX_ENV,
    c.SHARD_PLAN_ENV,
    c.TERMINATION_LOG_ENV,
    c.MODEL_CODE_ENV,
    c.METRICS_PORT_ENV,
    c.PROGRESS_SECONDS_ENV,
    c.CPUS_ENV,
)

LABELS: tuple[str, ...] = (
    c.LABEL_NAME,
    c.LABEL_MANAGED_BY,
    c.LABEL_PART_OF,
    c.LABEL_JOB_NAME,
    c.LABEL_REPLICA_TYPE,
    c.LABEL_REPLICA_INDEX,
    c.KUEUE_QUEUE_NAME_LABEL,
    c.KUEUE_PRIORITY_CLASS_LABEL,
    c.KUEUE_POD_GROUP_NAME_LABEL,
    c.KUEUE_MANAGED_LABEL,
)

ANNOTATIONS: tuple[str, ...] = (
    c.FINALIZER,
    c.ANNOTATION_METRICS_ADDRESS,
    c.KUEUE_POD_GROUP_TOTAL_COUNT_ANNOTATION,
    c.KUEUE_RETRIABLE_IN_GROUP_ANNOTATION,
)

# Files of the trainer ConfigMap, and the container's port names.
FILE_NAMES: tuple[str, ...] = (c.TRAINER_CONFIG_FILE, c.SHARD_PLAN_FILE)
PORT_NAMES: tuple[str, ...] = (c.METRICS_PORT_NAME,)

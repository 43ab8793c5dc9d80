"""``spec.checkpoint``: where and how often training state is saved, and the rules on it.

Pure: no I/O, no environment, no kopf or Kubernetes client.
"""

from __future__ import annotations

from typing import Any

from pydantic import Field, model_validator

from etj.api.base import ApiModel, Quantity
from etj.api.rules import Rule, cel_extra, check_rules
from etj.api.spec.data import UNSUPPORTED_SCHEME_REASON, UNSUPPORTED_SCHEMES

_cel = cel_extra

# Where a checkpoint.credentialsSecret is mounted (GOOGLE_APPLICATION_CREDENTIALS names the
# key file under it).
GCS_CREDENTIALS_MOUNT = "/var/run/secrets/etj/gcs"


class CheckpointStorage(ApiModel):
    """A ReadWriteMany claim etj creates for the job's checkpoints."""

    storage_class_name: str | None = Field(
        default=None,
        min_length=1,
        max_length=253,
        description=(
            "A StorageClass that can provision ReadWriteMany volumes (NFS, EFS, Filestore, "
            "Azure Files, CephFS). Default: the operator's setting, else the cluster's default."
        ),
    )
    size: Quantity = Field(default="10Gi", description="The claim's requested size.")
    retain: bool = Field(
        default=False,
        description=(
            "false: the claim is owned by the job and deleted with it; true: it outlives the "
            "job (no owner reference, labelled training.etj.dev/job-name) for a later job."
        ),
    )


class SecretKey(ApiModel):
    """One key of a Secret in the job's namespace."""

    name: str = Field(min_length=1, max_length=253, description="The Secret's name.")
    key: str = Field(default="key.json", min_length=1, description="The key holding the file.")


_CHECKPOINT_RULES = (
    Rule(
        "(has(self.uri) ? 1 : 0) + (has(self.volume) ? 1 : 0) + (has(self.storage) ? 1 : 0) <= 1",
        "checkpoint: set at most one of uri, volume and storage",
        lambda c: sum(x is not None for x in (c.uri, c.volume, c.storage)) <= 1,
    ),
    Rule(
        "!has(self.uri) || !(self.uri.startsWith('s3://') || self.uri.startsWith('hdfs://'))",
        f"checkpoint.uri: {UNSUPPORTED_SCHEME_REASON}; use gs://bucket/prefix or a "
        "ReadWriteMany volume (checkpoint.storage)",
        lambda c: c.uri is None or not c.uri.startswith(UNSUPPORTED_SCHEMES),
    ),
    Rule(
        "!has(self.uri) || self.uri.startsWith('gs://') || self.uri.startsWith('/')",
        "checkpoint.uri must be gs://bucket/prefix or an absolute path that every replica "
        "sees (a shared volume its pod template mounts)",
        lambda c: c.uri is None or c.uri.startswith(("gs://", "/")),
    ),
    Rule(
        "!has(self.uri) || !(self.uri == '/tmp' || self.uri.startsWith('/tmp/'))",
        "checkpoint.uri: /tmp is each replica's own (an emptyDir etj mounts): use a path on a "
        "volume every replica mounts",
        lambda c: c.uri is None or not (c.uri == "/tmp" or c.uri.startswith("/tmp/")),
    ),
)


class CheckpointSpec(ApiModel):
    """Where and how often training state is saved.

    A job with more than one pod needs checkpoints every pod sees (each ps writes its
    own shards, the chief the index, every worker restores): ``storage``, ``uri`` or a
    shared ``volume``. One pod alone may keep the default, an emptyDir."""

    model_config = ApiModel.model_config | {"json_schema_extra": _cel(*_CHECKPOINT_RULES)}

    uri: str | None = Field(
        default=None,
        min_length=1,
        max_length=1024,
        description=(
            "gs://bucket/prefix, or an absolute path on a volume every replica mounts: "
            "checkpoints go to <uri>/<namespace>/<job name>. s3:// and hdfs:// are not supported "
            "(not built into TensorFlow 2.21)."
        ),
    )
    volume: dict[str, Any] | None = Field(
        default=None,
        description=(
            "A Pod volume source (e.g. {persistentVolumeClaim: {claimName: ckpt}}) mounted on "
            "every replica; a job with several pods needs a ReadWriteMany claim (not an "
            "emptyDir or a hostPath). Default (no uri, volume or storage): an emptyDir, for "
            "one-pod jobs only."
        ),
    )
    storage: CheckpointStorage | None = Field(
        default=None,
        description=(
            "A ReadWriteMany PersistentVolumeClaim <job>-checkpoints etj creates, kept across "
            "restarts and suspend."
        ),
    )
    credentials_secret: SecretKey | None = Field(
        default=None,
        description=(
            "A Secret holding a Google service-account key for gs:// paths (checkpoints and "
            "data): mounted read-only, GOOGLE_APPLICATION_CREDENTIALS names it. Leave it out "
            "with workload identity."
        ),
    )
    mount_path: str = Field(
        default="/var/lib/etj/checkpoints",
        pattern=r"^/.*",
        description="Where the volume (or the claim of storage) is mounted in every replica.",
    )
    every_steps: int = Field(default=1000, ge=1, description="Checkpoint interval in steps.")
    keep: int = Field(default=3, ge=1, le=1000, description="Checkpoints kept.")

    @model_validator(mode="after")
    def _one_place(self) -> CheckpointSpec:
        check_rules(self, _CHECKPOINT_RULES)
        return self

    @property
    def shared(self) -> bool:
        """A place several pods may share was chosen (a volume's kind is checked later)."""
        return self.uri is not None or self.storage is not None or self.volume is not None


# The one line that refuses checkpoints a multi-pod job's pods cannot share, said by
# ``etj.api.storage.sharing_problems`` after planning (which resolves strategy Auto and
# the ps count) in ``etj validate`` and the operator; not in the model itself, which
# ``etj run`` (one host, one work directory) and the trainer also parse.
CHECKPOINT_NOT_SHARED = (
    "checkpoint: this job reads and writes checkpoints from several pods (each ps its "
    "shards, the chief the index, every worker restores) and the default emptyDir is each "
    "pod's own: set checkpoint.storage (a ReadWriteMany claim etj creates), checkpoint.uri "
    "(gs://bucket/prefix, or a path every pod mounts) or checkpoint.volume (a ReadWriteMany "
    "claim)"
)

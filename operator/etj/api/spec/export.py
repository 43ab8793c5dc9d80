"""``spec.export``: serving versions written while the job trains, and ``spec.tensorboard``:
where its curves go.

Pure: no I/O, no environment, no kopf or Kubernetes client.
"""

from __future__ import annotations

from pydantic import Field, model_validator

from etj.api.base import ApiModel
from etj.api.export import DEFAULT_KEEP
from etj.api.rules import Rule, cel_extra, check_rules
from etj.api.spec.data import UNSUPPORTED_SCHEME_REASON, UNSUPPORTED_SCHEMES

_EXPORT_RULES = (
    Rule(
        "!(has(self.everySteps) && has(self.everySeconds))",
        "export: set everySteps or everySeconds, not both",
        lambda e: e.every_steps is None or e.every_seconds is None,
    ),
    Rule(
        "!(has(self.deltaSteps) && has(self.deltaSeconds))",
        "export: set deltaSteps or deltaSeconds, not both",
        lambda e: e.delta_steps is None or e.delta_seconds is None,
    ),
    Rule(
        "!(has(self.deltaSteps) || has(self.deltaSeconds)) || has(self.everySteps) || "
        "has(self.everySeconds)",
        "export: deltas need full versions while training to apply to: set everySteps or "
        "everySeconds with deltaSteps or deltaSeconds",
        lambda e: (
            (e.delta_steps is None and e.delta_seconds is None)
            or e.every_steps is not None
            or e.every_seconds is not None
        ),
    ),
)


class ExportSpec(ApiModel):
    """Versions of the serving SavedModel written while the job trains, as TensorFlow
    Serving loads them: ``<checkpoint directory>/serving/<version>/`` (point
    ``--model_base_path`` there), each written aside and moved into place whole. The
    number of a version is the Unix second it was started (always above the versions
    before it); ``status.export`` shows the last one and its step. A last version is
    written when training ends, beside the final export (``<checkpoint directory>/export``).
    With ``deltaSteps`` or ``deltaSeconds``, deltas between versions for serving to apply
    (``status.export.lastDelta`` shows the last one).
    """

    model_config = ApiModel.model_config | {"json_schema_extra": cel_extra(*_EXPORT_RULES)}

    every_steps: int | None = Field(
        default=None,
        ge=1,
        description="Write a version every this many training steps.",
    )
    every_seconds: int | None = Field(
        default=None,
        ge=1,
        description=(
            "Write a version every this many seconds of training (the leader's clock). "
            "Neither everySteps nor everySeconds: only the version at the end."
        ),
    )
    delta_steps: int | None = Field(
        default=None,
        ge=1,
        description=(
            "Between versions, write a delta every this many steps: the embedding rows "
            "changed since the last version or delta (ids and values), the ids evicted from "
            "dynamic tables and the dense weights whole, under <checkpoint directory>/"
            "deltas/<version>/<sequence>/. A version plus its deltas in order equal the next "
            "version bitwise."
        ),
    )
    delta_seconds: int | None = Field(
        default=None,
        ge=1,
        description=(
            "Between versions, write a delta every this many seconds (the leader's clock); "
            "see deltaSteps."
        ),
    )
    keep: int = Field(
        default=DEFAULT_KEEP,
        ge=1,
        le=1000,
        description="Versions kept: the oldest go once a newer one is in place.",
    )

    @model_validator(mode="after")
    def _one_interval(self) -> ExportSpec:
        check_rules(self, _EXPORT_RULES)
        return self


_TENSORBOARD_RULES = (
    Rule(
        "!(self.uri.startsWith('s3://') || self.uri.startsWith('hdfs://'))",
        f"tensorboard.uri: {UNSUPPORTED_SCHEME_REASON}; use gs://bucket/prefix or an absolute "
        "path on a volume the leader mounts",
        lambda t: not t.uri.startswith(UNSUPPORTED_SCHEMES),
    ),
    Rule(
        "self.uri.startsWith('gs://') || self.uri.startsWith('/')",
        "tensorboard.uri must be gs://bucket/prefix or an absolute path on a volume the "
        "leader mounts",
        lambda t: t.uri.startswith(("gs://", "/")),
    ),
    Rule(
        "!(self.uri == '/tmp' || self.uri.startsWith('/tmp/'))",
        "tensorboard.uri: /tmp is each replica's own (an emptyDir etj mounts): use a path on "
        "a volume the leader mounts",
        lambda t: not (t.uri == "/tmp" or t.uri.startswith("/tmp/")),
    ),
)


class TensorBoardSpec(ApiModel):
    """Where the leader writes its TensorBoard summaries (loss, held-out AUC and log-loss,
    examples/s, dynamic tables' rows, bad records, restarts). Without it they go to
    ``<checkpoint directory>/tensorboard``."""

    model_config = ApiModel.model_config | {"json_schema_extra": cel_extra(*_TENSORBOARD_RULES)}

    uri: str = Field(
        min_length=1,
        max_length=1024,
        description=(
            "gs://bucket/prefix, or an absolute path on a volume the leader mounts: the "
            "job's summaries go to <uri>/<namespace>/<job name>, so `tensorboard --logdir "
            "<uri>/<namespace>` shows every job of the namespace as a run."
        ),
    )

    @model_validator(mode="after")
    def _where(self) -> TensorBoardSpec:
        check_rules(self, _TENSORBOARD_RULES)
        return self

"""``spec.warmStart``: a job that starts from another job's checkpoint, and what it keeps.

A job names its source one of three ways: ``fromJob`` (a job of its namespace), ``selector``
(the newest ``Succeeded`` job whose labels match: a CronJob's ``generateName`` jobs chain
days without knowing each other's names) or ``checkpoint`` (a location: ``gs://...``, a
path every replica mounts, or a claim of the namespace). The operator resolves the source
once, before the job's first pod (``etj.core.reconcile.policies.warmstart``), pins it in
``status.warmStart`` and hands the trainer one concrete location (``TrainerWarmStart`` in
the trainer config); the trainer never reads the API. A job that already has a checkpoint
of its own (a restart) restores that one, never the source again.

What is carried over is decided table by table by ``table_decisions``, a pure function
both sides call: the operator, from the source job's spec, before any pod (a table that
cannot be carried over fails the job at once, naming it); the trainer, from the model the
checkpoint was written with (``CheckpointManifest``, saved beside every checkpoint), for
every source, so a location the operator cannot read is checked the same way.

Pure: no I/O, no environment, no kopf or Kubernetes client.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Annotated, Any, Literal

from pydantic import Field, model_validator

from etj.api.architectures import LINEAR_SUFFIX
from etj.api.base import ApiModel
from etj.api.rules import Rule, cel_extra, check_rules
from etj.api.sizing import Dtype, Optimizer

# The file beside a job's checkpoints naming the model they hold (``CheckpointManifest``).
CHECKPOINT_MANIFEST_FILE = "etj-model.json"
# Where a source's checkpoint volume is mounted, read-only, in every replica.
WARM_START_MOUNT = "/var/lib/etj/warm-start"


class LabelSelectorRequirement(ApiModel):
    """One requirement of a label selector (as metav1.LabelSelectorRequirement)."""

    key: str = Field(min_length=1, max_length=317, description="The label key.")
    operator: Literal["In", "NotIn", "Exists", "DoesNotExist"] = Field(
        description="In, NotIn, Exists or DoesNotExist."
    )
    values: list[str] | None = Field(
        default=None,
        description="The values for In and NotIn (non-empty); none for Exists and DoesNotExist.",
    )


class LabelSelector(ApiModel):
    """A label selector over the jobs of the namespace (as metav1.LabelSelector): every
    matchLabels pair and every matchExpressions requirement must hold."""

    match_labels: dict[str, str] | None = Field(
        default=None, description="Labels a job must carry, with these values."
    )
    match_expressions: list[LabelSelectorRequirement] | None = Field(
        default=None, description="Requirements on a job's labels."
    )

    def matches(self, labels: dict[str, str]) -> bool:
        """Whether ``labels`` satisfy the selector (an empty selector matches everything)."""
        for key, value in (self.match_labels or {}).items():
            if labels.get(key) != value:
                return False
        for req in self.match_expressions or []:
            present = req.key in labels
            if req.operator == "Exists" and not present:
                return False
            if req.operator == "DoesNotExist" and present:
                return False
            if req.operator == "In" and labels.get(req.key) not in (req.values or []):
                return False
            if req.operator == "NotIn" and present and labels[req.key] in (req.values or []):
                return False
        return True

    def text(self) -> str:
        """The selector as kubectl writes one (``a=b,c in (d,e)``)."""
        parts = [f"{k}={v}" for k, v in sorted((self.match_labels or {}).items())]
        for req in self.match_expressions or []:
            if req.operator in ("In", "NotIn"):
                parts.append(f"{req.key} {req.operator.lower()} ({','.join(req.values or [])})")
            else:
                parts.append(req.key if req.operator == "Exists" else f"!{req.key}")
        return ",".join(parts) or "(everything)"


_LOCATION_RULES = (
    Rule(
        "(has(self.uri) ? 1 : 0) + (has(self.claim) ? 1 : 0) == 1",
        "warmStart.checkpoint: set exactly one of uri and claim",
        lambda c: (c.uri is None) != (c.claim is None),
    ),
    Rule(
        "!has(self.uri) || self.uri.startsWith('gs://') || self.uri.startsWith('/')",
        "warmStart.checkpoint.uri must be gs://bucket/path or an absolute path every replica "
        "sees (s3:// and hdfs:// are not built into TensorFlow 2.21)",
        lambda c: c.uri is None or c.uri.startswith(("gs://", "/")),
    ),
    Rule(
        "!has(self.path) || has(self.claim)",
        "warmStart.checkpoint.path is a directory in the claim: it needs claim",
        lambda c: c.path is None or c.claim is not None,
    ),
)


class WarmStartCheckpoint(ApiModel):
    """A checkpoint location: a directory of checkpoints (the newest is read) or one
    checkpoint (its prefix, e.g. .../ckpt-5000)."""

    model_config = ApiModel.model_config | {"json_schema_extra": cel_extra(*_LOCATION_RULES)}

    uri: str | None = Field(
        default=None,
        min_length=1,
        max_length=1024,
        description=(
            "gs://bucket/path, or an absolute path on a volume every replica mounts (a job's "
            "checkpoints are under <checkpoint.uri>/<namespace>/<job>)."
        ),
    )
    claim: str | None = Field(
        default=None,
        min_length=1,
        max_length=253,
        description=(
            "A PersistentVolumeClaim of the namespace holding the checkpoints, mounted "
            "read-only in every replica (ReadOnlyMany or ReadWriteMany)."
        ),
    )
    path: str | None = Field(
        default=None,
        max_length=1024,
        pattern=r"^[^/].*$|^$",
        description=(
            "The directory (or one checkpoint's prefix) within the claim, relative; a job's "
            "checkpoint.storage claim holds them under <job>."
        ),
    )

    @model_validator(mode="after")
    def _rules(self) -> WarmStartCheckpoint:
        check_rules(self, _LOCATION_RULES)
        return self


class StepCount(StrEnum):
    """Where the warm-started job's step count starts."""

    # Step 0: the job trains its own training.steps (its learning-rate schedule from the start).
    RESTART = "Restart"
    # The source checkpoint's step: training.steps counts from the source's start.
    CONTINUE = "Continue"


class OptimizerState(StrEnum):
    KEEP = "Keep"
    RESET = "Reset"


class IfNoSource(StrEnum):
    """What a job does while its source job does not exist or no job matches."""

    WAIT = "Wait"
    START_FRESH = "StartFresh"
    FAIL = "Fail"


_WARM_START_RULES = (
    Rule(
        "(has(self.fromJob) ? 1 : 0) + (has(self.selector) ? 1 : 0) + (has(self.checkpoint) ? 1 : 0) == 1",
        "warmStart: set exactly one of fromJob, selector and checkpoint",
        lambda w: sum(x is not None for x in (w.from_job, w.selector, w.checkpoint)) == 1,
    ),
)


class WarmStartSpec(ApiModel):
    """Start from another job's checkpoint: its tables and tower restored into this job's
    layout (any ps count, any storage dtype), then trained on this job's data."""

    model_config = ApiModel.model_config | {"json_schema_extra": cel_extra(*_WARM_START_RULES)}

    from_job: str | None = Field(
        default=None,
        min_length=1,
        max_length=253,
        description=(
            "A job of this namespace: this job waits until it has Succeeded and starts from "
            "its final checkpoint (a Failed source fails this job, saying so)."
        ),
    )
    selector: LabelSelector | None = Field(
        default=None,
        description=(
            "Start from the newest Succeeded job of this namespace whose labels match (by "
            "completion time), e.g. the previous day's job of a CronJob."
        ),
    )
    checkpoint: WarmStartCheckpoint | None = Field(
        default=None, description="Start from a checkpoint location (gs://, a path, a claim)."
    )
    step_count: StepCount = Field(
        default=StepCount.RESTART,
        description=(
            "Restart: train training.steps from step 0; Continue: take the source's step "
            "count, so training.steps counts the source's steps too."
        ),
    )
    optimizer_state: OptimizerState = Field(
        default=OptimizerState.KEEP,
        description=(
            "Keep: restore each table's (and the tower's) optimizer slots when the optimizer "
            "is the same (Adagrad's accumulators keep the step sizes where they were); "
            "Reset: start them fresh."
        ),
    )
    fresh_tables: list[Annotated[str, Field(min_length=1, max_length=63)]] | None = Field(
        default=None,
        max_length=256,
        description=(
            "Tables started fresh even when the checkpoint has them, e.g. one whose "
            "vocabularySize changed (its ids now hash to other rows, so it is refused "
            "otherwise). A wideDeep/deepFM table's first-order table goes with it."
        ),
    )
    if_no_source: IfNoSource = Field(
        default=IfNoSource.WAIT,
        description=(
            "While fromJob does not exist or no Succeeded job matches the selector: Wait "
            "(checked again every few seconds), StartFresh (train from scratch, as the first "
            "job of a chain) or Fail."
        ),
    )

    @model_validator(mode="after")
    def _rules(self) -> WarmStartSpec:
        check_rules(self, _WARM_START_RULES)
        return self


class TableAction(StrEnum):
    RESTORED = "Restored"
    STARTED_FRESH = "StartedFresh"
    DROPPED = "Dropped"


class WarmStartTable(ApiModel):
    """What a warm start did with one table."""

    name: str = Field(description="The table.")
    action: TableAction = Field(
        description=(
            "Restored (from the checkpoint), StartedFresh (not in the checkpoint, or named "
            "in freshTables) or Dropped (in the checkpoint, not in this job)."
        )
    )
    reason: str = Field(default="", description="Why, and what else: optimizer state, dtype.")
    optimizer_state: Literal["Kept", "Reset"] | None = Field(
        default=None,
        description="A Restored table's optimizer slots: Kept or Reset (none: it has none).",
    )


class WarmStartStatus(ApiModel):
    """The source a warm start was resolved to, pinned before the first pod, and what it
    carries over."""

    source: str = Field(description="The source, for people: a job, or a location.")
    source_job: str | None = Field(default=None, description="The source job, if a job.")
    source_uid: str | None = Field(default=None, description="The source job's uid.")
    location: str | None = Field(
        default=None,
        description=(
            "The checkpoint location every replica reads (under the read-only mount of a "
            "claim's volume); none when there was no source and the job started fresh."
        ),
    )
    volume: dict[str, Any] | None = Field(
        default=None,
        description="The source's volume (a Pod volume source), mounted read-only.",
    )
    step: int | None = Field(
        default=None, ge=0, description="The source checkpoint's step, when known."
    )
    tables: list[WarmStartTable] = Field(
        default_factory=list,
        description=(
            "Per table: Restored, StartedFresh or Dropped, and why (from the source job's "
            "spec; for a location, the trainer's log says)."
        ),
        json_schema_extra={"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["name"]},
    )
    resolved_time: str | None = Field(
        default=None, description="When the source was resolved (RFC 3339)."
    )


class TrainerWarmStart(ApiModel):
    """The trainer's part of a warm start: one concrete location and what to keep."""

    location: str = Field(
        min_length=1,
        description="A directory of checkpoints (the newest is read) or one checkpoint's prefix.",
    )
    source: str = Field(description="The source, for the trainer's log.")
    continue_steps: bool = Field(default=False, description="Take the source's step count.")
    keep_optimizer: bool = Field(default=True, description="Restore optimizer slots.")
    fresh_tables: list[str] = Field(
        default_factory=list, description="Tables started fresh whatever the checkpoint has."
    )


class CheckpointManifest(ApiModel):
    """What the trainer writes beside its checkpoints (``CHECKPOINT_MANIFEST_FILE``): the
    model they hold, by table name (the checkpoint keys tables by position)."""

    model: Any = Field(description="The ModelSpec (wire form) of the job that wrote them.")
    optimizer: Optimizer = Field(description="training.optimizer of that job.")


@dataclass(frozen=True)
class TableInfo:
    """What decides whether a table carries over: from a ModelSpec's ``tables``."""

    name: str
    vocabulary_size: int
    dimension: int
    dtype: Dtype
    optimizer: Optimizer
    capacity: int | None  # a dynamic table's pool; None: hashed
    # How each feature of the table maps its values to rows: (feature, valueType,
    # vocabularyFile) per categorical feature naming it (model.features; none without).
    id_map: tuple[tuple[str, str, str], ...] = ()


def _id_map(model: Any, table: str) -> tuple[tuple[str, str, str], ...]:
    base = table.removesuffix(LINEAR_SUFFIX)
    return tuple(
        sorted(
            (f.name, str(f.stored_type), f.vocabulary_file or "")
            for f in model.features or []
            if f.table == base
        )
    )


def table_infos(model: Any, default_optimizer: Optimizer) -> list[TableInfo]:
    """``TableInfo`` of each of a ModelSpec's ``tables`` (first-order tables included)."""
    return [
        TableInfo(
            t.name,
            int(t.vocabulary_size),
            int(t.dimension),
            Dtype(t.dtype),
            Optimizer(t.optimizer or default_optimizer),
            t.dynamic.capacity if t.dynamic is not None else None,
            _id_map(model, t.name),
        )
        for t in model.tables
    ]


def _id_map_change(saved: TableInfo, here: TableInfo) -> str | None:
    """How a feature both models have maps its values to the table's rows another way
    (another valueType or vocabularyFile: the same id would read another row); None: no
    such feature."""
    before = {name: rest for name, *rest in saved.id_map}
    for name, *rest in here.id_map:
        if name in before and before[name] != rest:
            was, now = before[name], rest
            return (
                f"feature {name} maps its values to rows another way (valueType "
                f"{was[0]}, vocabularyFile {was[1] or 'none'} in the checkpoint; "
                f"{now[0]}, {now[1] or 'none'} here)"
            )
    return None


def _named_fresh(name: str, fresh: Sequence[str]) -> bool:
    return name in fresh or name.removesuffix(LINEAR_SUFFIX) in fresh


def table_decisions(
    source: Sequence[TableInfo],
    job: Sequence[TableInfo],
    fresh: Sequence[str],
    keep_optimizer: bool,
) -> tuple[list[WarmStartTable], list[str]]:
    """Per table of the job (then each source table it lacks), what a warm start does;
    and the problems that refuse it (each naming its table and the fix). Pure."""
    saved = {t.name: t for t in source}
    out: list[WarmStartTable] = []
    problems: list[str] = []
    fix = "or list it in warmStart.freshTables to start it fresh"
    for t in job:
        s = saved.get(t.name)
        if _named_fresh(t.name, fresh):
            out.append(
                WarmStartTable(
                    name=t.name,
                    action=TableAction.STARTED_FRESH,
                    reason="named in warmStart.freshTables",
                )
            )
            continue
        if s is None:
            out.append(
                WarmStartTable(
                    name=t.name, action=TableAction.STARTED_FRESH, reason="not in the checkpoint"
                )
            )
            continue
        if s.dimension != t.dimension:
            problems.append(
                f"table {t.name}: dimension {s.dimension} in the checkpoint, {t.dimension} "
                f"here: set dimension {s.dimension}, {fix}"
            )
            continue
        if (s.capacity is None) != (t.capacity is None):
            was, now = ("dynamic", "hashed") if t.capacity is None else ("hashed", "dynamic")
            problems.append(
                f"table {t.name}: {was} in the checkpoint, {now} here (its rows are laid out "
                f"another way): make it {was} again, {fix}"
            )
            continue
        changed = _id_map_change(s, t)
        if changed is not None:
            problems.append(
                f"table {t.name}: {changed}: an id would read another id's row: keep the "
                f"feature as it was, {fix}"
            )
            continue
        if s.vocabulary_size != t.vocabulary_size:
            rows = "fallback rows" if t.capacity is not None else "rows"
            problems.append(
                f"table {t.name}: vocabularySize {s.vocabulary_size} in the checkpoint, "
                f"{t.vocabulary_size} here: every id would hash to another of its {rows} "
                f"(Fingerprint64 mod vocabularySize) and read another id's vector: keep "
                f"vocabularySize {s.vocabulary_size}, {fix}"
            )
            continue
        notes = [f"{s.dtype} -> {t.dtype}"] if s.dtype != t.dtype else []
        if s.capacity != t.capacity:
            notes.append(
                f"capacity {s.capacity} -> {t.capacity}: the ids seen least recently go "
                "first when a shard has no row left"
            )
        state: Literal["Kept", "Reset"] | None = None
        if _has_slots(t.optimizer):
            state = "Kept" if keep_optimizer and s.optimizer == t.optimizer else "Reset"
            if not keep_optimizer:
                notes.append("optimizer state reset (warmStart.optimizerState Reset)")
            elif s.optimizer != t.optimizer:
                notes.append(f"optimizer state reset ({s.optimizer} -> {t.optimizer})")
            else:
                notes.append(f"{t.optimizer} state kept")
        out.append(
            WarmStartTable(
                name=t.name,
                action=TableAction.RESTORED,
                reason="; ".join(notes),
                optimizer_state=state,
            )
        )
    names = {t.name for t in job}
    for s in source:
        if s.name not in names:
            out.append(
                WarmStartTable(
                    name=s.name,
                    action=TableAction.DROPPED,
                    reason="not in this job's model: left in the checkpoint",
                )
            )
    return out, problems


def _has_slots(optimizer: Optimizer) -> bool:
    return optimizer != Optimizer.SGD


def decision_line(t: WarmStartTable) -> str:
    """One line of a table's decision, as the job's Event and the trainer's log say it."""
    what = {
        TableAction.RESTORED: "restored",
        TableAction.STARTED_FRESH: "started fresh",
        TableAction.DROPPED: "dropped",
    }[t.action]
    return f"table {t.name}: {what}" + (f" ({t.reason})" if t.reason else "")


# Rules joining warmStart with the rest of the spec; the CEL runs on the spec's wire form.
WARM_START_SPEC_RULES = (
    Rule(
        "!has(self.warmStart) || !has(self.warmStart.freshTables) || self.warmStart.freshTables.all(n, self.model.embeddings.exists(t, t.name == n))",
        "warmStart.freshTables: every name must be a table of model.embeddings",
        lambda s: (
            s.warm_start is None
            or all(
                n in {t.name for t in s.model.embeddings} for n in s.warm_start.fresh_tables or []
            )
        ),
        lambda s: (
            "warmStart.freshTables: "
            + ", ".join(
                sorted(
                    n
                    for n in (s.warm_start.fresh_tables if s.warm_start else None) or []
                    if n not in {t.name for t in s.model.embeddings}
                )
            )
            + " is not a table of model.embeddings"
        ),
    ),
)

"""Validate a job manifest and say, field by field, what is wrong with it.

Two layers: the models' own validation (what the CRD schema also enforces) and the checks
only code can make (the shard plan fits the memory given, the name leaves room for pod
hostnames, a job whose strategy Auto chose ParameterServer has the chief that needs). Each problem names the field to change. Pure: no I/O.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError

from etj.api.admission import Namespace, admission_problems
from etj.api.constants import API_VERSION, KIND, MAX_JOB_NAME_LENGTH
from etj.api.job import EmbeddingTrainingJob
from etj.api.names import job_name_problem
from etj.api.plan import ShardPlan
from etj.api.rules import check_rules
from etj.api.spec import CHIEF_RULES, FOLLOW_STRATEGY_RULES, Strategy
from etj.api.storage import sharing_problems
from etj.core.planner import PlanError, build_plan


@dataclass(frozen=True)
class Problem:
    """One thing wrong with a job, and where."""

    field: str
    message: str

    def __str__(self) -> str:
        return f"{self.field}: {self.message}"


@dataclass(frozen=True)
class Validated:
    """The outcome of validating one manifest."""

    job: EmbeddingTrainingJob | None
    plan: ShardPlan | None
    problems: list[Problem]

    @property
    def ok(self) -> bool:
        return not self.problems


def _path(loc: tuple[int | str, ...]) -> str:
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        elif part in ("function-after", "function-before") or "[" in str(part):
            continue  # pydantic's internal validator frames, not fields
        else:
            out += f".{part}" if out else str(part)
    return out or "(root)"


def _message(error: Any) -> str:
    kind = error["type"]
    if kind == "extra_forbidden":
        return "unknown field (check its spelling and place)"
    if kind == "missing":
        return "required field is missing"
    msg = str(error["msg"])
    return msg.removeprefix("Value error, ")


def problems_from(exc: ValidationError) -> list[Problem]:
    """pydantic's errors as problems, one per field (union branches folded)."""
    seen: dict[str, Problem] = {}
    for error in exc.errors():
        path = _path(error["loc"])
        # An `int | "auto"` field reports one error per branch; one line is enough.
        if path not in seen:
            seen[path] = Problem(path, _message(error))
    return list(seen.values())


def validate_manifest(
    manifest: Any,
    *,
    admission: Namespace | None = None,
    shared_storage: bool = True,
    claim_modes: dict[str, list[str]] | None = None,
) -> Validated:
    """Validate one manifest (a dict parsed from YAML or read from the API server).

    ``admission``: also refuse what the chart's admission policies refuse in that namespace
    (its labels and annotations; ``etj.api.admission``); the operator acts on jobs the API
    server admitted, and ``etj run`` runs processes, so neither asks for it.
    ``shared_storage``: the job's pods may run on different nodes, so its checkpoints and
    data must be where all of them see them (``etj.api.storage``); false for ``etj run``,
    whose replicas share one host's work directory. ``claim_modes``: the access modes of
    the claims the job names, when the caller read them (the operator)."""
    if not isinstance(manifest, dict):
        return Validated(None, None, [Problem("(root)", "a job manifest must be a mapping")])
    problems: list[Problem] = []
    if manifest.get("apiVersion") != API_VERSION:
        problems.append(Problem("apiVersion", f"must be {API_VERSION}"))
    if manifest.get("kind") != KIND:
        problems.append(Problem("kind", f"must be {KIND}"))
    manifest, name_field = _named(manifest)
    name = (manifest.get("metadata") or {}).get("name")
    if isinstance(name, str) and (why := job_name_problem(name)):
        problems.append(Problem(name_field, why))
    elif isinstance(name, str) and len(name) > MAX_JOB_NAME_LENGTH:
        problems.append(
            Problem(
                name_field,
                f"{len(name)} characters"
                + (" with the 5 the API server appends" if name_field != "metadata.name" else "")
                + f"; at most {MAX_JOB_NAME_LENGTH}, so that pod hostnames "
                "<name>-worker-<index> stay DNS labels",
            )
        )
    if admission is not None:
        problems += [Problem(f, why) for f, why in admission_problems(manifest, admission)]
    try:
        job = EmbeddingTrainingJob.from_manifest(manifest)
    except ValidationError as exc:
        return Validated(None, None, problems + problems_from(exc))
    try:
        plan = build_plan(job.spec)
    except PlanError as exc:
        return Validated(job, None, [*problems, Problem(exc.field, exc.message)])
    chief = _chief_problem(job, plan) or _follow_problem(job, plan)
    if chief is not None:
        return Validated(job, None, [*problems, chief])
    if shared_storage:
        problems += [
            Problem(f, m)
            for f, m in sharing_problems(job.spec, plan.strategy, plan.ps_replicas, claim_modes)
        ]
        if problems:
            return Validated(job, None, problems)
    return Validated(job, plan, problems)


# What the API server appends to a generateName (5 random characters).
GENERATED_NAME_SUFFIX = "xxxxx"


def _named(manifest: dict[str, Any]) -> tuple[dict[str, Any], str]:
    """The manifest as the API server would name it, and the field its name comes from: a
    job with ``generateName`` and no name (``kubectl create``; a CronJob's daily job) is
    checked under the longest name it can get (``GENERATED_NAME_SUFFIX``)."""
    meta = manifest.get("metadata")
    if not isinstance(meta, dict) or "name" in meta:
        return manifest, "metadata.name"
    prefix = meta.get("generateName")
    if not isinstance(prefix, str) or not prefix:
        return manifest, "metadata.name"
    named = {**meta, "name": prefix + GENERATED_NAME_SUFFIX}
    return {**manifest, "metadata": named}, "metadata.generateName"


def _chief_problem(job: EmbeddingTrainingJob, plan: ShardPlan) -> Problem | None:
    """The chief rule (``etj.api.spec.CHIEF_RULES``) for the strategy ``Auto`` chose: the
    model checks it for a strategy written in the spec only."""
    if job.spec.strategy != Strategy.AUTO:
        return None
    decided = job.spec.model_copy(update={"strategy": plan.strategy})
    try:
        check_rules(decided, CHIEF_RULES)
    except ValueError as exc:
        return Problem(
            "spec.replicas.chief.replicas", f"{exc} (strategy Auto chose {plan.strategy})"
        )
    return None


def _follow_problem(job: EmbeddingTrainingJob, plan: ShardPlan) -> Problem | None:
    """The rules of a job following its files or a Kafka topic
    (``etj.api.spec.FOLLOW_STRATEGY_RULES``) for the strategy ``Auto`` chose."""
    if job.spec.strategy != Strategy.AUTO:
        return None
    decided = job.spec.model_copy(update={"strategy": plan.strategy})
    try:
        check_rules(decided, FOLLOW_STRATEGY_RULES)
    except ValueError as exc:
        field = "spec.data.kafka" if job.spec.data.kafka is not None else "spec.data.files.follow"
        return Problem(field, f"{exc} (strategy Auto chose {plan.strategy})")
    return None

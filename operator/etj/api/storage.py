"""Can a job's pods share its checkpoints and read its data? A pure decision.

A job with more than one pod (ParameterServer; MultiWorkerMirrored with several workers,
a chief or an evaluator) reads and writes checkpoints from every pod: each ps writes its
own shards, the chief the index, every worker restores. On a cluster of several nodes
they share only a place every node sees: ``gs://``, or a ReadWriteMany volume. Refused
here: the emptyDir default (each pod's own), an emptyDir or a hostPath volume (each
pod's, each node's own), and a claim whose access modes do not let pods on several nodes
mount it (ReadWriteMany for checkpoints; ReadOnlyMany or ReadWriteMany for data and for
a warm start's claim). A job
whose every training role runs its own program (a converted TFJob) keeps its checkpoints
where its program chooses: only its explicit volumes are checked.

``etj validate`` knows the spec and the plan (``sharing_problems`` without claims); the
operator also reads the claims the job names (through ``etj.controller.kube``) and passes their
access modes in. Each problem is one line naming the field to change.

Pure: no I/O; the claims come in as plain data.
"""

from __future__ import annotations

from typing import Any

from etj.api.spec import CHECKPOINT_NOT_SHARED, EmbeddingTrainingJobSpec, Strategy

# Volume kinds that are one pod's (emptyDir) or one node's (hostPath) own.
_LOCAL_KINDS = {
    "emptyDir": "an emptyDir is each pod's own",
    "hostPath": "a hostPath is each node's own directory",
}
# Access modes that let pods on several nodes mount a claim.
WRITE_MANY = frozenset({"ReadWriteMany"})
READ_MANY = frozenset({"ReadWriteMany", "ReadOnlyMany"})


def job_pods(spec: EmbeddingTrainingJobSpec, strategy: Strategy, ps: int) -> int:
    """How many pods the job runs (a chief by default under ParameterServer only)."""
    r = spec.replicas
    chief = (
        r.chief.replicas
        if r.chief is not None
        else (1 if strategy == Strategy.PARAMETER_SERVER else 0)
    )
    evaluator = r.evaluator.replicas if r.evaluator is not None else 0
    return chief + r.worker.replicas + ps + evaluator


def claim_name(volume: dict[str, Any] | None) -> str | None:
    """The claim a Pod volume source names, if it is a persistentVolumeClaim."""
    pvc = (volume or {}).get("persistentVolumeClaim")
    return str(pvc["claimName"]) if isinstance(pvc, dict) and pvc.get("claimName") else None


def _volume_problem(
    volume: dict[str, Any],
    pods: int,
    modes: dict[str, list[str]] | None,
    needed: frozenset[str],
    fix: str,
) -> str | None:
    for kind, why in _LOCAL_KINDS.items():
        if kind in volume:
            return f"{why}, and this job's {pods} pods may run on different nodes; {fix}"
    claim = claim_name(volume)
    if claim is None or modes is None or claim not in modes:
        return None  # another volume kind, or a claim not read (or not there yet)
    given = modes[claim]
    if needed & set(given):
        return None
    return (
        f"claim {claim} has accessModes {', '.join(given) or '(none)'}, so this job's "
        f"{pods} pods on different nodes cannot all mount it; {fix}"
    )


def _own_program(spec: EmbeddingTrainingJobSpec) -> bool:
    """Every training role runs the job's own program (a TFJob's, say), which keeps its
    checkpoints where it chooses; etj's checkpoint directory is then only offered
    (``sdk.checkpoint_dir()``), and its default is not refused."""
    r = spec.replicas
    roles = [x for x in (r.chief, r.worker, r.ps) if x is not None and x.replicas]
    return bool(roles) and all(
        x.template is not None and x.template.runs_own_program for x in roles
    )


def sharing_problems(
    spec: EmbeddingTrainingJobSpec,
    strategy: Strategy,
    ps: int,
    claim_modes: dict[str, list[str]] | None = None,
) -> list[tuple[str, str]]:
    """(field, one-line message) for each place the job's pods cannot share; ``claim_modes``:
    the access modes of the claims the job names, by claim name (None: not read)."""
    pods = job_pods(spec, strategy, ps)
    if pods <= 1:
        return []
    out: list[tuple[str, str]] = []
    ckpt = spec.checkpoint
    if not ckpt.shared and not _own_program(spec):
        out.append(("spec", CHECKPOINT_NOT_SHARED))
    elif ckpt.volume is not None:
        problem = _volume_problem(
            ckpt.volume,
            pods,
            claim_modes,
            WRITE_MANY,
            "use a ReadWriteMany claim, checkpoint.storage or checkpoint.uri",
        )
        if problem:
            out.append(("spec.checkpoint.volume", problem))
    files = spec.data.files
    if spec.data.source == "files" and files is not None and files.volume is not None:
        problem = _volume_problem(
            files.volume,
            pods,
            claim_modes,
            READ_MANY,
            "use a ReadOnlyMany or ReadWriteMany claim, or gs:// patterns",
        )
        if problem:
            out.append(("spec.data.files.volume", problem))
    warm = spec.warm_start.checkpoint if spec.warm_start is not None else None
    if warm is not None and warm.claim is not None:
        problem = _volume_problem(
            {"persistentVolumeClaim": {"claimName": warm.claim}},
            pods,
            claim_modes,
            READ_MANY,
            "use a ReadOnlyMany or ReadWriteMany claim, or a gs:// location",
        )
        if problem:
            out.append(("spec.warmStart.checkpoint.claim", problem))
    return out


def claims_to_read(spec: EmbeddingTrainingJobSpec) -> list[str]:
    """The claims whose access modes decide whether the job's pods can share them."""
    names = [claim_name(spec.checkpoint.volume)]
    files = spec.data.files
    if spec.data.source == "files" and files is not None:
        names.append(claim_name(files.volume))
    if spec.warm_start is not None and spec.warm_start.checkpoint is not None:
        names.append(spec.warm_start.checkpoint.claim)
    return sorted({n for n in names if n})

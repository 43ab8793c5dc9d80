"""May a job's pods mount the checkpoint claim that already exists under its name? Pure.

``checkpoint.storage``'s claim is named after the job (``<job>-checkpoints``). When a job
is deleted and one of the same name applied at once, the old claim is still there: owned
by the deleted job, so the garbage collector deletes it, and Terminating until the old pods
let go of it (the ``kubernetes.io/pvc-protection`` finalizer). Pods made against it would
mount a claim about to vanish and stay Pending for good (nothing makes a claim for pods
that exist). So the new job makes no pod until that claim is gone, then makes its own.

A claim with no owner (``retain``: kept when its job was deleted) or owned by this job is
used as it is: a retained claim is how a job of the same name goes on from its
checkpoints.

Must not: read the API or decide anything but this wait.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from etj.api.constants import KIND


def claim_wait(claim: Mapping[str, Any], job_uid: str | None) -> str | None:
    """Why the job's pods must wait for ``claim`` (the existing one of its name) to go, or
    None when they may mount it."""
    meta = claim.get("metadata") or {}
    name = meta.get("name", "?")
    if meta.get("deletionTimestamp"):
        return f"claim {name} is being deleted (an earlier job of this name owned it)"
    owners = [o for o in meta.get("ownerReferences") or [] if o.get("kind") == KIND]
    if job_uid is not None and owners and all(o.get("uid") != job_uid for o in owners):
        uid = owners[0].get("uid")
        return f"claim {name} belongs to an earlier job of this name (uid {uid}), being deleted"
    return None

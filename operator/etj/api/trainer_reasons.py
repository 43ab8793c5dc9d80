"""The reasons the trainer gives for its own end: the first word of its termination message
(``<Reason>: <message>``, ``etj_trainer.task.termination``) and of its ``error`` event. Their
one home: the trainer writes them, the operator acts on them (``etj.core.reconcile.policies
.restart``), ``etj run`` and the tests read them from here.

The trainer's error classes carry their reason as data (a ``reason`` class attribute set
from here), so renaming a class changes no reason. The reasons a job's conditions and
Events carry are ``etj.api.reasons``.

Pure data: no logic, no I/O.
"""

from __future__ import annotations

# The trainer's exit code for a failure a restart from the last checkpoint cures: a ps or
# peer unavailable, a collective aborted, the watchdog (etj_trainer.exitcodes.RETRYABLE is
# this one). With a peer lost with its node in the same pass, the operator takes it for
# that loss's (etj.core.reconcile.policies.peerloss).
EXIT_RETRYABLE = 138

# The chief's watchdog stopped it: no step completed for watchdogSeconds, so some replica
# is hung.
REASON_WATCHDOG = "WatchdogTimeout"
# The chief trained every step: "TrainingComplete: <json>", the final progress and held-out
# evaluation (``{"progress": {...}, "evaluation": {...}}``, status field names). The
# operator's last scrape of the metrics page may be older: this is what status.progress
# and status.evaluation of a Succeeded job say.
REASON_COMPLETED = "TrainingComplete"
# The trainer config or TF_CONFIG cannot be used (it exits before TensorFlow loads).
REASON_CONFIG_ERROR = "ConfigError"
REASON_CLUSTER_ERROR = "ClusterError"
# The job's own model code cannot be used (a module that fails to import, a factory that
# raises, a tower of the wrong output shape).
REASON_MODEL_ERROR = "ModelError"
# A data file is malformed past data.maxBadRecords; the message names the file and line
# ("DataError: /data/day_0.txt:81733: expected 40 fields, found 39").
REASON_DATA_ERROR = "DataError"
# The checkpoint to restore does not fit the job's model (another table shape, another
# architecture): a restart would restore the same checkpoint.
REASON_CHECKPOINT_MISMATCH = "CheckpointMismatch"

# A checkpoint save found its volume full (ENOSPC, EDQUOT): "CheckpointStorageFull: the
# checkpoint volume at <dir> is full ...", with the volume's size and free bytes and what
# the last checkpoint took (etj_trainer.task.storage_full). Every restart would train from
# the last checkpoint and fail at the next save; the operator sets the job's
# CheckpointStorageFull condition with this message.
REASON_CHECKPOINT_STORAGE_FULL = "CheckpointStorageFull"

# What no restart cures: a person must fix the data, the model code or the checkpoint. The
# trainer exits 2 with one of these; the operator fails the job with the trainer's message
# under every restartPolicy (under OnFailure it would otherwise fail the same way
# backoffLimit times, and end on "backoff limit exceeded" instead of the file and line).
# Each with what the person must fix.
PERMANENT_TRAINER_REASONS = {
    REASON_MODEL_ERROR: "the model code",
    REASON_DATA_ERROR: "the data",
    REASON_CHECKPOINT_MISMATCH: "the model or the checkpoint",
    REASON_CHECKPOINT_STORAGE_FULL: (
        "the checkpoint volume: free space, give it more, or keep fewer checkpoints "
        "(checkpoint.keep)"
    ),
}

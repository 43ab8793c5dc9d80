"""Exit codes of the trainer: the one place they are defined.

The operator's ``restartPolicy: ExitCode`` treats 1-127 as permanent and 128+ as
retryable, so a failure the operator should retry (a peer went away, the watchdog fired, a
collective aborted) must exit with a code >= 128, and a failure no restart can cure (a bad
config, a bug) with one below. Nothing here imports TensorFlow.
The one retryable code the operator acts on is ``etj.api.trainer_reasons.EXIT_RETRYABLE``.
"""

from __future__ import annotations

from etj.api.trainer_reasons import EXIT_RETRYABLE

SUCCESS = 0
# An unexpected exception: a bug in the trainer or the model; retrying will not help.
BUG = 1
# The config or TF_CONFIG is invalid, or the command line is wrong.
USAGE = 2
# A distributed failure that a restart from the last checkpoint cures: a ps or peer
# unavailable, a collective aborted, no step completed within the watchdog's time. The
# operator reads it too: its value lives in the contract (etj.api.trainer_reasons).
RETRYABLE = EXIT_RETRYABLE
# SIGTERM (a graceful pod stop): the chief checkpoints first. 128 + 15, as a shell reports it.
TERMINATED = 143


def is_retryable(code: int) -> bool:
    """Whether the operator's ExitCode policy retries this exit code."""
    return code >= 128

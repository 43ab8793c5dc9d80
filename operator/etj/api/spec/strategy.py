"""``spec.strategy``: how a job distributes its training.

Pure: no I/O, no environment, no kopf or Kubernetes client.
"""

from __future__ import annotations

from enum import StrEnum


class Strategy(StrEnum):
    PARAMETER_SERVER = "ParameterServer"
    MULTI_WORKER_MIRRORED = "MultiWorkerMirrored"
    AUTO = "Auto"

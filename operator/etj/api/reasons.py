"""The reasons etj gives on a job's conditions and Events (``Condition.reason``, an Event's
``reason``): their one home. The policies that set them, the operator, ``etj run`` and the
tests name them from here; a user's alert or script matches their values (the wire), so a
value never changes once released.

A value is a CamelCase word (``CONDITION_REASON_PATTERN`` in ``etj.api.status``). The
reasons the trainer gives for its own end (its termination message) are in
``etj.api.trainer_reasons``; those Kubernetes gives (a pod's ``status.reason``) stay
where they are read (``etj.core.reconcile.observe``).

Pure data: no logic, no I/O.
"""

from __future__ import annotations

# The job cannot run: its spec is invalid, or its pods cannot share the claims it names.
REASON_INVALID_SPEC = "InvalidSpec"
REASON_STORAGE_NOT_SHARED = "StorageNotShared"

# Pods made; every replica running; the job resumed or suspended.
REASON_CREATED = "Created"
REASON_PODS_CREATED = "PodsCreated"
REASON_RUNNING = "Running"
REASON_ALL_RUNNING = "AllReplicasRunning"
REASON_RESUMED = "Resumed"
REASON_SUSPENDED = "Suspended"

# The end: succeeded, past its deadline, a permanent failure, out of restarts; the TTL.
REASON_SUCCEEDED = "JobSucceeded"
REASON_DEADLINE_EXCEEDED = "DeadlineExceeded"
REASON_REPLICA_FAILED = "ReplicaFailed"
REASON_BACKOFF_LIMIT_EXCEEDED = "BackoffLimitExceeded"
REASON_TTL_EXPIRED = "TTLExpired"

# Restarts: a replica being replaced, its node lost, an OOM kill (its limit raised).
REASON_RESTARTING = "Restarting"
REASON_NODE_LOST = "NodeLost"
REASON_OOM_KILLED = "OOMKilled"

# Kueue stopped the job's pod group: preempted, or evicted otherwise (policies.queue).
REASON_PREEMPTED = "Preempted"
REASON_EVICTED = "EvictedByQueue"

# A change of the worker count being applied, then done (policies.scale).
REASON_SCALING = "WorkersChanged"
REASON_SCALED = "Scaled"

# The gang (policies.gang): placed, cannot be placed, waiting; its object cannot be made.
REASON_GANG_SCHEDULED = "GangScheduled"
REASON_GANG_UNSCHEDULABLE = "GangUnschedulable"
REASON_GANG_WAITING = "GangWaiting"
REASON_GANG_UNAVAILABLE = "GangSchedulerUnavailable"

# spec.warmStart (policies.warmstart): resolved, no source, waiting, refused; the
# trainer's report of what it read.
REASON_SOURCE_RESOLVED = "SourceResolved"
REASON_NO_SOURCE = "NoSource"
REASON_WAITING_FOR_SOURCE = "WaitingForSource"
REASON_WARM_START_REFUSED = "WarmStartRefused"
REASON_CHECKPOINT_READ = "CheckpointRead"

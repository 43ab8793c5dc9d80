"""Prometheus metrics of the operator itself (served by ``etj operator --metrics-port``)."""

from __future__ import annotations

from prometheus_client import Counter, Gauge, Histogram

RECONCILES = Counter("etj_reconciles_total", "Reconcile passes", ["result"])
RECONCILE_SECONDS = Histogram("etj_reconcile_duration_seconds", "Time of one reconcile pass")
RESTARTS = Counter("etj_replica_restarts_total", "Replicas recreated after a failure", ["role"])
RESYNCS = Counter("etj_resyncs_total", "Full resyncs of the watch cache from the API")
PODS_CREATED = Counter("etj_pods_created_total", "Pods created")
JOBS_FINISHED = Counter("etj_jobs_finished_total", "Jobs that finished", ["phase"])
LEADER = Gauge("etj_leader", "1 while this operator holds the leader Lease (or runs alone)")

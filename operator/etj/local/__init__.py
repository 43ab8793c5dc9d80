"""Running a job's replicas as local processes: ``etj run`` (and, later, the process-backed
node of the local cluster). ``pod_process`` maps a rendered Pod to a process spec (pure);
``launch`` starts and stops processes; ``runner`` supervises them with the operator's own
``etj.core.reconcile.decide``.
"""

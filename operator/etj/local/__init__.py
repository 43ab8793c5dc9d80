"""Running a job's replicas as local processes: ``etj run`` (and, later, the process-backed
node of the local cluster). ``process`` maps a rendered Pod to a process spec (pure);
``procs`` starts and stops processes; ``runner`` supervises them with the operator's own
``etj.reconcile.decide``.
"""

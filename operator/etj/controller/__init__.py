"""The operator's edge: kopf handlers, the reconcile loop that applies decisions, metrics.

Handlers stay short: they wake the per-job loop; the loop reads the world through
``etj.controller.kube``, calls the pure ``etj.core.reconcile.decide`` and applies the Decision, writing the
job's status once per pass. Importing this package imports kopf.
"""

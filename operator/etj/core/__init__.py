"""The pure core: the shard plan (``planner``), TF_CONFIG (``tfconfig``), validation, the
CRD (``crd``), the rendered objects (``render``) and the reconcile decisions
(``reconcile``). Pure functions: no I/O, no environment, neither kopf, the Kubernetes client
nor TensorFlow (import-linter and tests/unit/etj/core/test_purity.py check it).
"""

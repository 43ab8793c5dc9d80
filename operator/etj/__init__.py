"""etj: a Kubernetes operator for multi-worker TensorFlow training of large embedding models.

The package is layered (import-linter checks it): the entry points (``etj.cli``) above the
operator (``etj.controller``, the one place that talks to the API), the local runner
(``etj.local``), the pure core (``etj.core``: plan, TF_CONFIG, validation, CRD, rendering,
reconcile decisions; no I/O, no kopf) and the API types every layer shares (``etj.api``).
The test cluster is not part of it (``etj_testcluster``, under tests/cluster). Importing
this package is cheap.
"""

__version__ = "0.1.0"

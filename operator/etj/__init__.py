"""etj: a Kubernetes operator for multi-worker TensorFlow training of large embedding models.

The package is layered. The pure core (``etj.api``, ``etj.planner``, ``etj.tfconfig``,
``etj.render``, ``etj.validation``, ``etj.crd``) does no I/O, reads no environment and imports
neither kopf nor the Kubernetes client; the edges (``etj.k8s``, ``etj.controller``,
``etj.localcluster``, ``etj.cli``) do the talking. Importing this package is cheap.
"""

__version__ = "0.1.0"

"""The etj trainer: the program that runs inside every chief / worker / ps pod.

Importing this package must stay cheap (no TensorFlow import at package level): the
operator validates trainer configs with ``etj_trainer.config`` without TensorFlow installed.
It never imports kopf or the Kubernetes client.
"""

__version__ = "0.1.0"

"""The etj trainer: the program that runs inside every chief / worker / ps pod.

Importing this package must stay cheap (no TensorFlow import at package level): a job's
own program imports ``etj_trainer.sdk`` and the supervisor runs before TensorFlow starts.
It never imports kopf or the Kubernetes client, and of the operator's package only
``etj.api`` (the trainer image carries nothing else of it).
"""

__version__ = "0.1.0"

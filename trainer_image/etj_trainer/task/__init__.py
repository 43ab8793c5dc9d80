"""The training task: what each process of a job does, and the loop they share.

Roles and the cluster (``cluster``: ``Role``, TF_CONFIG, the leader rule), what each
role runs (``roles``: the servers, the ParameterServer coordinator, the synchronous
trainers), the training loop they share (``loop``), the training state and step function
every strategy shares (``state``), sparse optimizers (``optim``), checkpoints
(``checkpoint``), held-out evaluation and the evaluator role (``evaluate``, ``auc``),
progress reporting (``progress``, ``termination``), the watchdog (``supervisor``), and
the export for serving with its reference reader (``export``, ``serving``).

The top layer below the entry points (``etj_trainer.main``, ``etj_trainer.sdk``): it may
import the model code (``etj_trainer.models``) and the input code (the ``data``
package), never the other way round. Importing the package itself loads no TensorFlow
(``etj_trainer.sdk`` and the supervisor need ``cluster``, ``progress`` and
``termination`` without it).
"""

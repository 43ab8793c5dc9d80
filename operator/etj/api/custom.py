"""``spec.model.custom``: the user's own tower, imported by the trainer.

etj imports ``module`` (from the image, or from the files of the ConfigMap ``configMap``,
which etj mounts read-only into every replica at ``MODEL_CODE_MOUNT`` and puts on
``sys.path``), calls ``factory(parameters)`` once inside the strategy scope and calls what it
returns as ``tower(embeddings, dense, training) -> logits [batch]``, exactly as it calls its
own architectures' towers (``etj_trainer.models``). etj keeps the tables, optimizers,
checkpoints, progress and export.

A custom tower replaces the architecture's: it goes with the default architecture (``dnn``)
only, a rule written once for the CRD (CEL) and for pydantic.

Pure: no I/O, no environment, no kopf or Kubernetes client.
"""

from __future__ import annotations

from typing import Any

from pydantic import Field

from etj.api.architectures import Architecture
from etj.api.base import ApiModel
from etj.api.rules import Rule

# A dotted Python module path (``towers.my_tower``) and a Python identifier.
MODULE_PATTERN = r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*$"
IDENTIFIER_PATTERN = r"^[A-Za-z_][A-Za-z0-9_]*$"
# A ConfigMap name: a DNS-1123 subdomain.
DNS1123_SUBDOMAIN = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"


class CustomModel(ApiModel):
    """Your own tower: etj calls factory(parameters) once inside the strategy scope and
    then tower(embeddings, dense, training) -> logits of shape [batch], where embeddings
    maps each embedding input's name to its pooled [batch, dimension] float32 tensor and
    dense is the [batch, n] float32 tensor of dense features (or None). The tower is a
    tf_keras layer or model, or a tf.Module; etj still owns the tables, optimizers,
    checkpoints (the tower's variables included), progress and export."""

    module: str = Field(
        min_length=1,
        max_length=256,
        pattern=MODULE_PATTERN,
        description=(
            "Python module to import (dotted path, e.g. my_tower or towers.ctr): from the "
            "files of configMap when it is given, else from the trainer image."
        ),
    )
    factory: str = Field(
        min_length=1,
        max_length=128,
        pattern=IDENTIFIER_PATTERN,
        description=(
            "Name of the function in module that etj calls once, as factory(parameters), "
            "inside the strategy scope; it returns the tower."
        ),
    )
    parameters: dict[str, Any] = Field(
        default_factory=dict,
        description=(
            "Free-form settings passed to the factory as a dict (JSON values: numbers, "
            "strings, booleans, lists, objects); default: an empty dict."
        ),
    )
    config_map: str | None = Field(
        default=None,
        min_length=1,
        max_length=253,
        pattern=DNS1123_SUBDOMAIN,
        description=(
            "Name of a ConfigMap in the job's namespace whose files (keys such as "
            "my_tower.py) are mounted read-only into every replica and put on the trainer's "
            "sys.path; default: the module comes from the trainer image."
        ),
    )


def _custom_with_default_architecture(m: Any) -> bool:
    return m.custom is None or m.architecture == Architecture.DNN


CUSTOM_RULES = (
    Rule(
        "!has(self.custom) || !has(self.architecture) || self.architecture == 'dnn'",
        "model.custom replaces the architecture's tower: leave model.architecture unset "
        "(dnn) when model.custom is given",
        _custom_with_default_architecture,
        lambda m: (
            f"model.custom replaces the architecture's tower, but model.architecture is "
            f"{str(m.architecture)!r}: remove model.architecture or model.custom"
        ),
    ),
)

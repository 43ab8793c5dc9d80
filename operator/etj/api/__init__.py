"""The EmbeddingTrainingJob API: pydantic models for spec, status, shard plan and trainer config.

The one source of truth for the wire format and the CRD schema. Pure: no I/O, no
environment, no kopf or Kubernetes client.
"""

from etj.api.constants import API_VERSION, GROUP, KIND, PLURAL, VERSION
from etj.api.job import EmbeddingTrainingJob, ObjectMeta
from etj.api.plan import PsPlan, ShardPlan, TablePlan
from etj.api.spec import EmbeddingTrainingJobSpec, Optimizer, RestartPolicy, Strategy
from etj.api.status import Condition, EmbeddingTrainingJobStatus, Phase
from etj.api.trainer import TrainerConfig

__all__ = [
    "API_VERSION",
    "GROUP",
    "KIND",
    "PLURAL",
    "VERSION",
    "Condition",
    "EmbeddingTrainingJob",
    "EmbeddingTrainingJobSpec",
    "EmbeddingTrainingJobStatus",
    "ObjectMeta",
    "Optimizer",
    "Phase",
    "PsPlan",
    "RestartPolicy",
    "ShardPlan",
    "Strategy",
    "TablePlan",
    "TrainerConfig",
]

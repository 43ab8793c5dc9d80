"""The EmbeddingTrainingJob resource as a whole: metadata, spec and status.

Pure data; ``EmbeddingTrainingJob.from_manifest`` parses a manifest dict (from YAML or the
API server) and raises pydantic's ValidationError on a malformed one.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from etj.api.constants import API_VERSION, KIND
from etj.api.spec import EmbeddingTrainingJobSpec
from etj.api.status import EmbeddingTrainingJobStatus


class ObjectMeta(BaseModel):
    """The metadata fields etj reads; everything else is kept as is."""

    model_config = ConfigDict(extra="allow", populate_by_name=True)

    name: str = Field(min_length=1, max_length=253)
    namespace: str = "default"
    uid: str | None = None
    generation: int | None = None
    labels: dict[str, str] = Field(default_factory=dict)
    annotations: dict[str, str] = Field(default_factory=dict)
    creationTimestamp: str | None = None
    deletionTimestamp: str | None = None


class EmbeddingTrainingJob(BaseModel):
    """A whole job resource."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    apiVersion: str = API_VERSION
    kind: str = KIND
    metadata: ObjectMeta
    spec: EmbeddingTrainingJobSpec
    status: EmbeddingTrainingJobStatus | None = None

    @classmethod
    def from_manifest(cls, manifest: dict[str, Any]) -> EmbeddingTrainingJob:
        return cls.model_validate(manifest)

    @property
    def name(self) -> str:
        return self.metadata.name

    @property
    def namespace(self) -> str:
        return self.metadata.namespace

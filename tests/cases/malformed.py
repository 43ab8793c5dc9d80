"""A corpus of malformed EmbeddingTrainingJobs, each with what must reject it.

Layers:
- ``schema``: the CRD's structural OpenAPI schema rejects it (types, enums, minimums,
  patterns, required fields; unknown fields under kubectl's strict field validation);
- ``cel``: only an ``x-kubernetes-validations`` CEL rule of the CRD rejects it (cross-field
  rules);
- ``plan``: only the operator's code can see it (the shard plan does not fit); the API
  server stores it, and the operator marks it Failed/InvalidSpec.

Every case must also be rejected by ``etj validate`` naming ``field`` with a message that
contains ``message``. Pure data: used by unit tests and by the integration test that
sends every schema/cel case to the real API server.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

BASE: dict[str, Any] = {
    "apiVersion": "training.etj.dev/v1alpha1",
    "kind": "EmbeddingTrainingJob",
    "metadata": {"name": "bad"},
    "spec": {
        "strategy": "ParameterServer",
        "replicas": {
            "chief": {"replicas": 1},
            "worker": {"replicas": 2},
            "ps": {"replicas": 2, "resources": {"limits": {"memory": "4Gi"}}},
        },
        "model": {
            "embeddings": [
                {"name": "user_id", "vocabularySize": 100000, "dimension": 16},
                {"name": "item_id", "vocabularySize": 5000, "dimension": 16},
            ],
            "hiddenUnits": [64, 32],
        },
        "training": {"steps": 100, "optimizer": "adagrad", "learningRate": 0.05},
        "checkpoint": {"storage": {"size": "1Gi"}},
    },
}


# A Kafka source and the feature schema its messages are rows of.
KAFKA_FEATURES: list[dict[str, Any]] = [
    {"name": "y", "kind": "label"},
    {"name": "user", "kind": "categorical", "table": "user_id"},
    {"name": "item", "kind": "categorical", "table": "item_id"},
]
KAFKA_DATA: dict[str, Any] = {
    "source": "kafka",
    "kafka": {"bootstrapServers": "kafka-0.kafka:9092,kafka-1.kafka:9092", "topic": "clicks"},
}


@dataclass(frozen=True)
class Case:
    id: str
    layer: str  # schema | cel | plan
    field: str
    message: str
    change: Callable[[dict[str, Any]], None]

    @property
    def manifest(self) -> dict[str, Any]:
        doc = copy.deepcopy(BASE)
        self.change(doc)
        return doc


def _set(path: str, value: Any) -> Callable[[dict[str, Any]], None]:
    def change(doc: dict[str, Any]) -> None:
        *parents, last = path.split(".")
        node: Any = doc
        for p in parents:
            node = node[int(p)] if p.isdigit() else node.setdefault(p, {})
        if isinstance(node, list):
            node[int(last)] = value
        else:
            node[last] = value

    return change


def _delete(path: str) -> Callable[[dict[str, Any]], None]:
    def change(doc: dict[str, Any]) -> None:
        *parents, last = path.split(".")
        node: Any = doc
        for p in parents:
            node = node[int(p)] if p.isdigit() else node[p]
        del node[last]

    return change


def _both(*changes: Callable[[dict[str, Any]], None]) -> Callable[[dict[str, Any]], None]:
    def change(doc: dict[str, Any]) -> None:
        for c in changes:
            c(doc)

    return change


E0 = "spec.model.embeddings.0"
# A valid feature list for BASE's tables (label, then one categorical per table).
FEATURES: list[dict[str, Any]] = [
    {"name": "clicked", "kind": "label"},
    {"name": "user", "kind": "categorical", "table": "user_id"},
    {"name": "item", "kind": "categorical", "table": "item_id"},
]
F0 = "spec.model.embeddings[0]"

CASES: list[Case] = [
    # ---- schema: types -------------------------------------------------------------------
    Case(
        "vocab-string",
        "schema",
        f"{F0}.vocabularySize",
        "valid integer",
        _set(f"{E0}.vocabularySize", "many"),
    ),
    Case(
        "dimension-float",
        "schema",
        f"{F0}.dimension",
        "valid integer",
        _set(f"{E0}.dimension", 1.5),
    ),
    Case("model-is-list", "schema", "spec.model", "valid dictionary", _set("spec.model", [1, 2])),
    Case("image-number", "schema", "spec.image", "valid string", _set("spec.image", 42)),
    Case(
        "steps-string",
        "schema",
        "spec.training.steps",
        "valid integer",
        _set("spec.training.steps", "lots"),
    ),
    Case(
        "suspend-string",
        "schema",
        "spec.runPolicy.suspend",
        "valid boolean",
        _set("spec.runPolicy", {"suspend": "maybe"}),
    ),
    # ---- schema: sizes -------------------------------------------------------------------
    Case(
        "vocab-negative",
        "schema",
        f"{F0}.vocabularySize",
        "greater than or equal to 1",
        _set(f"{E0}.vocabularySize", -5),
    ),
    Case(
        "vocab-zero",
        "schema",
        f"{F0}.vocabularySize",
        "greater than or equal to 1",
        _set(f"{E0}.vocabularySize", 0),
    ),
    Case(
        "dimension-zero",
        "schema",
        f"{F0}.dimension",
        "greater than or equal to 1",
        _set(f"{E0}.dimension", 0),
    ),
    Case(
        "workers-negative",
        "schema",
        "spec.replicas.worker.replicas",
        "greater than or equal to 0",
        _set("spec.replicas.worker.replicas", -1),
    ),
    Case(
        "ps-zero",
        "schema",
        "spec.replicas.ps.replicas",
        "integer >= 1",
        _set("spec.replicas.ps.replicas", 0),
    ),
    Case(
        "ps-many",
        "schema",
        "spec.replicas.ps.replicas",
        "auto",
        _set("spec.replicas.ps.replicas", "many"),
    ),
    Case(
        "chief-two",
        "schema",
        "spec.replicas.chief.replicas",
        "less than or equal to 1",
        _set("spec.replicas.chief.replicas", 2),
    ),
    Case(
        "hidden-zero",
        "schema",
        "spec.model.hiddenUnits[1]",
        "greater than or equal to 1",
        _set("spec.model.hiddenUnits", [64, 0]),
    ),
    Case(
        "learning-rate-zero",
        "schema",
        "spec.training.learningRate",
        "greater than 0",
        _set("spec.training.learningRate", 0),
    ),
    Case(
        "steps-zero",
        "schema",
        "spec.training.steps",
        "greater than or equal to 1",
        _set("spec.training.steps", 0),
    ),
    Case(
        "batch-zero",
        "schema",
        "spec.training.batchSizePerReplica",
        "greater than or equal to 1",
        _set("spec.training.batchSizePerReplica", 0),
    ),
    Case(
        "backoff-negative",
        "schema",
        "spec.runPolicy.backoffLimit",
        "greater than or equal to 0",
        _set("spec.runPolicy", {"backoffLimit": -1}),
    ),
    Case(
        "watchdog-too-short",
        "schema",
        "spec.runPolicy.watchdogSeconds",
        "greater than or equal to 10",
        _set("spec.runPolicy", {"watchdogSeconds": 5}),
    ),
    Case(
        "keep-zero",
        "schema",
        "spec.checkpoint.keep",
        "greater than or equal to 1",
        _set("spec.checkpoint", {"keep": 0}),
    ),
    Case(
        "zipf-one",
        "schema",
        "spec.data.synthetic.zipfExponent",
        "greater than 1",
        _set("spec.data", {"source": "synthetic", "synthetic": {"zipfExponent": 1.0}}),
    ),
    Case(
        "headroom-below-one",
        "schema",
        "spec.sharding.psMemoryHeadroom",
        "greater than or equal to 1",
        _set("spec.sharding", {"psMemoryHeadroom": 0.5}),
    ),
    Case(
        "deadline-zero",
        "schema",
        "spec.runPolicy.activeDeadlineSeconds",
        "greater than or equal to 1",
        _set("spec.runPolicy", {"activeDeadlineSeconds": 0}),
    ),
    # ---- schema: sizes found by test_spec_fuzz ----------------------------------------------
    Case(
        "ps-over-max",
        "schema",
        "spec.replicas.ps.replicas",
        "<= 1024",
        _set("spec.replicas.ps.replicas", 1_000_000_000),
    ),
    Case(
        "quantity-negative",
        "schema",
        "spec.sharding.psBaseMemory",
        "negative",
        _set("spec.sharding", {"psBaseMemory": "-1Gi"}),
    ),
    Case(
        "quantity-negative-integer",
        "schema",
        "spec.sharding.maxShardBytes",
        "negative",
        _set("spec.sharding", {"maxShardBytes": -5}),
    ),
    Case(
        "memory-limit-negative",
        "schema",
        "spec.replicas.ps.resources.limits.memory",
        "negative",
        _set("spec.replicas.ps.resources.limits.memory", "-4Gi"),
    ),
    # ---- schema: enums and patterns -----------------------------------------------------
    Case(
        "strategy-unknown",
        "schema",
        "spec.strategy",
        "ParameterServer",
        _set("spec.strategy", "Sideways"),
    ),
    Case(
        "optimizer-unknown",
        "schema",
        "spec.training.optimizer",
        "adagrad",
        _set("spec.training.optimizer", "rmsprop"),
    ),
    Case("dtype-unknown", "schema", f"{F0}.dtype", "float32", _set(f"{E0}.dtype", "int8")),
    Case("combiner-unknown", "schema", f"{F0}.combiner", "mean", _set(f"{E0}.combiner", "max")),
    Case(
        "restart-policy-unknown",
        "schema",
        "spec.runPolicy.restartPolicy",
        "ExitCode",
        _set("spec.runPolicy", {"restartPolicy": "Always"}),
    ),
    Case(
        "clean-pod-policy-unknown",
        "schema",
        "spec.runPolicy.cleanPodPolicy",
        "Running",
        _set("spec.runPolicy", {"cleanPodPolicy": "Some"}),
    ),
    Case(
        "data-source-unknown",
        "schema",
        "spec.data.source",
        "synthetic",
        _set("spec.data", {"source": "bigquery"}),
    ),
    Case("table-name-pattern", "schema", f"{F0}.name", "pattern", _set(f"{E0}.name", "User-ID")),
    Case(
        "quantity-words",
        "schema",
        "spec.sharding.maxShardBytes",
        "not a Kubernetes quantity",
        _set("spec.sharding", {"maxShardBytes": "lots"}),
    ),
    Case(
        "quantity-unit",
        "schema",
        "spec.replicas.ps.resources.limits.memory",
        "not a Kubernetes quantity",
        _set("spec.replicas.ps.resources.limits.memory", "12XB"),
    ),
    Case(
        "mount-relative",
        "schema",
        "spec.checkpoint.mountPath",
        "pattern",
        _set("spec.checkpoint", {"mountPath": "checkpoints"}),
    ),
    # ---- schema: required and unknown ----------------------------------------------------
    Case(
        "model-missing", "schema", "spec.model", "required field is missing", _delete("spec.model")
    ),
    Case(
        "embeddings-missing",
        "schema",
        "spec.model.embeddings",
        "required field is missing",
        _delete("spec.model.embeddings"),
    ),
    Case(
        "embeddings-empty",
        "schema",
        "spec.model.embeddings",
        "at least 1 item",
        _set("spec.model.embeddings", []),
    ),
    Case(
        "dimension-missing",
        "schema",
        f"{F0}.dimension",
        "required field is missing",
        _delete(f"{E0}.dimension"),
    ),
    Case(
        "unknown-field", "schema", f"{F0}.vocabSize", "unknown field", _set(f"{E0}.vocabSize", 10)
    ),
    Case(
        "duplicate-table",
        "schema",
        "spec.model.embeddings",
        "appears twice",
        _set("spec.model.embeddings.1.name", "user_id"),
    ),
    # ---- cel: cross-field rules ----------------------------------------------------------
    Case(
        "architecture-settings-mismatch",
        "cel",
        "spec.model",
        "only for the architecture of the same name",
        _set("spec.model.dcnV2", {"crossLayers": 2}),
    ),
    Case(
        "dlrm-mixed-dimensions",
        "cel",
        "spec.model",
        "every table of the same dimension",
        _both(
            _set("spec.model.architecture", "dlrm"), _set("spec.model.embeddings.1.dimension", 8)
        ),
    ),
    Case(
        "wide-reserved-table-name",
        "cel",
        "spec.model",
        "is reserved for the first-order table of",
        _both(
            _set("spec.model.architecture", "wideDeep"),
            _set("spec.model.embeddings.1.name", "user_id__linear"),
        ),
    ),
    Case(
        "custom-with-architecture",
        "cel",
        "spec.model",
        "model.custom replaces the architecture's tower",
        _both(
            _set("spec.model.architecture", "dcnV2"),
            _set("spec.model.custom", {"module": "my_tower", "factory": "build"}),
        ),
    ),
    Case(
        "custom-config-map-not-dns",
        "schema",
        "spec.model.custom.configMap",
        "should match pattern",
        _set("spec.model.custom", {"module": "t", "factory": "f", "configMap": "My_Code"}),
    ),
    Case(
        "custom-module-not-python",
        "schema",
        "spec.model.custom.module",
        "should match pattern",
        _set("spec.model.custom", {"module": "my-tower.py", "factory": "build"}),
    ),
    Case(
        "custom-no-factory",
        "schema",
        "spec.model.custom.factory",
        "required",
        _set("spec.model.custom", {"module": "my_tower"}),
    ),
    Case(
        "export-keep-zero",
        "schema",
        "spec.export.keep",
        "greater than or equal to 1",
        _set("spec.export", {"everySteps": 100, "keep": 0}),
    ),
    Case(
        "export-every-seconds-zero",
        "schema",
        "spec.export.everySeconds",
        "greater than or equal to 1",
        _set("spec.export", {"everySeconds": 0}),
    ),
    # ---- cel: serving versions and TensorBoard ------------------------------------------------
    Case(
        "export-two-intervals",
        "cel",
        "spec.export",
        "export: set everySteps or everySeconds, not both",
        _set("spec.export", {"everySteps": 100, "everySeconds": 60}),
    ),
    Case(
        "tensorboard-s3",
        "cel",
        "spec.tensorboard",
        "tensorboard.uri: s3:// and hdfs:// are not built into TensorFlow 2.21",
        _set("spec.tensorboard", {"uri": "s3://bucket/tb"}),
    ),
    Case(
        "tensorboard-relative-uri",
        "cel",
        "spec.tensorboard",
        "tensorboard.uri must be gs://bucket/prefix or an absolute path",
        _set("spec.tensorboard", {"uri": "logs/tb"}),
    ),
    # ---- cel: where checkpoints and data may be ---------------------------------------------
    Case(
        "checkpoint-two-places",
        "cel",
        "spec.checkpoint",
        "checkpoint: set at most one of uri, volume and storage",
        _set("spec.checkpoint", {"uri": "gs://bucket/ckpt", "storage": {"size": "1Gi"}}),
    ),
    Case(
        "checkpoint-s3",
        "cel",
        "spec.checkpoint",
        "checkpoint.uri: s3:// and hdfs:// are not built into TensorFlow 2.21",
        _set("spec.checkpoint", {"uri": "s3://bucket/ckpt"}),
    ),
    Case(
        "checkpoint-hdfs",
        "cel",
        "spec.checkpoint",
        "checkpoint.uri: s3:// and hdfs:// are not built into TensorFlow 2.21",
        _set("spec.checkpoint", {"uri": "hdfs://namenode/ckpt"}),
    ),
    Case(
        "checkpoint-relative-uri",
        "cel",
        "spec.checkpoint",
        "checkpoint.uri must be gs://bucket/prefix or an absolute path",
        _set("spec.checkpoint", {"uri": "ckpt"}),
    ),
    Case(
        "checkpoint-uri-in-tmp",
        "cel",
        "spec.checkpoint",
        "checkpoint.uri: /tmp is each replica's own",
        _set("spec.checkpoint", {"uri": "/tmp/ckpt"}),
    ),
    Case(
        "data-s3",
        "cel",
        "spec",
        "data.files.pattern: s3:// and hdfs:// are not built into TensorFlow 2.21",
        _set("spec.data", {"source": "files", "files": {"pattern": "s3://bucket/train-*"}}),
    ),
    Case(
        "ps-for-mirrored",
        "cel",
        "spec",
        "replicas.ps is only for strategy ParameterServer",
        _set("spec.strategy", "MultiWorkerMirrored"),
    ),
    Case(
        "ps-strategy-no-chief",
        "cel",
        "spec",
        "exactly one chief",
        _set("spec.replicas.chief.replicas", 0),
    ),
    Case(
        # The API server admits it (CEL cannot see into the template's Pod spec); the
        # template runs etj's trainer (no command, no image), which needs its coordinator.
        "ps-strategy-no-chief-trainer-template",
        "plan",
        "spec",
        "exactly one chief",
        _both(
            _set("spec.replicas.chief.replicas", 0),
            _set("spec.replicas.worker.template", {"metadata": {"labels": {"team": "ads"}}}),
        ),
    ),
    Case(
        "all-workers-with-chief",
        "cel",
        "spec",
        "successPolicy AllWorkers is for a job without a chief",
        _set("spec.runPolicy.successPolicy", "AllWorkers"),
    ),
    Case(
        "success-policy-unknown",
        "schema",
        "spec.runPolicy.successPolicy",
        "'Chief' or 'AllWorkers'",
        _set("spec.runPolicy.successPolicy", "AnyWorker"),
    ),
    Case(
        "ps-strategy-no-workers",
        "cel",
        "spec",
        "at least one worker",
        _set("spec.replicas.worker.replicas", 0),
    ),
    Case(
        "feature-unknown-table",
        "cel",
        "spec.model",
        "must be one of model.embeddings",
        _set("spec.model.features", [*FEATURES[:2], {**FEATURES[2], "table": "nope"}]),
    ),
    Case(
        "feature-no-label",
        "cel",
        "spec.model",
        "exactly one feature of kind label",
        _set("spec.model.features", FEATURES[1:]),
    ),
    Case(
        "table-unused-by-features",
        "cel",
        "spec.model",
        "must be used by a categorical feature",
        _set("spec.model.features", FEATURES[:2]),
    ),
    Case(
        "categorical-without-table",
        "cel",
        "spec.model.features[1]",
        "names its table",
        _set("spec.model.features", [FEATURES[0], {"name": "C1", "kind": "categorical"}]),
    ),
    Case(
        "standardize-without-std",
        "cel",
        "spec.model.features[3]",
        "standardize needs mean and std",
        _set(
            "spec.model.features",
            [*FEATURES, {"name": "I1", "kind": "dense", "transform": "standardize", "mean": 1}],
        ),
    ),
    Case(
        "label-threshold-and-positive",
        "cel",
        "spec.model.features[0]",
        "a threshold or positive values, not both",
        _set(
            "spec.model.features",
            [{**FEATURES[0], "threshold": 4, "positive": ["5"]}, *FEATURES[1:]],
        ),
    ),
    Case(
        "label-negative-without-positive",
        "cel",
        "spec.model.features[0]",
        "negative values need positive ones",
        _set("spec.model.features", [{**FEATURES[0], "negative": ["no"]}, *FEATURES[1:]]),
    ),
    Case(
        "label-value-positive-and-negative",
        "cel",
        "spec.model.features[0]",
        "cannot be both positive and negative",
        _set(
            "spec.model.features",
            [{**FEATURES[0], "positive": ["yes"], "negative": ["yes", "no"]}, *FEATURES[1:]],
        ),
    ),
    Case(
        "positive-on-a-categorical",
        "cel",
        "spec.model.features[1]",
        "positive and negative are only for the label",
        _set("spec.model.features", [FEATURES[0], {**FEATURES[1], "positive": ["x"]}, FEATURES[2]]),
    ),
    Case(
        "positive-label-of-floats",
        "cel",
        "spec.model.features[0]",
        "a label with positive values reads text",
        _set(
            "spec.model.features",
            [{**FEATURES[0], "positive": ["1"], "valueType": "float"}, *FEATURES[1:]],
        ),
    ),
    Case(
        "positive-numbers-unquoted",
        "schema",
        "spec.model.features[0].positive[0]",
        "valid string",
        _set("spec.model.features", [{**FEATURES[0], "positive": [5]}, *FEATURES[1:]]),
    ),
    Case(
        "max-length-without-delimiter",
        "cel",
        "spec.model.features[1]",
        "maxLength needs a delimiter",
        _set("spec.model.features", [FEATURES[0], {**FEATURES[1], "maxLength": 4}, FEATURES[2]]),
    ),
    Case(
        "no-header-no-columns",
        "cel",
        "spec.data.files",
        "columns must name the columns",
        _set("spec.data", {"source": "files", "files": {"pattern": "/d/*", "header": False}}),
    ),
    Case(
        "null-values-on-tfrecord",
        "cel",
        "spec.data.files",
        "data.files.nullValues reads csv or parquet files",
        _set("spec.data", {"source": "files", "files": {"pattern": "/d/*", "nullValues": ["NA"]}}),
    ),
    Case(
        "null-values-empty-token",
        "schema",
        "spec.data.files.nullValues[0]",
        "at least 1 character",
        _set(
            "spec.data",
            {"source": "files", "files": {"pattern": "/d/*", "format": "csv", "nullValues": [""]}},
        ),
    ),
    Case(
        "epochs-on-synthetic",
        "cel",
        "spec",
        "training.epochs needs data.source files",
        _set("spec.training.epochs", 2),
    ),
    # ---- following files (data.files.follow) -----------------------------------------------
    Case(
        "follow-poll-zero",
        "schema",
        "spec.data.files.follow.pollSeconds",
        "greater than or equal to 1",
        _set(
            "spec.data",
            {"source": "files", "files": {"pattern": "/d/*", "follow": {"pollSeconds": 0}}},
        ),
    ),
    Case(
        "follow-idle-zero",
        "schema",
        "spec.data.files.follow.stopAfterIdleSeconds",
        "greater than or equal to 1",
        _set(
            "spec.data",
            {
                "source": "files",
                "files": {"pattern": "/d/*", "follow": {"stopAfterIdleSeconds": 0}},
            },
        ),
    ),
    Case(
        "follow-parquet",
        "cel",
        "spec.data.files",
        "data.files.follow reads tfrecord or csv files",
        _set(
            "spec.data",
            {"source": "files", "files": {"pattern": "/d/*", "format": "parquet", "follow": {}}},
        ),
    ),
    Case(
        "follow-with-epochs",
        "cel",
        "spec",
        "training.epochs cannot be used with data.files.follow",
        _both(
            _set("spec.data", {"source": "files", "files": {"pattern": "/d/*", "follow": {}}}),
            _set("spec.training.epochs", 2),
        ),
    ),
    Case(
        "follow-mirrored-two-workers",
        "cel",
        "spec",
        "data.files.follow under MultiWorkerMirrored takes one training process",
        _both(
            _set("spec.strategy", "MultiWorkerMirrored"),
            _delete("spec.replicas.ps"),
            _delete("spec.replicas.chief"),
            _set("spec.data", {"source": "files", "files": {"pattern": "/d/*", "follow": {}}}),
        ),
    ),
    # ---- Kafka (data.kafka) -----------------------------------------------------------------
    Case(
        "kafka-and-files",
        "cel",
        "spec.data",
        "data.kafka and data.files are exclusive",
        _both(
            _set("spec.model.features", KAFKA_FEATURES),
            _set("spec.data", {**KAFKA_DATA, "files": {"pattern": "/d/*"}}),
        ),
    ),
    Case(
        "kafka-without-kafka",
        "cel",
        "spec.data",
        "data.kafka is required when source is kafka",
        _set("spec.data", {"source": "kafka"}),
    ),
    Case(
        "kafka-without-source",
        "cel",
        "spec.data",
        "data.kafka needs data.source kafka",
        _both(
            _set("spec.model.features", KAFKA_FEATURES),
            _set("spec.data", {"kafka": KAFKA_DATA["kafka"]}),
        ),
    ),
    Case(
        "kafka-without-features",
        "cel",
        "spec",
        "data.kafka needs model.features",
        _set("spec.data", KAFKA_DATA),
    ),
    Case(
        "kafka-mirrored-two-workers",
        "cel",
        "spec",
        "data.kafka under MultiWorkerMirrored takes one training process",
        _both(
            _set("spec.strategy", "MultiWorkerMirrored"),
            _delete("spec.replicas.ps"),
            _delete("spec.replicas.chief"),
            _set("spec.model.features", KAFKA_FEATURES),
            _set("spec.data", KAFKA_DATA),
        ),
    ),
    Case(
        "kafka-topic-bad-name",
        "schema",
        "spec.data.kafka.topic",
        "should match pattern",
        _set("spec.data", {"source": "kafka", "kafka": {**KAFKA_DATA["kafka"], "topic": "a b"}}),
    ),
    Case(
        "kafka-servers-no-port",
        "schema",
        "spec.data.kafka.bootstrapServers",
        "should match pattern",
        _set(
            "spec.data",
            {"source": "kafka", "kafka": {**KAFKA_DATA["kafka"], "bootstrapServers": "kafka"}},
        ),
    ),
    Case(
        "feature-kind-unknown",
        "schema",
        "spec.model.features[0].kind",
        "'label', 'dense' or 'categorical'",
        _set("spec.model.features", [{"name": "y", "kind": "target"}]),
    ),
    Case(
        "delimiter-two-chars",
        "schema",
        "spec.data.files.delimiter",
        "at most 1 character",
        _set("spec.data", {"source": "files", "files": {"pattern": "/d/*", "delimiter": "||"}}),
    ),
    Case(
        "files-without-files",
        "cel",
        "spec.data",
        "data.files is required",
        _set("spec.data", {"source": "files"}),
    ),
    Case(
        "no-chief-no-workers",
        "cel",
        "spec.replicas",
        "a chief or at least one worker",
        _both(
            _set("spec.strategy", "MultiWorkerMirrored"),
            _delete("spec.replicas.ps"),
            _set("spec.replicas.chief.replicas", 0),
            _set("spec.replicas.worker.replicas", 0),
        ),
    ),
    Case("name-too-long", "cel", "metadata.name", "at most 45", _set("metadata.name", "a" * 50)),
    # ---- plan: only code can tell ----------------------------------------------------------
    Case(
        "table-fits-no-ps",
        "plan",
        "spec.replicas.ps",
        "fit no set of up to 2 ps",
        _both(
            _set(f"{E0}.vocabularySize", 50_000_000),
            _set(f"{E0}.dimension", 64),
            _set(
                "spec.replicas.ps",
                {"replicas": "auto", "maxReplicas": 2, "resources": {"limits": {"memory": "2Gi"}}},
            ),
        ),
    ),
    Case(
        "fixed-ps-too-small",
        "plan",
        "spec.replicas.ps",
        "would need",
        _both(_set(f"{E0}.vocabularySize", 20_000_000), _set(f"{E0}.dimension", 64)),
    ),
    Case(
        "ps-budget-below-base",
        "plan",
        "spec.replicas.ps.resources",
        "empty ps",
        _set("spec.replicas.ps.resources.limits.memory", "256Mi"),
    ),
    Case(
        "follow-auto-chose-mirrored",
        "plan",
        "spec.data.files.follow",
        "strategy Auto chose MultiWorkerMirrored",
        _both(
            _set("spec.strategy", "Auto"),
            _delete("spec.replicas.ps"),
            _delete("spec.replicas.chief"),
            _set("spec.data", {"source": "files", "files": {"pattern": "/d/*", "follow": {}}}),
        ),
    ),
    # ---- plan: checkpoints and data several pods cannot share (etj.api.storage) -----------
    Case(
        "checkpoint-emptydir-default",
        "plan",
        "spec",
        "the default emptyDir is each pod's own: set checkpoint.storage",
        _delete("spec.checkpoint"),
    ),
    Case(
        "checkpoint-hostpath",
        "plan",
        "spec.checkpoint.volume",
        "a hostPath is each node's own directory, and this job's 5 pods",
        _set("spec.checkpoint", {"volume": {"hostPath": {"path": "/ckpt"}}}),
    ),
    Case(
        "data-emptydir",
        "plan",
        "spec.data.files.volume",
        "an emptyDir is each pod's own",
        _set(
            "spec.data",
            {"source": "files", "files": {"pattern": "/data/*", "volume": {"emptyDir": {}}}},
        ),
    ),
    Case(
        "row-over-max-shard",
        "plan",
        "spec.sharding.maxShardBytes",
        "one row of table",
        _both(_set(f"{E0}.dimension", 4096), _set("spec.sharding", {"maxShardBytes": "16Ki"})),
    ),
    # ---- plan: found by test_spec_fuzz (the schema accepts them; the planner refuses) ------
    Case(
        "table-2-to-the-40-by-8192",
        "plan",
        F0,
        "PlanTooLarge: table 'user_id'",
        _both(_set(f"{E0}.vocabularySize", 2**40), _set(f"{E0}.dimension", 8192)),
    ),
    Case(
        "too-many-shards-in-all",
        "plan",
        "spec.sharding.maxShardBytes",
        "PlanTooLarge: the tables need",
        _both(
            _set(
                "spec.model.embeddings",
                [
                    {"name": f"t{i}", "vocabularySize": 10_000_000, "dimension": 64}
                    for i in range(20)
                ],
            ),
            _set("spec.sharding", {"maxShardBytes": "16Mi"}),
        ),
    ),
    Case(
        "quantity-too-large",
        "plan",
        "spec.replicas.ps.resources.limits.memory",
        "larger than any Kubernetes quantity",
        _set("spec.replicas.ps.resources.limits.memory", "1e999999999"),
    ),
    Case(
        "mirrored-over-worker-memory",
        "plan",
        "spec.replicas.worker.resources",
        "every worker holds all tables",
        _both(
            _set("spec.strategy", "MultiWorkerMirrored"),
            _delete("spec.replicas.ps"),
            _set(f"{E0}.vocabularySize", 10_000_000),
            _set("spec.replicas.worker.resources", {"limits": {"memory": "1Gi"}}),
        ),
    ),
    # A template is free-form in the CRD (a PodSpec): what etj owns in it is refused by
    # the operator's code, which the API server does not run.
    Case(
        "template-sets-tf-config",
        "plan",
        "spec.replicas.worker.template",
        "TF_CONFIG is set by etj",
        _set(
            "spec.replicas.worker.template",
            {"spec": {"containers": [{"name": "tensorflow", "env": [{"name": "TF_CONFIG"}]}]}},
        ),
    ),
    Case(
        "template-sets-restart-policy",
        "plan",
        "spec.replicas.ps.template",
        "spec.restartPolicy may not be set",
        _set("spec.replicas.ps.template", {"spec": {"restartPolicy": "Always"}}),
    ),
    # ---- disk tables (model.embeddings[].storage.disk) -----------------------------------
    Case(
        "disk-two-cache-sizes",
        "cel",
        f"{F0}.storage.disk",
        "takes one of cacheRows or cacheBytes",
        _set(f"{E0}.storage", {"disk": {"cacheRows": 10, "cacheBytes": "1Mi"}}),
    ),
    Case(
        "disk-no-cache-size",
        "cel",
        f"{F0}.storage.disk",
        "takes one of cacheRows or cacheBytes",
        _set(f"{E0}.storage", {"disk": {"path": "/ssd"}}),
    ),
    Case(
        "disk-under-mirrored",
        "cel",
        "spec",
        "storage.disk is for strategy ParameterServer",
        _both(
            _set(f"{E0}.storage", {"disk": {"cacheRows": 10}}),
            _set("spec.strategy", "MultiWorkerMirrored"),
            _delete("spec.replicas.ps"),
            _delete("spec.replicas.chief"),
        ),
    ),
    Case(
        "disk-dynamic",
        "cel",
        "spec",
        "storage.disk cannot be used with dynamic",
        _both(
            _set(f"{E0}.storage", {"disk": {"cacheRows": 10}}),
            _set(f"{E0}.dynamic", {"capacity": 1000}),
        ),
    ),
    Case(
        "disk-bfloat16",
        "cel",
        "spec",
        "a bfloat16 or float16 table cannot be on disk",
        _both(
            _set(f"{E0}.storage", {"disk": {"cacheRows": 10}}),
            _set(f"{E0}.dtype", "bfloat16"),
        ),
    ),
    Case(
        "disk-adam",
        "cel",
        "spec",
        "sgd, adagrad or rowwiseAdagrad",
        _both(
            _set(f"{E0}.storage", {"disk": {"cacheRows": 10}}),
            _set("spec.training.optimizer", "adam"),
        ),
    ),
    # ---- dynamic tables (model.embeddings[].dynamic) -------------------------------------
    Case(
        "dynamic-capacity-zero",
        "schema",
        f"{F0}.dynamic.capacity",
        "greater than or equal to 1",
        _set(f"{E0}.dynamic", {"capacity": 0}),
    ),
    Case(
        "dynamic-admit-after-zero",
        "schema",
        f"{F0}.dynamic.admitAfter",
        "greater than or equal to 1",
        _set(f"{E0}.dynamic", {"capacity": 1000, "admitAfter": 0}),
    ),
    Case(
        "dynamic-no-capacity",
        "schema",
        f"{F0}.dynamic.capacity",
        "required",
        _set(f"{E0}.dynamic", {"admitAfter": 2}),
    ),
    Case(
        "dynamic-with-vocabulary-file",
        "cel",
        "spec.model",
        "a feature of a dynamic table has no vocabularyFile",
        _both(
            _set(f"{E0}.dynamic", {"capacity": 1000}),
            _set(
                "spec.model.features",
                [*FEATURES[:1], {**FEATURES[1], "vocabularyFile": "/v.txt"}, FEATURES[2]],
            ),
        ),
    ),
    Case(
        "dynamic-mixed-value-types",
        "plan",
        "spec.model",
        "are all strings or all ints",
        _both(
            _set(f"{E0}.dynamic", {"capacity": 1000}),
            _set(
                "spec.model.features",
                [
                    *FEATURES,
                    {
                        "name": "user2",
                        "kind": "categorical",
                        "table": "user_id",
                        "valueType": "int",
                    },
                ],
            ),
        ),
    ),
    Case(
        "dynamic-capacity-does-not-fit",
        "plan",
        f"{F0}.dynamic.capacity",
        "lower capacity",
        _set(f"{E0}.dynamic", {"capacity": 200_000_000}),
    ),
    # ---- warmStart ----------------------------------------------------------------------
    Case(
        "warm-start-two-sources",
        "cel",
        "spec.warmStart",
        "set exactly one of fromJob, selector and checkpoint",
        _set("spec.warmStart", {"fromJob": "day-1", "checkpoint": {"uri": "gs://b/p"}}),
    ),
    Case(
        "warm-start-uri-and-claim",
        "cel",
        "spec.warmStart.checkpoint",
        "set exactly one of uri and claim",
        _set("spec.warmStart", {"checkpoint": {"uri": "gs://b/p", "claim": "old"}}),
    ),
    Case(
        "warm-start-s3",
        "cel",
        "spec.warmStart.checkpoint",
        "must be gs://bucket/path or an absolute path",
        _set("spec.warmStart", {"checkpoint": {"uri": "s3://b/p"}}),
    ),
    Case(
        "warm-start-fresh-table-unknown",
        "cel",
        "spec",
        "warmStart.freshTables",
        _set("spec.warmStart", {"fromJob": "day-1", "freshTables": ["ad_id"]}),
    ),
    Case(
        "warm-start-step-count",
        "schema",
        "spec.warmStart.stepCount",
        "Restart",
        _set("spec.warmStart", {"fromJob": "day-1", "stepCount": "restart"}),
    ),
]

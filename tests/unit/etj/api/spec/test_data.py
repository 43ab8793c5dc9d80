"""etj.api.spec.data: synthetic or file input, and the rules of delimited files."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from etj.api.spec import DataSpec, FileData


def test_the_default_is_synthetic_data():
    d = DataSpec()
    assert d.source == "synthetic" and d.files is None and d.max_bad_records == 0


def test_a_files_source_needs_its_files_and_validation_needs_them_too():
    with pytest.raises(ValidationError, match=r"data\.files is required"):
        DataSpec(source="files")
    with pytest.raises(ValidationError, match=r"data\.validation needs data\.files"):
        DataSpec.model_validate({"validation": {"pattern": "/data/eval-*"}})
    ok = DataSpec.model_validate(
        {
            "source": "files",
            "files": {"pattern": "/data/train-*.csv", "format": "csv"},
            "validation": {"pattern": "/data/eval-*.csv"},
        }
    )
    assert ok.validation is not None and ok.validation.max_examples == 100_000


def test_headerless_csv_names_its_columns():
    with pytest.raises(ValidationError, match="columns must name the columns when header is false"):
        FileData(pattern="/d/*.csv", format="csv", header=False)
    f = FileData(pattern="/d/*.csv", format="csv", header=False, columns=["label", "user"])
    assert f.columns == ["label", "user"]


def test_the_quote_cannot_be_the_delimiter():
    with pytest.raises(ValidationError, match="needs quote: none"):
        FileData(pattern="/d/*.csv", format="csv", delimiter='"')
    assert FileData(pattern="/d/*.csv", format="csv", delimiter='"', quote="none").quote == "none"


def test_null_values_are_tokens_of_csv_or_parquet():
    f = FileData.model_validate({"pattern": "/d/*.csv", "format": "csv", "nullValues": ["NA"]})
    assert f.null_values == ["NA"] and f.to_wire()["nullValues"] == ["NA"]
    assert FileData(pattern="/d/*", format="parquet", null_values=["null"]).null_values
    with pytest.raises(ValidationError, match="nullValues reads csv or parquet"):
        FileData(pattern="/d/*.tfrecord", null_values=["NA"])
    with pytest.raises(ValidationError, match="at least 1 character"):
        FileData(pattern="/d/*.csv", format="csv", null_values=[""])


@pytest.mark.parametrize(
    "bad",
    [
        {"pattern": ""},
        {"pattern": "/d/*", "delimiter": "||"},
        {"pattern": "/d/*", "format": "json"},
        {"pattern": "/d/*", "compression": "zstd"},
    ],
)
def test_malformed_file_settings_are_refused(bad):
    with pytest.raises(ValidationError):
        FileData.model_validate(bad)


def test_synthetic_settings_are_bounded():
    with pytest.raises(ValidationError):
        DataSpec.model_validate({"synthetic": {"zipfExponent": 1.0}})
    assert DataSpec.model_validate({"synthetic": {"zipfExponent": 1.5}}).synthetic.seed == 0


def test_following_files_has_a_poll_interval_and_no_idle_stop_by_default():
    f = FileData.model_validate({"pattern": "/d/dt=*/part-*.csv", "format": "csv", "follow": {}})
    assert f.follow is not None
    assert (f.follow.poll_seconds, f.follow.stop_after_idle_seconds) == (60, None)
    g = FileData.model_validate(
        {"pattern": "/d/*", "follow": {"pollSeconds": 5, "stopAfterIdleSeconds": 600}}
    )
    assert g.follow is not None and g.follow.stop_after_idle_seconds == 600
    assert FileData(pattern="/d/*").follow is None


def test_following_parquet_files_is_refused():
    with pytest.raises(ValidationError, match="follow reads tfrecord or csv"):
        FileData.model_validate({"pattern": "/d/*", "format": "parquet", "follow": {}})


@pytest.mark.parametrize("bad", [{"pollSeconds": 0}, {"stopAfterIdleSeconds": 0}, {"every": 3}])
def test_malformed_follow_settings_are_refused(bad):
    with pytest.raises(ValidationError):
        FileData.model_validate({"pattern": "/d/*", "follow": bad})


KAFKA = {"bootstrapServers": "kafka-0.kafka:9092,10.0.0.7:9094", "topic": "clicks.v2"}


def test_a_kafka_source_takes_brokers_a_topic_and_delimited_rows():
    d = DataSpec.model_validate({"source": "kafka", "kafka": KAFKA})
    assert d.kafka is not None and d.files is None
    k = d.kafka
    assert (k.bootstrap_servers, k.topic) == (KAFKA["bootstrapServers"], "clicks.v2")
    assert (k.format, k.delimiter, k.quote, k.columns) == ("csv", ",", '"', None)
    assert k.consumer_group is None and k.stop_after_idle_seconds is None


@pytest.mark.parametrize(
    "servers", ["kafka", "kafka:", "a:9092,", "a:9092 b:9092", ":9092", "a:123456"]
)
def test_bootstrap_servers_are_host_port_pairs(servers: str):
    with pytest.raises(ValidationError, match=r"bootstrap_servers|bootstrapServers"):
        DataSpec.model_validate(
            {"source": "kafka", "kafka": {**KAFKA, "bootstrapServers": servers}}
        )


@pytest.mark.parametrize("topic", ["", "a b", "a/b", "x" * 250])
def test_a_topic_name_follows_kafkas_rule(topic: str):
    with pytest.raises(ValidationError, match="topic"):
        DataSpec.model_validate({"source": "kafka", "kafka": {**KAFKA, "topic": topic}})


def test_kafka_is_one_source_exclusive_with_files_and_named_by_source():
    with pytest.raises(ValidationError, match=r"data\.kafka and data\.files are exclusive"):
        DataSpec.model_validate(
            {"source": "kafka", "kafka": KAFKA, "files": {"pattern": "/d/*.csv"}}
        )
    with pytest.raises(ValidationError, match=r"data\.kafka is required when source is kafka"):
        DataSpec(source="kafka")
    with pytest.raises(ValidationError, match=r"data\.kafka needs data\.source kafka"):
        DataSpec.model_validate({"kafka": KAFKA})
    with pytest.raises(ValidationError, match=r"data\.validation needs data\.files"):
        DataSpec.model_validate(
            {"source": "kafka", "kafka": KAFKA, "validation": {"pattern": "/d/eval-*"}}
        )


def test_a_kafka_job_runs_without_steps_unless_it_gives_them():
    from etj.api.spec import TrainingSpec, step_limit

    kafka = DataSpec.model_validate({"source": "kafka", "kafka": KAFKA})
    assert step_limit(TrainingSpec(), kafka) is None
    assert step_limit(TrainingSpec(steps=500), kafka) == 500
    assert step_limit(TrainingSpec(), DataSpec()) is not None

"""A job that trains from a Kafka topic (etj_trainer.task.kafka) on real trainer processes
and a real broker: killed mid-stream and restarted, it resumes from the offsets of the
checkpoint it restored (read from its progress lines), trains every message produced (the
records its last checkpoint's tables learned from equal the messages produced), trains
again at most ``reread_bound`` messages, and ends when the topic stays quiet."""

from __future__ import annotations

from typing import Any

import pytest
from harness import LocalJob, job_spec, trainer_config, wait_for

from etj_trainer.task.kafka import chunk_messages, group_id, reread_bound

BATCH = 64
PARTITIONS = 2
MODEL = {
    "embeddings": [
        {"name": "user_id", "vocabularySize": 5000, "dimension": 8},
        {"name": "item_id", "vocabularySize": 2000, "dimension": 8},
    ],
    "features": [
        {"name": "label", "kind": "label"},
        {"name": "price", "kind": "dense"},
        {"name": "user", "kind": "categorical", "table": "user_id"},
        {"name": "item", "kind": "categorical", "table": "item_id"},
    ],
    "hiddenUnits": [16],
}


class Stream:
    """Produces rows of MODEL's features to a topic, round robin over its partitions."""

    def __init__(self, kafka: Any, topic: str):
        self.kafka, self.topic = kafka, topic
        kafka.create_topic(topic, partitions=PARTITIONS)
        self.produced = 0

    def produce(self, n: int) -> None:
        rows = []
        for i in range(self.produced, self.produced + n):
            label = (i * 7919) % 3 == 0
            rows.append((i % PARTITIONS, f"{int(label)},{i % 97 / 10},u{i % 4999},i{i % 1999}\n"))
        self.kafka.produce(self.topic, [(p, r.encode()) for p, r in rows])
        self.produced += n

    def per_partition(self) -> dict[str, int]:
        return {str(p): len(range(p, self.produced, PARTITIONS)) for p in range(PARTITIONS)}


def _spec(kafka: Any, topic: str, idle: int, **overrides: Any) -> Any:
    return job_spec(
        model=MODEL,
        data={
            "source": "kafka",
            "kafka": {
                "bootstrapServers": kafka.bootstrap,
                "topic": topic,
                "stopAfterIdleSeconds": idle,
            },
        },
        training={
            "batchSizePerReplica": BATCH,
            "optimizer": "adagrad",
            "learningRate": 0.1,
            "stepsPerExecution": 10,
        },
        **overrides,
    )


def _events(job: LocalJob, name: str, start: int) -> list[dict[str, Any]]:
    return [e for e in job.events(start=start) if e["event"] == name]


def _trained(job: LocalJob, start: int) -> int:
    """The records the chief of start ``start`` reported trained (its last round)."""
    rounds = _events(job, "consumed", start)
    return int(rounds[-1]["records"]) if rounds else 0


@pytest.mark.timeout(3600)
def test_a_one_process_job_killed_mid_stream_resumes_from_the_checkpoints_offsets(
    tmp_path: Any, kafka: Any
) -> None:
    mirrored = {"strategy": "MultiWorkerMirrored", "replicas": {"worker": {"replicas": 1}}}
    stream = Stream(kafka, "one-process")
    spec = _spec(kafka, "one-process", idle=8, **mirrored)
    assert spec.training.steps is None
    ckpt = tmp_path / "ckpt"
    config = trainer_config(spec, checkpoint_dir=ckpt, every_steps=20, keep=50)
    bound = reread_bound(config, 1)
    assert bound == 19 * BATCH + 2 * chunk_messages(config) and group_id(config) == "etj-test"
    stream.produce(4000)  # some before it starts
    with LocalJob(config, tmp_path / "job", workers=1, ps=0, chief=False) as job:
        job.start_all()

        def saved_some() -> bool:
            job.check_chief_alive()
            return any(e["records"] > 0 for e in _events(job, "positionSaved", 0))

        wait_for(saved_some, 900, "a checkpoint of trained messages")
        # More while it trains, then the kill, as soon as it has taken some of them.
        at = _trained(job, 0)
        stream.produce(30000)
        wait_for(lambda: _trained(job, 0) > at, 600, f"records past {at}")
        job.kill("worker", 0)
        killed_at = _trained(job, 0)
        stream.produce(4000)  # while it is down
        job.start("worker", 0)
        done = job.wait_done(1800)
        idle = job.last("idle")
        assert idle is not None and idle["seconds"] >= 8
    # Offsets restored from the checkpoint: the last ones its first run saved.
    saved = _events(job, "positionSaved", 0)[-1]
    restored = _events(job, "restored", 1)[0]
    assert restored["offsets"] == saved["offsets"] and restored["records"] == saved["records"]
    assert _events(job, "start", 1)[0]["offsets"] == saved["offsets"]
    # What the first run trained past its last checkpoint is trained again: within the bound.
    reread = killed_at - restored["records"]
    print(f"killed at {killed_at} records, restored {restored['records']}: {reread} re-read")
    assert 0 <= reread <= bound
    # Every message produced trained into the last checkpoint, each once: records trained
    # over both runs >= produced.
    final = _events(job, "followed", 1)[-1]
    assert final["offsets"] == stream.per_partition()
    assert final["records"] == stream.produced == 38000
    assert killed_at + (final["records"] - restored["records"]) >= stream.produced
    assert done["step"] == final["step"]
    # The leader's last progress line carries the records (status.progress.input).
    progress = job.last("progress")
    assert progress is not None and progress["input"]["records"] == stream.produced

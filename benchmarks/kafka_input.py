"""Kafka input vs the same rows from files: examples/s into training, side by side.

The same ``--rows`` rows of a small feature schema (a label, a dense column, two hashed
ids) are produced to a topic of a real local broker (``etj_testcluster.kafka``, 2
partitions) and written to one CSV file. In one process, alternating, best of
``--repeats``:

1. ``kafka``: the Kafka source as a job runs it (``etj_trainer.data.kafka``,
   ``etj_trainer.task.kafka``): the reader takes chunks of ``batch x stepsPerExecution``
   messages and each chunk is trained by ``chunk_function`` (rows handed in as a string
   tensor, parsed and trained in its graph), every partition read from its start;
2. ``files``: the same rows read by the file pipeline of a non-following job
   (``feature_dataset`` over the CSV file) and trained in chunks of ``stepsPerExecution``
   steps by ``train_chunk``, the same number of steps;
3. ``consume``: the reader alone (messages/s the chief takes from the broker, no training):
   the bridge's ceiling on this machine.

Tracing is left out of every timing. Not a test: prints numbers, asserts nothing.
``python benchmarks/kafka_input.py [--rows 200000] [--repeats 3]``.
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
for _p in (ROOT / "operator", ROOT / "trainer_image", ROOT / "tests" / "cluster"):
    sys.path.insert(0, str(_p))
# Last: its etj_trainer/ (the trainer's tests) must not shadow the trainer; for `harness`.
sys.path.append(str(ROOT / "tests" / "trainer"))
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")

import tensorflow as tf  # noqa: E402
from harness import job_spec, trainer_config  # noqa: E402  (tests/trainer: the tests' config)

from etj.api.trainer import TrainerConfig  # noqa: E402
from etj_testcluster.kafka import CLICK_HEADER, ClickStream, LocalKafka, click_model  # noqa: E402
from etj_trainer.data.kafka import TopicReader  # noqa: E402
from etj_trainer.data.pipeline import feature_dataset  # noqa: E402
from etj_trainer.task.kafka import chunk_args, chunk_function, chunk_messages  # noqa: E402
from etj_trainer.task.state import TrainingState  # noqa: E402

BATCH = 512
SPE = 20
PARTITIONS = 2
TOPIC = "bench"
USERS, ITEMS = 99_991, 19_997
MODEL = click_model(100_000, 20_000, 16, [64, 32])


def config(data: dict) -> TrainerConfig:
    training = {
        "batchSizePerReplica": BATCH,
        "stepsPerExecution": SPE,
        "optimizer": "adagrad",
        "learningRate": 0.05,
        **({} if data["source"] == "kafka" else {"steps": 10**6}),
    }
    spec = job_spec(
        strategy="MultiWorkerMirrored",
        replicas={"worker": {"replicas": 1}},
        model=MODEL,
        data=data,
        training=training,
        sharding={},
    )
    return trainer_config(spec)


def kafka_run(cfg: TrainerConfig, n: int) -> float:
    assert cfg.data.kafka is not None
    state = TrainingState(cfg, tf.distribute.get_strategy())
    fn = chunk_function(cfg, state)
    fn.get_concrete_function()
    reader = TopicReader(cfg.data.kafka, "etj-bench")
    reader.seek({})
    first = reader.take(chunk_messages(cfg), 60.0)  # a warm-up chunk (its own rows)
    fn(*chunk_args(TOPIC, first))
    done, began = len(first), time.perf_counter()
    while done < n:
        chunk = reader.take(chunk_messages(cfg), 5.0)
        if not chunk:
            break
        fn(*chunk_args(TOPIC, chunk)).numpy()
        done += len(chunk)
    seconds = time.perf_counter() - began
    reader.close()
    return (done - len(first)) / seconds


def files_run(cfg: TrainerConfig, n: int) -> float:
    state = TrainingState(cfg, tf.distribute.get_strategy())
    ds = feature_dataset(cfg.model, cfg.data, BATCH, repeat=True)
    it = iter(ds)
    state.train_chunk(it, tf.constant(SPE, tf.int64))[0].numpy()  # traced, warm
    chunks = math.ceil((n - BATCH * SPE) / (BATCH * SPE))
    began = time.perf_counter()
    for _ in range(chunks):
        state.train_chunk(it, tf.constant(SPE, tf.int64))[0].numpy()
    return chunks * BATCH * SPE / (time.perf_counter() - began)


def consume_run(cfg: TrainerConfig, n: int) -> float:
    assert cfg.data.kafka is not None
    reader = TopicReader(cfg.data.kafka, "etj-bench-consume")
    reader.seek({})
    reader.take(1000, 60.0)
    done, began = 0, time.perf_counter()
    while done < n - 1000:
        chunk = reader.take(chunk_messages(cfg), 5.0)
        if not chunk:
            break
        done += len(chunk)
    seconds = time.perf_counter() - began
    reader.close()
    return done / seconds


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=200_000)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    with (
        tempfile.TemporaryDirectory(prefix="etj-kafka-bench-") as tmp,
        LocalKafka(Path(tmp) / "kafka") as broker,
    ):
        stream = ClickStream(broker, TOPIC, PARTITIONS, users=USERS, items=ITEMS)
        stream.produce(args.rows)
        path = Path(tmp) / "rows.csv"
        lines = stream.rows(0, args.rows)
        path.write_text(CLICK_HEADER + "\n" + "\n".join(lines) + "\n")
        kafka_cfg = config(
            {"source": "kafka", "kafka": {"bootstrapServers": broker.bootstrap, "topic": TOPIC}}
        )
        files_cfg = config({"source": "files", "files": {"pattern": str(path), "format": "csv"}})
        best = {"kafka": 0.0, "files": 0.0, "consume": 0.0}
        for r in range(args.repeats):
            for name, run, cfg in (
                ("kafka", kafka_run, kafka_cfg),
                ("files", files_run, files_cfg),
                ("consume", consume_run, kafka_cfg),
            ):
                eps = run(cfg, args.rows)
                best[name] = max(best[name], eps)
                print(f"run {r + 1} {name}: {eps:,.0f} examples/s", flush=True)
    print(
        f"best of {args.repeats}: kafka {best['kafka']:,.0f}, files {best['files']:,.0f} "
        f"examples/s into training: kafka/files {best['kafka'] / best['files']:.2f}; "
        f"the reader alone {best['consume']:,.0f} messages/s; load {os.getloadavg()[0]:.1f}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())

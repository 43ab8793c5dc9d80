"""A real Apache Kafka broker on 127.0.0.1 for the tests that train from a topic: one
process in KRaft mode, broker and controller combined (no ZooKeeper; Kafka 4 has none).

The jars (``org.apache.kafka:kafka_2.13`` and its runtime dependencies, from Maven Central)
are fetched by ``tests/cluster/build-kafka.sh`` into ``$ETJ_CACHE/kafka/<version>/lib``;
``ensure_fetched()`` runs it (a warm run is a file check), so a fresh clone needs no
separate step. ``LocalKafka.start()`` formats a fresh log directory
(``kafka.tools.StorageTool format``, what ``kafka-storage.sh format`` runs), starts
``kafka.Kafka`` on free ports and waits until the broker answers a metadata request;
``LocalKafka.restart()`` stops it and starts it again on the same log directory and ports
(a broker restart: its topics, messages and offsets kept). ``ClickStream`` is the rows
the Kafka tests and ``benchmarks/kafka_input.py`` produce: one schema (``click_model``);
``SteadyProducer`` writes them from a thread at a steady rate, as a stream does, across a
broker restart.

It must not: listen anywhere but 127.0.0.1, leave a process behind (``stop()``; the broker
also dies with its starter), or write outside its state directory.
"""

from __future__ import annotations

import base64
import os
import shutil
import subprocess
import threading
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from etj.api.features import FeatureKind
from etj.local.launch import Proc, free_port, start
from etj_testcluster.cluster import ClusterError, cache_dir
from etj_testcluster.waiting import WaitTimeout, wait_for

# Keep in step with KAFKA_VERSION in tests/cluster/build-kafka.sh.
KAFKA_VERSION = "4.4.0"
BUILD_SCRIPT = Path(__file__).resolve().parents[1] / "build-kafka.sh"


def kafka_version() -> str:
    return os.environ.get("ETJ_KAFKA_VERSION", KAFKA_VERSION)


def kafka_lib() -> Path:
    """The broker's classpath directory (keep in step with build-kafka.sh)."""
    return cache_dir() / "kafka" / kafka_version() / "lib"


def missing() -> str | None:
    """Why the broker cannot run here, or None."""
    if shutil.which("java") is None:
        return "no java on PATH (Kafka 4 needs Java 17 or newer)"
    if not (kafka_lib() / ".complete").exists():
        return f"no Kafka jars in {kafka_lib()}: run `make kafka` (tests/cluster/build-kafka.sh)"
    return None


def ensure_fetched(timeout: float = 1800.0) -> None:
    """Fetch the jars unless cached (the script holds a lock: parallel callers wait for
    one fetch). The deadline only stops a fetch that hangs."""
    if (kafka_lib() / ".complete").exists() or shutil.which("mvn") is None:
        return
    subprocess.run(
        ["nice", "-n", "10", "bash", str(BUILD_SCRIPT)],
        env={**os.environ, "ETJ_KAFKA_VERSION": kafka_version()},
        check=True,
        timeout=timeout,
    )


def cluster_id(seed: uuid.UUID | None = None) -> str:
    """A KRaft cluster id: a UUID in URL-safe base64 without padding (22 characters), the
    form ``kafka-storage random-uuid`` prints, never starting with "-" (the storage tool
    would read it as an option; Kafka's own random ids draw again, as this does). Pure
    given ``seed`` (one whose id starts with "-" is refused)."""
    while True:
        raw = (seed or uuid.uuid4()).bytes
        text = base64.urlsafe_b64encode(raw).rstrip(b"=").decode()
        if not text.startswith("-"):
            return text
        if seed is not None:
            raise ValueError(f"cluster id {text} starts with '-': the storage tool refuses it")


def server_properties(port: int, controller_port: int, log_dir: Path) -> str:
    """The single node's server.properties: broker and controller in one process, every
    internal topic with one replica (there is one broker), no delay before the first
    consumer group's rebalance. Pure."""
    props = {
        "process.roles": "broker,controller",
        "node.id": "1",
        "controller.quorum.voters": f"1@127.0.0.1:{controller_port}",
        "listeners": f"PLAINTEXT://127.0.0.1:{port},CONTROLLER://127.0.0.1:{controller_port}",
        "advertised.listeners": f"PLAINTEXT://127.0.0.1:{port}",
        "controller.listener.names": "CONTROLLER",
        "inter.broker.listener.name": "PLAINTEXT",
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
        "log.dirs": str(log_dir),
        "offsets.topic.replication.factor": "1",
        "transaction.state.log.replication.factor": "1",
        "transaction.state.log.min.isr": "1",
        "share.coordinator.state.topic.replication.factor": "1",
        "share.coordinator.state.topic.min.isr": "1",
        "group.initial.rebalance.delay.ms": "0",
        "auto.create.topics.enable": "false",
    }
    return "".join(f"{k}={v}\n" for k, v in props.items())


def java_command(main: str, *args: str, heap: str = "512m") -> list[str]:
    """``java`` running one of Kafka's main classes on the cached classpath. Pure."""
    return ["java", f"-Xmx{heap}", "-cp", f"{kafka_lib()}/*", main, *args]


@dataclass
class LocalKafka:
    state_dir: Path
    port: int = 0
    controller_port: int = 0
    proc: Proc | None = None

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def log(self) -> Path:
        return self.state_dir / "kafka.log"

    def start(self, timeout: float = 600.0) -> LocalKafka:
        """Format the storage and start the broker; ready (its metadata answers) within
        ``timeout`` seconds, wide: a JVM on a loaded machine (a load of 230 took more than
        180 s)."""
        ensure_fetched()
        why = missing()
        if why:
            raise ClusterError(why)
        self.state_dir.mkdir(parents=True, exist_ok=True)
        self.port, self.controller_port = free_port(), free_port()
        subprocess.run(
            java_command(
                "kafka.tools.StorageTool", "format", "-t", cluster_id(), "-c", str(self._config())
            ),
            check=True,
            capture_output=True,
            timeout=timeout,
        )
        return self._launch(timeout)

    def restart(self, timeout: float = 600.0) -> LocalKafka:
        """Stop the broker (SIGTERM, then SIGKILL after 30 s) and start it again on the same
        log directory and ports; ready within ``timeout``. Down while it stops and its JVM
        starts (seconds; more under load)."""
        assert self.proc is not None, "restart of a broker never started"
        self.stop()
        return self._launch(timeout)

    def _config(self) -> Path:
        """server.properties for this broker's ports and log directory (written anew)."""
        config = self.state_dir / "server.properties"
        config.write_text(
            server_properties(self.port, self.controller_port, self.state_dir / "data")
        )
        return config

    def _launch(self, timeout: float) -> LocalKafka:
        self.proc = start(
            "kafka",
            java_command("kafka.Kafka", str(self._config())),
            dict(os.environ),
            self.log,
            self.state_dir,
        )
        self._wait_ready(time.monotonic() + timeout)
        return self

    def _wait_ready(self, deadline: float) -> None:
        from confluent_kafka.admin import AdminClient

        admin = AdminClient({"bootstrap.servers": self.bootstrap})

        def ready() -> bool:
            assert self.proc is not None
            if self.proc.popen.poll() is not None:
                raise ClusterError(f"kafka exited with {self.proc.exit_code}\n{self.log_tail()}")
            try:
                return bool(admin.list_topics(timeout=2).brokers)
            except Exception:  # not up yet: KafkaException(_TRANSPORT / _TIMED_OUT)
                return False

        try:
            wait_for(ready, max(0.0, deadline - time.monotonic()), "kafka ready", every=0.3)
        except WaitTimeout:
            raise ClusterError(f"kafka not ready in time\n{self.log_tail()}") from None

    def create_topic(self, name: str, partitions: int, timeout: float = 120.0) -> None:
        from confluent_kafka.admin import AdminClient, NewTopic

        admin = AdminClient({"bootstrap.servers": self.bootstrap})
        futures = admin.create_topics([NewTopic(name, num_partitions=partitions)])
        futures[name].result(timeout=timeout)

    def produce(self, topic: str, rows: list[tuple[int, bytes]], timeout: float = 120.0) -> None:
        """Write ``(partition, value)`` messages and wait until the broker has them all."""
        from confluent_kafka import Producer

        errors: list[Any] = []
        producer = Producer({"bootstrap.servers": self.bootstrap, "linger.ms": 5})
        for partition, value in rows:
            while True:
                try:
                    producer.produce(
                        topic,
                        value,
                        partition=partition,
                        on_delivery=lambda err, _msg: errors.append(err) if err else None,
                    )
                    break
                except BufferError:  # the local queue is full (100,000 messages): drain some
                    producer.poll(1.0)
        left = producer.flush(timeout)
        if left or errors:
            raise ClusterError(f"kafka: {left} messages not delivered, errors {errors[:3]}")

    def log_tail(self, lines: int = 40) -> str:
        if not self.log.exists():
            return "(no kafka log)"
        return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.stop(grace=30)
            self.proc = None

    def __enter__(self) -> LocalKafka:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def click_model(users: int, items: int, dimension: int, hidden: list[int]) -> dict[str, Any]:
    """The model of ``ClickStream``'s rows (clicked,price,user,item), as ``spec.model``. Pure."""
    return {
        "embeddings": [
            {"name": "user_id", "vocabularySize": users, "dimension": dimension},
            {"name": "item_id", "vocabularySize": items, "dimension": dimension},
        ],
        "features": [
            {"name": "clicked", "kind": FeatureKind.LABEL.value},
            {"name": "price", "kind": FeatureKind.DENSE.value},
            {"name": "user", "kind": FeatureKind.CATEGORICAL.value, "table": "user_id"},
            {"name": "item", "kind": FeatureKind.CATEGORICAL.value, "table": "item_id"},
        ],
        "hiddenUnits": hidden,
    }


# ClickStream's csv header, the columns of click_model in order.
CLICK_HEADER = "clicked,price,user,item"


def click_row(i: int, users: int, items: int) -> str:
    """Row ``i`` of a click stream (no newline): a label a third of the time, ids spread
    over ``users`` and ``items``. Pure."""
    return f"{int(i * 7919 % 3 == 0)},{i % 97 / 10},u{i * 31 % users},i{i % items}"


@dataclass
class ClickStream:
    """Produces ``click_row`` rows to a new topic of ``kafka``, round robin over its
    partitions; ``produced`` counts them."""

    kafka: LocalKafka
    topic: str
    partitions: int
    users: int = 5000
    items: int = 2000
    produced: int = 0

    def __post_init__(self) -> None:
        self.kafka.create_topic(self.topic, partitions=self.partitions)

    def rows(self, start: int, n: int) -> list[str]:
        return [click_row(i, self.users, self.items) for i in range(start, start + n)]

    def produce(self, n: int) -> None:
        rows = self.rows(self.produced, n)
        at = self.produced
        self.kafka.produce(
            self.topic, [((at + k) % self.partitions, r.encode()) for k, r in enumerate(rows)]
        )
        self.produced += n

    def per_partition(self) -> dict[str, int]:
        """The next offset of each partition (event form: partition numbers as keys)."""
        return {
            str(p): len(range(p, self.produced, self.partitions)) for p in range(self.partitions)
        }


def end_offsets(total: int, partitions: int) -> dict[str, int]:
    """Each partition's next offset after ``total`` rows round robin from an empty topic
    (event form: partition numbers as keys). Pure."""
    return {str(p): len(range(p, total, partitions)) for p in range(partitions)}


class SteadyProducer(threading.Thread):
    """``total`` ``click_row`` rows to an existing topic at a steady rate (``per_tick``
    rows every ``tick`` seconds), round robin over its ``partitions``, on one idempotent
    producer: across a broker restart it buffers and retries, and the broker keeps each
    row once, in order (``end_offsets`` gives where each partition ends). ``done`` is set
    once every row is delivered or it failed (``failure``, ``errors``); ``stopping`` ends
    it early. ``handed`` and ``delivered`` count rows."""

    def __init__(
        self,
        bootstrap: str,
        topic: str,
        partitions: int,
        total: int,
        users: int,
        items: int,
        per_tick: int,
        tick: float,
    ):
        super().__init__(name=f"producer-{topic}", daemon=True)
        self.bootstrap, self.topic, self.partitions, self.total = (
            bootstrap,
            topic,
            partitions,
            total,
        )
        self.users, self.items, self.per_tick, self.tick = users, items, per_tick, tick
        self.handed = 0
        self.delivered = 0
        self.errors: list[Any] = []
        self.left: int | None = None
        self.failure: BaseException | None = None
        self.done = threading.Event()
        self.stopping = threading.Event()

    def _delivery(self, err: Any, _msg: Any) -> None:
        if err:
            self.errors.append(err)
        else:
            self.delivered += 1

    def run(self) -> None:
        from confluent_kafka import Producer

        try:
            producer = Producer(
                {
                    "bootstrap.servers": self.bootstrap,
                    "enable.idempotence": True,
                    "linger.ms": 5,
                    # Longer than any broker restart of a test: retried, never dropped.
                    "message.timeout.ms": 1_800_000,
                }
            )
            while self.handed < self.total and not self.stopping.is_set():
                end = min(self.handed + self.per_tick, self.total)
                for i in range(self.handed, end):
                    producer.produce(
                        self.topic,
                        click_row(i, self.users, self.items).encode(),
                        partition=i % self.partitions,
                        on_delivery=self._delivery,
                    )
                self.handed = end
                producer.poll(0)
                self.stopping.wait(self.tick)  # the rate, not a condition
            self.left = producer.flush(1800)
        except BaseException as e:  # the test asserts on it (check)
            self.failure = e
        finally:
            self.done.set()

    def check(self) -> None:
        """Raises if producing failed so far."""
        if self.failure is not None or self.errors:
            raise AssertionError(f"producer: {self.failure!r}, errors {self.errors[:3]}")

    def delivered_all(self) -> bool:
        """Every row delivered (raises if producing failed)."""
        self.check()
        return self.done.is_set() and self.left == 0 and self.delivered == self.total

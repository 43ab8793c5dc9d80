"""Fixtures of the trainer tests: real TensorFlow processes on 127.0.0.1."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

import pytest

HERE = Path(__file__).resolve().parent
# After the product (never first: its etj_trainer/, the tests of the trainer package,
# would shadow that package): for `from harness import ...`.
if str(HERE) not in sys.path:
    sys.path.append(str(HERE))
ROOT = HERE.parents[1]
for p in (ROOT / "operator", ROOT / "trainer_image"):
    if str(p) not in sys.path:
        sys.path.insert(0, str(p))
os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if HERE in Path(str(item.fspath)).parents:
            item.add_marker(pytest.mark.trainer)


@pytest.fixture(scope="module")
def tf() -> Any:
    import tensorflow

    return tensorflow


def _broker(tmp_path_factory: pytest.TempPathFactory, name: str) -> Any:
    """A real Kafka broker (KRaft, one node) on a free 127.0.0.1 port, up while the caller
    holds it; skips, saying why, where Java or the jars are missing."""
    from etj_testcluster import kafka as local_kafka

    local_kafka.ensure_fetched()
    why = local_kafka.missing()
    if why:
        pytest.skip(why)
    with local_kafka.LocalKafka(tmp_path_factory.mktemp(name)) as broker:
        yield broker


@pytest.fixture(scope="session")
def kafka(tmp_path_factory: pytest.TempPathFactory) -> Any:
    """The session's broker (``_broker``); each test makes its own topic."""
    yield from _broker(tmp_path_factory, "kafka")


@pytest.fixture
def own_kafka(tmp_path_factory: pytest.TempPathFactory) -> Any:
    """A broker of the test's own, for a test that restarts it: the session's broker stays
    up for the others."""
    yield from _broker(tmp_path_factory, "own-kafka")

"""A DataError, ModelError or CheckpointMismatch ends the trainer with exit 2 and its own
``<Reason>: <message>`` as the termination message, whatever TensorFlow wrapped it in:
autograph's StagingError (raised while a function or dataset function is traced), a
re-created exception with "in user code" around it, an InvalidArgumentError from a
``py_function`` or from a pipeline check."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from etj_trainer.task.termination import termination_text

HEADER = "/data/ml.csv:1: the header lacks the declared column(s) userId, movieId (it has: x)"


def _failed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, raise_it: Callable[[], object], ps: bool
):
    """``main._failed`` of what ``raise_it`` raises: (exit code, termination message)."""
    from etj.api.constants import TERMINATION_LOG_ENV
    from etj_trainer.main import _failed as failed

    log = tmp_path / "termination"
    monkeypatch.setenv(TERMINATION_LOG_ENV, str(log))
    # Any wrapper TensorFlow uses.
    with pytest.raises(BaseException) as caught:
        raise_it()
    code = failed(caught.value, ps)
    return code, log.read_text()


def _traced_data_error() -> object:
    """A DataError raised while tf.function traces (how ParameterServer's coordinator
    meets a preflight error: it traces the per-worker dataset function)."""
    import tensorflow as tf

    from etj_trainer.data.records import DataError

    @tf.function
    def dataset_fn() -> tf.Tensor:
        raise DataError(HEADER)

    return dataset_fn()


def _traced_dataset_map() -> object:
    """A DataError raised while tf.data traces a map function."""
    import tensorflow as tf

    from etj_trainer.data.records import DataError

    def parse(x: tf.Tensor) -> tf.Tensor:
        raise DataError(HEADER)

    return tf.data.Dataset.range(3).map(parse)


def _py_function_data_error() -> object:
    """A DataError raised inside a py_function while the pipeline runs."""
    import tensorflow as tf

    from etj_trainer.data.records import DataError

    def read(x: object) -> object:
        raise DataError(HEADER)

    ds = tf.data.Dataset.range(3).map(lambda x: tf.py_function(read, [x], tf.int64))
    return list(ds)


def _traced_model_error() -> object:
    import tensorflow as tf

    from etj_trainer.models.custom import ModelError

    @tf.function
    def step() -> tf.Tensor:
        raise ModelError("towers.my_tower: build() returned shape (None, 3), expected (None, 1)")

    return step()


def _checkpoint_mismatch_in_context() -> object:
    from etj_trainer.task.restore import CheckpointMismatch

    try:
        raise CheckpointMismatch("/ckpt/ckpt-3: table user has 100 rows, the model 200")
    except CheckpointMismatch:
        raise RuntimeError("while restoring") from None


@pytest.mark.parametrize("ps", [True, False])
@pytest.mark.parametrize(
    ("raise_it", "expected"),
    [
        (_traced_data_error, f"DataError: {HEADER}"),
        (_traced_dataset_map, f"DataError: {HEADER}"),
        (_py_function_data_error, f"DataError: {HEADER}"),
        (
            _traced_model_error,
            "ModelError: towers.my_tower: build() returned shape (None, 3), expected (None, 1)",
        ),
    ],
    ids=["traced-function", "traced-dataset-map", "py-function", "traced-model-error"],
)
def test_a_wrapped_permanent_error_is_reported_as_itself(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    raise_it: Callable[[], object],
    expected: str,
    ps: bool,
):
    code, message = _failed(tmp_path, monkeypatch, raise_it, ps)
    assert (code, message) == (2, expected)


def test_a_permanent_error_in_the_context_chain_is_found(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    # `from None` hides the context from tracebacks, not from __context__.
    code, message = _failed(tmp_path, monkeypatch, _checkpoint_mismatch_in_context, False)
    assert code == 2
    assert message == "CheckpointMismatch: /ckpt/ckpt-3: table user has 100 rows, the model 200"


def test_a_retryable_error_stays_retryable(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    import tensorflow as tf

    def unavailable() -> object:
        raise tf.errors.UnavailableError(None, None, "ps-0 unreachable")

    code, message = _failed(tmp_path, monkeypatch, unavailable, True)
    assert code == 138 and message.startswith("UnavailableError: ps-0 unreachable")


def test_permanent_failure_reads_the_reason_in_text():
    """What a remote error carries is only text: the reason's own line is recognised
    (qualified or not), and nothing else is taken for one."""
    from etj_trainer.task.termination import permanent_failure

    remote = RuntimeError(
        "Traceback (most recent call last):\n  File ...\n"
        f"etj_trainer.data.records.DataError: {HEADER}\n\n\t [[{{{{node EagerPyFunc}}}}]]"
    )
    assert permanent_failure(remote) == ("DataError", HEADER)
    assert permanent_failure(RuntimeError("a DataError: happened")) is None
    assert permanent_failure(ValueError("plain")) is None


def test_termination_text_is_one_line_within_the_kubernetes_limit() -> None:
    assert termination_text("DataError", "no files\n  match /data/*.csv") == (
        "DataError: no files match /data/*.csv"
    )
    long = termination_text("WatchdogTimeout", "é" * 5000)
    assert long.startswith("WatchdogTimeout: ") and len(long.encode()) <= 4096


def test_each_error_carries_its_reason_as_data_and_is_named_as_it():
    """The reason is the class's ``reason`` (etj.api.trainer_reasons), read as data; a class
    renamed alone fails here, since an error that reaches the trainer as text only is found
    by the name Python prints for it."""
    from etj.api.trainer_reasons import (
        PERMANENT_TRAINER_REASONS,
        REASON_CLUSTER_ERROR,
        REASON_CONFIG_ERROR,
    )
    from etj_trainer.config import ConfigError
    from etj_trainer.data.records import DataError
    from etj_trainer.models.custom import ModelError
    from etj_trainer.task.cluster import ClusterError
    from etj_trainer.task.restore import CheckpointMismatch
    from etj_trainer.task.storage_full import CheckpointStorageFull
    from etj_trainer.task.termination import failure_reason, permanent_failure

    permanent = (DataError, ModelError, CheckpointMismatch, CheckpointStorageFull)
    assert {cls.reason for cls in permanent} == set(PERMANENT_TRAINER_REASONS)
    for cls in permanent:
        assert cls.__name__ == cls.reason
        assert permanent_failure(cls("why")) == (cls.reason, "why")
    assert failure_reason(ConfigError("x")) == REASON_CONFIG_ERROR
    assert failure_reason(ClusterError("x")) == REASON_CLUSTER_ERROR
    assert failure_reason(KeyError("x")) == "KeyError"  # a foreign error: its class name

    class Renamed(DataError):
        pass

    assert permanent_failure(Renamed("bad line")) == (DataError.reason, "bad line")

"""The trainer's parts on their own: config and TF_CONFIG checks, exit codes, the watchdog
supervisor, AUC, the sparse optimizers, the input pipelines, the export and its reader.

TensorFlow runs in the test process here (no cluster); the distributed behaviour is tested
in test_placement, test_ps_training and test_mwms.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from harness import job_spec, read_events, trainer_config, trainer_env

from etj.api.constants import REASON_COMPLETED
from etj.core.reconcile.progress import parse_completion
from etj_trainer import exitcodes
from etj_trainer.config import ConfigError, load_config, parse_config
from etj_trainer.task.auc import auc_from_histogram
from etj_trainer.task.cluster import ClusterError, check_strategy, parse_tf_config
from etj_trainer.task.supervisor import Supervisor
from etj_trainer.task.termination import termination_text

# --- config, TF_CONFIG, exit codes ------------------------------------------------------


def _config_text(**kw: Any) -> str:
    return json.dumps(trainer_config(job_spec(), **kw).to_wire())


def test_config_flag_wins_over_env(tmp_path: Path) -> None:
    good = tmp_path / "good.json"
    good.write_text(_config_text())
    env = {"ETJ_TRAINER_CONFIG": str(tmp_path / "missing.json")}
    assert load_config(str(good), env).job_name == "test"
    with pytest.raises(ConfigError, match="cannot read"):
        load_config(None, env)
    with pytest.raises(ConfigError, match="--config PATH or set ETJ_TRAINER_CONFIG"):
        load_config(None, {})


def test_config_errors_name_the_field() -> None:
    doc = json.loads(_config_text())
    doc["training"]["stepsPerExecution"] = 0
    with pytest.raises(ConfigError, match=r"training\.stepsPerExecution"):
        parse_config(json.dumps(doc))
    doc = json.loads(_config_text())
    doc["shardPlan"]["tables"].reverse()
    with pytest.raises(ConfigError, match=r"do not match the model's tables"):
        parse_config(json.dumps(doc))


def test_tf_config_parsing() -> None:
    cluster = {"chief": ["a:1"], "worker": ["b:1", "c:1"], "ps": ["d:1"]}
    task = parse_tf_config(json.dumps({"cluster": cluster, "task": {"type": "worker", "index": 1}}))
    assert (task.type, task.index, task.num_workers, task.num_ps) == ("worker", 1, 2, 1)
    assert not task.is_chief()
    assert parse_tf_config(None).distributed is False
    evaluator = parse_tf_config(
        json.dumps({"cluster": cluster, "task": {"type": "evaluator", "index": 0}})
    )
    assert evaluator.type == "evaluator"
    mwms = parse_tf_config(
        json.dumps({"cluster": {"worker": ["b:1", "c:1"]}, "task": {"type": "worker", "index": 0}})
    )
    assert mwms.is_chief()
    for bad in (
        "{",
        '{"cluster": {"worker": ["x"]}, "task": {"type": "worker", "index": 3}}',
        '{"cluster": {"boss": ["x"]}, "task": {"type": "boss", "index": 0}}',
    ):
        with pytest.raises(ClusterError):
            parse_tf_config(bad)
    with pytest.raises(ClusterError, match="needs chief, worker and ps"):
        check_strategy(mwms, "ParameterServer")


def _run_trainer(
    env: dict[str, str], *args: str, timeout: float = 60
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "etj_trainer", *args],
        env=trainer_env(env),
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def test_usage_errors_exit_2(tmp_path: Path) -> None:
    assert _run_trainer({"ETJ_TRAINER_CONFIG": ""}).returncode == exitcodes.USAGE
    bad = tmp_path / "bad.json"
    bad.write_text('{"jobName": "x"}')
    result = _run_trainer({}, "--config", str(bad))
    assert result.returncode == exitcodes.USAGE and "strategy" in result.stderr
    good = tmp_path / "good.json"
    good.write_text(_config_text())
    termination = tmp_path / "termination-log"
    result = _run_trainer(
        {"TF_CONFIG": "{not json", "ETJ_TERMINATION_LOG": str(termination)}, "--config", str(good)
    )
    assert result.returncode == exitcodes.USAGE and "TF_CONFIG" in result.stderr
    # The pod's termination message says why, for `kubectl describe pod`.
    assert termination.read_text().startswith("ClusterError: TF_CONFIG is not JSON")
    assert _run_trainer({}, "--bogus").returncode == exitcodes.USAGE


def test_exit_code_classes() -> None:
    assert not exitcodes.is_retryable(exitcodes.BUG)
    assert not exitcodes.is_retryable(exitcodes.USAGE)
    assert exitcodes.is_retryable(exitcodes.RETRYABLE)
    assert exitcodes.is_retryable(exitcodes.TERMINATED)


# --- the supervisor (watchdog) --------------------------------------------------------

_CHILD = """
import os, sys, time, signal
fd = int(os.environ["ETJ_HEARTBEAT_FD"])
mode = sys.argv[1]
if mode == "hang":
    os.write(fd, b"A.."); time.sleep(60)
elif mode == "hang-dumping":
    from etj_trainer.task.supervisor import install_stack_dump
    install_stack_dump()
    def stuck_in_a_step():
        os.write(fd, b"A."); time.sleep(60)
    stuck_in_a_step()
elif mode == "exit3":
    os.write(fd, b"A.D"); sys.exit(3)
elif mode == "term":
    signal.signal(signal.SIGTERM, lambda *a: sys.exit(143))
    os.write(fd, b"A"); print("ready", flush=True)
    while True:
        os.write(fd, b"."); time.sleep(0.2)
"""


def test_supervisor_watchdog_kills_a_silent_child() -> None:
    fired: list[float] = []
    started = time.monotonic()
    code = Supervisor([sys.executable, "-c", _CHILD, "hang"], 2, on_timeout=fired.append).run()
    assert code == exitcodes.RETRYABLE and fired and time.monotonic() - started < 30


def test_watchdog_leaves_the_stacks_and_a_termination_message(tmp_path: Path) -> None:
    """Where training was stuck goes to the log; why it stopped goes to the termination
    message, whose first word the operator acts on."""
    script = tmp_path / "sup.py"
    script.write_text(
        "import sys\nfrom etj_trainer.task.supervisor import Supervisor\n"
        f"sys.exit(Supervisor([sys.executable, '-c', {_CHILD!r}, 'hang-dumping'], 2).run())\n"
    )
    termination = tmp_path / "termination-log"
    result = subprocess.run(
        [sys.executable, str(script)],
        env=trainer_env({"ETJ_TERMINATION_LOG": str(termination)}),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == exitcodes.RETRYABLE
    assert "in stuck_in_a_step" in result.stderr, result.stderr[-2000:]
    message = termination.read_text()
    assert message.startswith("WatchdogTimeout: watchdog: no training step completed for ")


def test_termination_text_is_one_line_within_the_kubernetes_limit() -> None:
    assert termination_text("DataError", "no files\n  match /data/*.csv") == (
        "DataError: no files match /data/*.csv"
    )
    long = termination_text("WatchdogTimeout", "é" * 5000)
    assert long.startswith("WatchdogTimeout: ") and len(long.encode()) <= 4096


def test_the_chiefs_completion_message_is_read_back_by_the_operator() -> None:
    """The final step and evaluation travel in the termination message (the metrics page
    is gone once the chief exits); what the trainer writes, the operator reads."""
    from etj_trainer.task.progress import ProgressReporter

    clock = iter(float(t) for t in range(100))
    reporter = ProgressReporter(256, interval=1e9, port=0, enabled=True, clock=lambda: next(clock))
    reporter.start(1000, restarts=1, last_checkpoint_step=1000)
    reporter.chunk_done(250, 0.45, None, bad=3)
    reporter.evaluated({"step": 1250, "auc": 0.71, "logloss": 0.52, "examples": 2000})
    reporter.report()
    text = termination_text(REASON_COMPLETED, json.dumps(reporter.completion()))
    progress, evaluation = parse_completion(text, "2026-11-24T00:00:00Z")
    assert progress is not None and evaluation is not None
    assert (progress.step, progress.loss, progress.bad_records) == (1250, 0.45, 3)
    assert progress.last_checkpoint_step == 1000 and progress.examples_per_second > 0
    assert (evaluation.step, evaluation.auc, evaluation.examples) == (1250, 0.71, 2000)
    assert progress.update_time == evaluation.update_time == "2026-11-24T00:00:00Z"


def test_the_dynamic_tables_the_chief_reports_reach_status_from_page_and_line() -> None:
    """Each dynamic table's stats, as the trainer serves them on its metrics page and
    writes them in its progress line, read by the operator's reader into the same
    status.progress.dynamicTables."""
    from prometheus_client import generate_latest

    from etj.core.reconcile.progress import parse_progress, progress_record
    from etj_trainer.task.progress import ProgressReporter

    stats = {
        "user_id": {
            "rowsUsed": 9,
            "capacity": 10,
            "admitted": 12,
            "evicted": 3,
            "fallbackLookups": 40,
        },
        "ad_id": {"rowsUsed": 1, "capacity": 4, "admitted": 1, "evicted": 0, "fallbackLookups": 2},
    }
    reporter = ProgressReporter(256, interval=1e9, port=0, enabled=True, clock=lambda: 1.0)
    reporter.dynamic_source = lambda: stats
    reporter.start(10, restarts=0, last_checkpoint_step=None)
    line = reporter.report()
    page = parse_progress(generate_latest(reporter.metrics.registry).decode(), "t")
    record = progress_record(line, "t")
    assert page is not None and record is not None
    assert page.dynamic_tables == record.dynamic_tables
    assert [t.to_wire() for t in record.dynamic_tables or []] == [
        {"name": name, **stats[name]} for name in ("ad_id", "user_id")
    ]


def test_supervisor_passes_exit_codes_and_sigterm(tmp_path: Path) -> None:
    assert Supervisor([sys.executable, "-c", _CHILD, "exit3"], 2).run() == 3
    script = tmp_path / "sup.py"
    script.write_text(
        "import sys\nfrom etj_trainer.task.supervisor import Supervisor\n"
        f"sys.exit(Supervisor([sys.executable, '-c', {_CHILD!r}, 'term'], 30).run())\n"
    )
    proc = subprocess.Popen(
        [sys.executable, str(script)], env=trainer_env(), stdout=subprocess.PIPE, text=True
    )
    assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=120) == exitcodes.TERMINATED


def test_the_watchdog_counts_steps_not_the_tracing_of_the_step(monkeypatch) -> None:
    """The first chunk of a run pays once for tracing up to ``UNROLL`` + 1 copies of the step
    and compiling that graph: minutes on a busy machine (measured: 187 s under 2-worker
    MultiWorkerMirrored at load 14, then a chunk every 0.4 s), which a watchdog armed
    before it took for a hung peer. The loop traces and compiles the chunk (a zero-step
    call) before it arms the watchdog; nothing is traced while the watchdog is armed."""
    from etj_trainer.task import loop, roles
    from etj_trainer.task.state import UNROLL, TrainingState

    traces: list[int] = []  # _step runs in Python only while train_chunk is traced
    original = TrainingState._step

    def counting(self: TrainingState, *args: Any) -> Any:
        traces.append(1)
        return original(self, *args)

    seen: list[tuple[str, int]] = []

    class Recorder:
        def arm(self) -> None:
            seen.append(("arm", len(traces)))

        def beat(self) -> None:
            seen.append(("beat", len(traces)))

        def disarm(self) -> None:
            seen.append(("disarm", len(traces)))

    monkeypatch.setattr(TrainingState, "_step", counting)
    monkeypatch.setattr(loop.Heartbeat, "from_env", classmethod(lambda cls: Recorder()))
    monkeypatch.setattr(roles, "configure_threads", lambda: None)  # TF already runs here
    spec = job_spec(training={"batchSizePerReplica": 32, "steps": 12, "stepsPerExecution": 4})
    sigterm = signal.getsignal(signal.SIGTERM)
    try:
        code = roles.run_synchronous(trainer_config(spec), parse_tf_config(None), None)
    finally:
        signal.signal(signal.SIGTERM, sigterm)
    assert code == exitcodes.SUCCESS
    assert seen[0][0] == "arm" and seen[-1][0] == "disarm", seen
    assert [what for what, _ in seen].count("beat") == 3, seen  # one per chunk
    traced = seen[0][1]
    assert traced > 0, f"the watchdog was armed before the step was traced: {seen}"
    # No more copies of the step than a chunk runs: blocks of 4 and the rest loop.
    assert traced == 4 + 1 < UNROLL, seen
    assert all(n == traced for _, n in seen), f"traced while the watchdog was armed: {seen}"


# --- AUC --------------------------------------------------------------------------------


def test_auc_from_histogram_matches_pairwise_auc() -> None:
    rng = np.random.default_rng(0)
    labels = rng.random(5000) < 0.3
    scores = np.clip(rng.normal(0.4 + 0.2 * labels, 0.15), 0, 0.999)
    bins = (scores * 200).astype(int)
    hist = np.stack(
        [np.bincount(bins[~labels], minlength=200), np.bincount(bins[labels], minlength=200)]
    )
    # Exact AUC on the bucketed scores (ties count half).
    pos, neg = bins[labels], bins[~labels]
    exact = ((pos[:, None] > neg[None, :]).sum() + 0.5 * (pos[:, None] == neg[None, :]).sum()) / (
        len(pos) * len(neg)
    )
    assert auc_from_histogram(hist) == pytest.approx(exact, rel=1e-9)
    assert auc_from_histogram(np.stack([hist[0], np.zeros(200)])) is None


# --- TensorFlow parts ---------------------------------------------------------------------


@pytest.fixture(scope="module")
def tf() -> Any:
    import tensorflow

    return tensorflow


@pytest.mark.parametrize("optimizer", ["sgd", "adagrad", "ftrl", "adam"])
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_sparse_updates_touch_only_batch_rows(tf: Any, optimizer: str, dtype: str) -> None:
    from etj_trainer.task.optim import Slotted, apply_update, create_slots

    strategy = tf.distribute.get_strategy()
    tdtype = {"float32": tf.float32, "bfloat16": tf.bfloat16}[dtype]
    init = np.random.default_rng(1).uniform(-1, 1, (10, 4)).astype(np.float32)
    var = tf.Variable(tf.cast(init, tdtype))
    item = Slotted(var, optimizer, 0.1, create_slots(strategy, var, optimizer))
    before = [s.numpy().astype(np.float32) for s in item.slots]
    rows = np.array([1, 4, 7])
    grad_values = np.full((3, 4), 0.5, np.float32)
    grad = tf.IndexedSlices(
        tf.constant(grad_values), tf.constant(rows, tf.int64), tf.constant([10, 4])
    )
    apply_update(item, grad, tf.constant(1.0), deduplicate=False)(var, grad, *item.slots)
    after = var.numpy().astype(np.float32)
    untouched = np.setdiff1d(np.arange(10), rows)
    np.testing.assert_allclose(
        after[untouched], tf.cast(tf.cast(init, tdtype), tf.float32).numpy()[untouched]
    )
    for slot, old in zip(item.slots, before, strict=True):
        np.testing.assert_array_equal(slot.numpy().astype(np.float32)[untouched], old[untouched])
    base = tf.cast(tf.cast(init, tdtype), tf.float32).numpy()
    if optimizer == "ftrl":
        # FTRL-proximal recomputes a touched row from its accumulators.
        assert (after[rows] != base[rows]).all()
    else:
        # The others move the touched rows against the (positive) gradient.
        assert (after[rows] < base[rows]).all()
    if optimizer == "adam" and dtype == "float32":
        # Lazy Adam, first step: m = 0.1 g, v = 0.001 g^2, bias-corrected step = lr * sign(g).
        np.testing.assert_allclose(after[rows], init[rows] - 0.1, atol=1e-4)
    if optimizer == "adagrad" and dtype == "float32":
        expected = init[rows] - 0.1 * 0.5 / (np.sqrt(0.1 + 0.25) + 1e-7)
        np.testing.assert_allclose(after[rows], expected, rtol=1e-5)


def test_dedup_sums_repeated_rows(tf: Any) -> None:
    from etj_trainer.task.optim import dedup

    g = dedup(
        tf.IndexedSlices(tf.constant([[1.0], [2.0], [4.0]]), tf.constant([3, 5, 3], tf.int64))
    )
    got = dict(zip(g.indices.numpy().tolist(), g.values.numpy()[:, 0].tolist(), strict=True))
    assert got == {3: 5.0, 5: 2.0}


def _model_spec(**kw: Any) -> Any:
    return job_spec(**kw)


def test_synthetic_data_is_skewed_and_learnable(tf: Any) -> None:
    from etj_trainer.data.pipeline import make_dataset

    spec = _model_spec()
    batch = next(iter(make_dataset(spec.model, spec.data, 4096)))
    ids = batch["user_id"].numpy()
    assert ids.shape == (4096, 1) and batch["item_id"].shape == (4096, 3)
    assert ids.min() >= 0 and ids.max() < 5000
    counts = np.sort(np.bincount(ids.ravel(), minlength=5000))[::-1]
    assert counts[:10].sum() > 0.1 * ids.size, "Zipf: the top ids are a large share"
    assert 0.2 < batch["label"].numpy().mean() < 0.8
    assert batch["dense"].shape == (4096, 4)
    other = next(iter(make_dataset(spec.model, spec.data, 4096, num_shards=2, shard_index=1)))
    assert not np.array_equal(other["user_id"].numpy(), ids), "shards draw different streams"


def test_a_feature_schema_trains_on_synthetic_data(tf: Any) -> None:
    """Criteo's schema with data.source synthetic: every categorical feature gets its own
    input (two features share a table here), the dense features one matrix, and the model
    built from that schema takes the batch (it used to fail on the table-named keys)."""
    import yaml

    from etj.api.job import EmbeddingTrainingJob
    from etj_trainer.data.batch import input_key, lookups
    from etj_trainer.data.pipeline import make_dataset

    root = Path(__file__).resolve().parents[3]
    doc = yaml.safe_load((root / "examples" / "criteo.yaml").read_text())
    doc["spec"]["model"]["features"][-1]["table"] = "c25"  # C26 shares C25's table
    doc["spec"]["model"]["embeddings"] = doc["spec"]["model"]["embeddings"][:-1]
    doc["spec"]["data"] = {"source": "synthetic"}
    doc["spec"]["training"] = {"steps": 10, "batchSizePerReplica": 64}
    spec = EmbeddingTrainingJob.from_manifest(doc).spec
    batch = next(iter(make_dataset(spec.model, spec.data, 64)))
    keys = {x.key for x in lookups(spec.model)}
    assert keys == {input_key(f"C{i}") for i in range(1, 27)}
    assert keys <= set(batch) and batch["dense"].shape == (64, 13)
    c26 = batch[input_key("C26")].numpy()
    assert c26.shape == (64, 1) and c26.min() >= 0 and c26.max() < 100  # c25's rows
    assert 0.05 < batch["label"].numpy().mean() < 0.95
    from etj.api.trainer import TrainerConfig
    from etj.core.planner import build_plan
    from etj_trainer.models.ctr import CtrModel

    config = TrainerConfig(
        job_name="j",
        strategy="MultiWorkerMirrored",
        model=spec.model,
        data=spec.data,
        training=spec.training,
        shard_plan=build_plan(spec),
        metrics_port=9102,
    )
    assert CtrModel(config)(batch).shape == (64,)


@pytest.mark.parametrize("fmt", ["tfrecord", "csv"])
def test_files_roundtrip_and_sharding(tf: Any, tmp_path: Path, fmt: str) -> None:
    from etj_trainer.data.datagen import write_files
    from etj_trainer.data.pipeline import make_dataset, synthetic_batch_fn

    spec = _model_spec(
        data={"source": "files", "files": {"pattern": str(tmp_path / "part-*"), "format": fmt}}
    )
    write_files(spec.model, spec.data, tmp_path, fmt, files=4, examples_per_file=64)
    make_batch = synthetic_batch_fn(spec.model, spec.data, 64, stream=0)
    written = {}
    for n in range(4):  # what write_files wrote into file n
        b = make_batch(tf.constant(n, tf.int64))
        written[n] = {
            tuple(r) for r in np.concatenate([b["user_id"].numpy(), b["item_id"].numpy()], axis=1)
        }
    # Worker 1 of 2 reads files 1 and 3 only.
    batch = next(iter(make_dataset(spec.model, spec.data, 32, num_shards=2, shard_index=1, seed=0)))
    assert batch["item_id"].shape == (32, 3) and batch["dense"].dtype == tf.float32
    assert batch["label"].dtype == tf.float32
    rows = {
        tuple(r)
        for r in np.concatenate([batch["user_id"].numpy(), batch["item_id"].numpy()], axis=1)
    }
    assert rows <= written[1] | written[3]
    assert not rows <= written[0] | written[2]


def test_missing_files_are_a_clear_error(tf: Any, tmp_path: Path) -> None:
    from etj_trainer.data.pipeline import DataError, make_dataset

    spec = _model_spec(data={"source": "files", "files": {"pattern": str(tmp_path / "nothing-*")}})
    with pytest.raises(DataError, match="matches no file"):
        make_dataset(spec.model, spec.data, 8)


def test_export_serves_the_trained_model_from_mapped_tables(tf: Any, tmp_path: Path) -> None:
    from etj_trainer.data.pipeline import make_dataset
    from etj_trainer.task.export import export
    from etj_trainer.task.export_reader import MappedModel
    from etj_trainer.task.state import TrainingState

    spec = _model_spec(
        strategy="MultiWorkerMirrored",
        replicas={"worker": {"replicas": 1}},
        model={
            "embeddings": [
                {"name": "user_id", "vocabularySize": 500, "dimension": 4, "dtype": "bfloat16"},
                {
                    "name": "item_id",
                    "vocabularySize": 300,
                    "dimension": 4,
                    "idsPerExample": 2,
                    "combiner": "sum",
                },
            ],
            "denseFeatures": 3,
            "hiddenUnits": [8],
        },
    )
    config = trainer_config(spec)
    state = TrainingState(config, tf.distribute.get_strategy())
    it = iter(make_dataset(config.model, config.data, 64))
    state.train_chunk(it, tf.constant(5, tf.int64))
    out = export(state, str(tmp_path / "export"))
    assert json.loads((out / "tables.json").read_text())["step"] == 5
    batch = next(it)
    expected = tf.sigmoid(state.model(batch)).numpy()
    served = MappedModel(out).predict({k: v.numpy() for k, v in batch.items()})
    np.testing.assert_allclose(served, expected, rtol=1e-4, atol=1e-5)
    table = np.load(out / "embeddings" / "user_id.npy", mmap_mode="r")
    assert isinstance(table, np.memmap) and table.shape == (500, 4)
    # Next to checkpoints on a checkpoint.uri (gs://): the same files, through tf.io.gfile
    # (TensorFlow's in-memory filesystem stands in for the bucket).
    from etj_trainer.task.export import export_to

    remote = "ram://etj-test/ckpt/export"
    assert export_to(state, remote) == remote
    local_files = sorted(str(p.relative_to(out)) for p in out.rglob("*") if p.is_file())
    remote_files = sorted(
        f"{d.removeprefix(remote).lstrip('/')}/{f}".lstrip("/")
        for d, _, files in tf.io.gfile.walk(remote)
        for f in files
    )
    assert remote_files == local_files
    with tf.io.gfile.GFile(f"{remote}/tables.json") as f:
        assert json.loads(f.read())["step"] == 5


def test_local_run_on_files_trains_and_exits_0(tmp_path: Path) -> None:
    """No TF_CONFIG: one local process, here reading TFRecord files."""
    from etj_trainer.data.datagen import write_files

    spec = _model_spec(
        strategy="MultiWorkerMirrored",
        replicas={"worker": {"replicas": 1}},
        data={"source": "files", "files": {"pattern": str(tmp_path / "data" / "part-*")}},
        training={
            "batchSizePerReplica": 128,
            "steps": 600,
            "optimizer": "ftrl",
            "learningRate": 0.1,
            "stepsPerExecution": 20,
        },
    )
    write_files(
        spec.model, spec.data, tmp_path / "data", "tfrecord", files=2, examples_per_file=2000
    )
    config = trainer_config(spec, checkpoint_dir=tmp_path / "ckpt", every_steps=300)
    path = tmp_path / "trainer.json"
    path.write_text(json.dumps(config.to_wire()))
    env = {"ETJ_METRICS_PORT": "0", "ETJ_PROGRESS_SECONDS": "0.5"}
    env.pop("TF_CONFIG", None)
    result = subprocess.run(
        [sys.executable, "-m", "etj_trainer", "--config", str(path)],
        env={k: v for k, v in trainer_env(env).items() if k != "TF_CONFIG"},
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    log = tmp_path / "out.log"
    log.write_text(result.stdout)
    events = read_events(log)
    losses = [e["loss"] for e in events if e["event"] == "progress" and "loss" in e]
    assert events[-1] == {"event": "done", "step": 600}
    assert losses[-1] < losses[0] - 0.02
    assert sorted(
        int(p.name.split("-")[1].split(".")[0]) for p in (tmp_path / "ckpt").glob("ckpt-*.index")
    ) == [300, 600]
    # TensorBoard gets the same loss curve as the progress lines, as scalar-plugin records.
    scalars = _tensorboard_scalars(tmp_path / "ckpt" / "tensorboard")
    assert {"loss", "auc", "examples_per_second"} <= set(scalars)
    tb_steps, tb_losses = zip(*scalars["loss"], strict=True)
    assert list(tb_steps) == sorted(tb_steps) and tb_steps[-1] == 600
    assert tb_losses[-1] < tb_losses[0] - 0.02


def _tensorboard_scalars(directory: Path) -> dict[str, list[tuple[int, float]]]:
    import tensorflow as tf
    from tensorflow.core.util import event_pb2

    scalars: dict[str, list[tuple[int, float]]] = {}
    for path in sorted(directory.glob("events.out.tfevents.*")):
        for record in tf.data.TFRecordDataset(str(path)):
            event = event_pb2.Event.FromString(record.numpy())
            for value in event.summary.value:
                assert value.metadata.plugin_data.plugin_name == "scalars"
                number = float(tf.make_ndarray(value.tensor))
                scalars.setdefault(value.tag, []).append((event.step, number))
    return scalars

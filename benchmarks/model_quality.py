"""Quality parity of the architecture zoo: held-out AUC and log-loss of every architecture
trained by etj single-process, under ParameterServer and under MultiWorkerMirrored, beside a
plain ``tf_keras`` single-process implementation of the same architecture (written here,
independently of the trainer, as the reference).

Data: generated CSV files in etj's own layout (one id column per table, ``dense_<i>``,
``label``) whose click probability has per-id effects, pairwise id crosses (a hidden
factor per id, dot products between tables: what FM, cross layers and DLRM's interaction
can find) and a dense-dense and a dense-id cross. Every run sees the same number of
examples (``--steps`` x ``--batch``: a ParameterServer step is one worker's batch, a
MultiWorkerMirrored step both workers'); each etj run exports, and the held-out file is
scored from the export (``etj_trainer.task.export_reader``), the reference in-process.

Runs: ``single`` (one trainer process, no TF_CONFIG), ``ps`` (chief + 2 workers + 2 ps),
``mwms`` (2 workers, each the full batch: half as many updates of a twice larger batch),
``keras`` (the reference); and, on request (``--modes``), ``mwms-updates`` (2 workers, half
the batch each: the same updates as the single run). Goal: every etj run within 0.005 AUC of
the reference. Prints one table; ``--quick`` is a smaller setting for a busy machine.
Not a test: nothing is asserted.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
# tests/trainer (harness, zoo) after the product: its etj_trainer/ holds the trainer's tests.
for _p in (ROOT / "tests" / "trainer", ROOT / "operator", ROOT / "trainer_image"):
    sys.path.insert(0, str(_p))
os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

from harness import LocalJob, job_spec, trainer_config, trainer_env  # noqa: E402

from etj.api.architectures import Architecture  # noqa: E402
from etj.api.constants import METRICS_PORT_ENV, TF_CONFIG_ENV, TRAINER_CONFIG_ENV  # noqa: E402

TABLES = {"user_id": 2000, "item_id": 1000, "category": 60, "country": 20}
DIM = 8
DENSE = 4
LR = 0.05
# Settings smaller than the defaults where the reference below is built the same way.
SMALL: dict[str, dict[str, Any]] = {
    "dcnV2": {"crossLayers": 2, "structure": "stacked"},
    "dlrm": {"bottomUnits": [16]},
}
# Every registered architecture (etj.api.architectures), with its settings for this run.
ARCHITECTURES: dict[str, dict[str, Any]] = {
    a.value: {a.value: SMALL.get(a.value, {})} if a.registration.settings else {}
    for a in Architecture
}
# The architectures with a tf_keras reference in keras_model (a new one runs without it).
KERAS_REFERENCES = ("dnn", "wideDeep", "deepFM", "dcnV2", "dlrm")
HIDDEN = [32, 16]
# The trainer's watchdog: generous, as a shared machine may be slow (the harness's default
# 120 s is shorter than a whole run here, which has no checkpoint to report steps at).
WATCHDOG = 1800


# --- data -----------------------------------------------------------------------------


def generate(rows: int, seed: int, truth_seed: int = 0) -> dict[str, np.ndarray]:
    """``rows`` examples; the click model is fixed by ``truth_seed``, the draws by ``seed``."""
    truth = np.random.default_rng(truth_seed)
    bias = {t: truth.normal(0, 0.5, v) for t, v in TABLES.items()}
    factor = {t: truth.normal(0, 0.6, (v, 4)) for t, v in TABLES.items()}
    dense_w = truth.normal(0, 0.5, DENSE)
    country_dense = truth.normal(0, 0.8, TABLES["country"])
    rng = np.random.default_rng(seed)
    # Skewed ids, as in click logs.
    ids = {t: (v * rng.random(rows) ** 2).astype(np.int64) for t, v in TABLES.items()}
    dense = rng.normal(size=(rows, DENSE)).astype(np.float32)
    logit = -0.5 + sum(bias[t][ids[t]] for t in TABLES) + dense @ dense_w
    names = list(TABLES)
    for i, a in enumerate(names):
        for b in names[i + 1 :]:
            logit += (factor[a][ids[a]] * factor[b][ids[b]]).sum(axis=1)
    logit += 0.8 * dense[:, 0] * dense[:, 1] + country_dense[ids["country"]] * dense[:, 2]
    label = (rng.random(rows) < 1 / (1 + np.exp(-logit))).astype(np.float32)
    return {"label": label, "dense": dense, **ids}


def write_csv(data: dict[str, np.ndarray], path: Path) -> None:
    columns = ["label", *(f"dense_{i}" for i in range(DENSE)), *TABLES]
    values = [data["label"], *(data["dense"][:, i] for i in range(DENSE))]
    values += [data[t] for t in TABLES]
    fmt = ["%d"] + ["%.6f"] * DENSE + ["%d"] * len(TABLES)
    np.savetxt(
        path,
        np.stack(values, axis=1),
        fmt=fmt,
        delimiter=",",
        header=",".join(columns),
        comments="",
    )


def auc(labels: np.ndarray, scores: np.ndarray) -> float:
    """Area under the ROC curve (rank statistic, ties averaged)."""
    order = np.argsort(scores, kind="mergesort")
    ranks = np.empty(len(scores))
    sorted_scores = scores[order]
    i = 0
    while i < len(scores):
        j = i
        while j + 1 < len(scores) and sorted_scores[j + 1] == sorted_scores[i]:
            j += 1
        ranks[order[i : j + 1]] = (i + j) / 2 + 1
        i = j + 1
    pos = labels == 1
    n_pos, n_neg = pos.sum(), (~pos).sum()
    return float((ranks[pos].sum() - n_pos * (n_pos + 1) / 2) / (n_pos * n_neg))


def log_loss(labels: np.ndarray, p: np.ndarray) -> float:
    p = np.clip(p, 1e-7, 1 - 1e-7)
    return float(-np.mean(labels * np.log(p) + (1 - labels) * np.log(1 - p)))


# --- etj runs ---------------------------------------------------------------------------


def _spec(arch: str, strategy: str, workers: int, steps: int, batch: int, files: str) -> Any:
    replicas: dict[str, Any] = {"worker": {"replicas": workers}}
    if strategy == "ParameterServer":
        replicas = {
            "chief": {"replicas": 1},
            "worker": {"replicas": workers},
            "ps": {"replicas": 2},
        }
    else:
        replicas["chief"] = {"replicas": 0}
    return job_spec(
        strategy=strategy,
        replicas=replicas,
        model={
            "embeddings": [
                {"name": t, "vocabularySize": v, "dimension": DIM} for t, v in TABLES.items()
            ],
            "denseFeatures": DENSE,
            "hiddenUnits": HIDDEN,
            "architecture": arch,
            **ARCHITECTURES[arch],
        },
        data={"source": "files", "files": {"pattern": files, "format": "csv"}},
        training={
            "batchSizePerReplica": batch,
            "steps": steps,
            "optimizer": "adagrad",
            "learningRate": LR,
            "stepsPerExecution": 10,
        },
        sharding={"maxShardBytes": "32Ki"},
    )


def run_etj(mode: str, arch: str, steps: int, batch: int, files: str, work: Path) -> Path:
    """Train with etj in ``mode``; the export directory."""
    export = work / "export"
    if mode == "ps":
        spec = _spec(arch, "ParameterServer", 2, steps, batch, files)
        config = trainer_config(spec, export_dir=export, watchdog_seconds=WATCHDOG)
        with LocalJob(config, work, workers=2, ps=2) as job:
            job.start_all()
            job.wait_done(timeout=1200)
        return export
    workers = 2 if mode.startswith("mwms") else 1
    if mode == "mwms-updates":
        # The same examples in as many updates as the others: half the batch per worker.
        spec = _spec(arch, "MultiWorkerMirrored", 2, steps, batch // 2, files)
    else:
        spec = _spec(arch, "MultiWorkerMirrored", workers, steps // workers, batch, files)
    config = trainer_config(spec, export_dir=export, watchdog_seconds=WATCHDOG)
    if workers == 2:
        with LocalJob(config, work, workers=2, ps=0, chief=False) as job:
            job.start_all()
            job.wait_done(timeout=1200)
        return export
    train_alone(config, work, timeout=1200)
    return export


def train_alone(config: Any, work: Path, timeout: float) -> None:
    """Run the trainer as one process (no TF_CONFIG) on ``config``; its log in ``work``."""
    path = work / "trainer.json"
    work.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(config.to_wire()))
    env = trainer_env({TRAINER_CONFIG_ENV: str(path), METRICS_PORT_ENV: "0"})
    env.pop(TF_CONFIG_ENV, None)
    with (work / "single.log").open("wb") as log:
        subprocess.run(
            [sys.executable, "-m", "etj_trainer"],
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            check=True,
            timeout=timeout,
        )


def score_export(export: Path, held: dict[str, np.ndarray]) -> np.ndarray:
    from etj_trainer.task.export_reader import MappedModel

    model = MappedModel(export)
    features = {t: held[t].reshape(-1, 1) for t in TABLES}
    features["dense"] = held["dense"]
    return np.concatenate(
        [
            model.predict({k: v[i : i + 4096] for k, v in features.items()})
            for i in range(0, len(held["label"]), 4096)
        ]
    )


# --- the tf_keras reference -------------------------------------------------------------


def keras_model(arch: str) -> Any:
    import tensorflow as tf
    import tf_keras as keras

    def init() -> Any:
        # etj's tables start uniform in [-0.05, 0.05] too (a new initializer per table).
        return keras.initializers.RandomUniform(-0.05, 0.05)

    ids = {t: keras.Input((1,), dtype="int64", name=t) for t in TABLES}
    dense = keras.Input((DENSE,), name="dense_features")
    emb = [
        keras.layers.Flatten()(
            keras.layers.Embedding(v, DIM, embeddings_initializer=init())(ids[t])
        )
        for t, v in TABLES.items()
    ]

    def mlp(x: Any, units: list[int], last_relu: bool) -> Any:
        for i, u in enumerate(units):
            relu = i < len(units) - 1 or last_relu
            x = keras.layers.Dense(u, activation="relu" if relu else None)(x)
        return x

    def linear() -> Any:
        parts = [
            keras.layers.Flatten()(
                keras.layers.Embedding(v, 1, embeddings_initializer=init())(ids[t])
            )
            for t, v in TABLES.items()
        ]
        return keras.layers.Add()(parts)

    x0 = keras.layers.Concatenate()([*emb, dense])
    if arch == "dnn":
        logit = mlp(x0, [*HIDDEN, 1], False)
    elif arch == "wideDeep":
        wide = keras.layers.Dense(1, use_bias=False, kernel_initializer="zeros")(dense)
        logit = keras.layers.Add()([mlp(x0, [*HIDDEN, 1], False), linear(), wide])
    elif arch == "deepFM":
        stacked = keras.layers.Lambda(lambda e: tf.stack(e, axis=1))(emb)
        fm = keras.layers.Lambda(
            lambda v: (
                0.5
                * tf.reduce_sum(
                    tf.square(tf.reduce_sum(v, 1)) - tf.reduce_sum(tf.square(v), 1),
                    1,
                    keepdims=True,
                )
            )
        )(stacked)
        logit = keras.layers.Add()([mlp(x0, [*HIDDEN, 1], False), linear(), fm])
    elif arch == "dcnV2":
        x = x0
        width = x0.shape[-1]
        for _ in range(2):
            projected = keras.layers.Dense(width)(x)
            x = keras.layers.Add()([keras.layers.Multiply()([x0, projected]), x])
        logit = keras.layers.Dense(1)(mlp(x, HIDDEN, True))
    else:
        assert arch == "dlrm", f"no tf_keras reference for {arch}"
        bottom = mlp(dense, [16, DIM], True)
        stacked = keras.layers.Lambda(lambda e: tf.stack(e, axis=1))([bottom, *emb])
        n = len(emb) + 1
        pairs = [i * n + j for i in range(n) for j in range(i)]
        dots = keras.layers.Lambda(
            lambda v: tf.gather(
                tf.reshape(tf.matmul(v, v, transpose_b=True), [-1, n * n]), pairs, axis=1
            )
        )(stacked)
        logit = mlp(keras.layers.Concatenate()([bottom, dots]), [*HIDDEN, 1], False)
    model = keras.Model([*ids.values(), dense], logit)
    model.compile(
        optimizer=keras.optimizers.Adagrad(LR, initial_accumulator_value=0.1, epsilon=1e-7),
        loss=keras.losses.BinaryCrossentropy(from_logits=True),
    )
    return model


def run_keras(
    arch: str, steps: int, batch: int, train: dict[str, np.ndarray], held: dict[str, np.ndarray]
) -> np.ndarray:
    import tensorflow as tf
    import tf_keras as keras

    keras.utils.set_random_seed(0)
    model = keras_model(arch)

    def inputs(d: dict[str, np.ndarray]) -> list[np.ndarray]:
        return [d[t].reshape(-1, 1) for t in TABLES] + [d["dense"]]

    ds = tf.data.Dataset.from_tensor_slices((tuple(inputs(train)), train["label"]))
    ds = ds.shuffle(50_000, seed=0).repeat().batch(batch, drop_remainder=True)
    model.fit(ds, steps_per_epoch=steps, epochs=1, verbose=0)
    return 1 / (1 + np.exp(-model.predict(inputs(held), batch_size=4096, verbose=0)[:, 0]))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="fewer rows and steps")
    parser.add_argument("--architectures", default=",".join(ARCHITECTURES))
    parser.add_argument("--modes", default="keras,single,ps,mwms")
    args = parser.parse_args()
    rows, steps, batch = (60_000, 400, 256) if args.quick else (400_000, 3000, 512)
    train, held = generate(rows, seed=1), generate(rows // 4, seed=2)
    work = Path(tempfile.mkdtemp(prefix="etj-quality-"))
    write_csv(train, work / "train.csv")
    results: list[tuple[str, str, float, float, float]] = []
    for arch in args.architectures.split(","):
        for mode in args.modes.split(","):
            start = time.monotonic()
            if mode == "keras" and arch not in KERAS_REFERENCES:
                print(f"# {arch} keras: no tf_keras reference in keras_model; skipped")
                continue
            if mode == "keras":
                p = run_keras(arch, steps, batch, train, held)
            else:
                export = run_etj(
                    mode, arch, steps, batch, str(work / "train.csv"), work / f"{arch}-{mode}"
                )
                p = score_export(export, held)
            results.append(
                (
                    arch,
                    mode,
                    auc(held["label"], p),
                    log_loss(held["label"], p),
                    time.monotonic() - start,
                )
            )
            print(
                f"# {arch} {mode}: AUC {results[-1][2]:.4f} log-loss {results[-1][3]:.4f}",
                flush=True,
            )
    print(
        f"\n{rows} training rows, {steps} x {batch} examples per run, held-out {len(held['label'])}"
    )
    print(
        f"{'architecture':<12} {'run':<12} {'AUC':>7} {'log-loss':>9} {'vs keras AUC':>13} {'seconds':>8}"
    )
    reference = {arch: a for arch, mode, a, _, _ in results if mode == "keras"}
    for arch, mode, a, loss, seconds in results:
        delta = f"{a - reference[arch]:+.4f}" if arch in reference and mode != "keras" else ""
        print(f"{arch:<12} {mode:<12} {a:>7.4f} {loss:>9.4f} {delta:>13} {seconds:>8.0f}")


if __name__ == "__main__":
    main()

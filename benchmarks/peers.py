"""etj beside what a team would run instead, on the same CPU cores: DLRM and DeepFM.

The models are DeepRec's modelzoo configurations (``modelzoo/DLRM`` and ``modelzoo/DeepFM``
train.py): 26 tables of 10,000 hashed rows, dimension 16, 13 dense features, batch 512.
DLRM: bottom MLP 512-256-64-16, dot interaction, top MLP 512-256; DeepFM: deep MLP
1024-256-32 beside first-order weights and the FM (etj's deepFM: DeepRec's extra final MLP
and batch norms left out). Every system trains the same model (etj's towers written again
in PyTorch: same widths, Glorot kernels, embeddings uniform +-0.05) with Adagrad (lr 0.05,
initial accumulator 0.1) on the same data: etj's synthetic Criteo-shaped stream (Zipf ids,
a learnable click signal), generated once and saved, then fed from memory:

- ``etj``: the trainer's training function in one process (chunks of 25 steps);
- ``etj-ps``: chief + 2 workers + 2 ps as ``etj run`` runs them (as trainer_throughput.py
  launches them; its workers generate the same stream themselves, same examples count);
- ``torch``: PyTorch eager, one ``nn.EmbeddingBag(sparse=True)`` per table, ``Adagrad``;
- ``torchrec``: TorchRec's ``EmbeddingBagCollection`` layout (KeyedJaggedTensor input) on
  FBGEMM's fused CPU kernels (a table-batched embedding with the Adagrad update in its
  backward), the tower in PyTorch; skipped, with the reason, when it does not import.

Each run is its own process bound to the same cores (the first ``--threads`` of those this
process may use; default all of them) with the same thread budget; the PS job's five
processes share those cores as ``etj run`` shares them, each with its own share) and trains the same examples; examples/s count after the first 25 steps (tracing, warm-up).
Rounds alternate the systems (``--rounds``); the best of each is kept, since other load
on the machine only ever slows a run. Printed per model: examples/s, the ratio to
PyTorch, CPU-seconds per 1,000 examples and examples per CPU-second as a ratio to
PyTorch's (the figure other load disturbs least), the AUC on 50k held-out rows, and etj's examples
per CPU-second beside DeepRec's published per-vCPU figures (another machine: 8 vCPU Xeon
8369HC, ``modelzoo/benchmark/cpu``; not a side by side).

    make benchmark-deps && .venv/bin/python benchmarks/peers.py [--quick]
    make bench-peers              # the same, --quick

On a loaded machine pass ``--threads 1``: PyTorch's OpenMP threads meet at every parallel
region, so one thread the load deschedules stalls the rest (RESULTS.md: 10x slower at 2).

``--quick`` trains 100k examples per run, one round (a few minutes on 2 busy cores);
the default 600k, two rounds. Not a test: nothing is asserted. Results:
``benchmarks/RESULTS.md``.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
for _p in (ROOT / "tests" / "trainer", ROOT / "operator", ROOT / "trainer_image"):
    sys.path.insert(0, str(_p))

from harness import LocalJob, trainer_config, trainer_env, wait_for  # noqa: E402

from etj.api.constants import CPUS_ENV  # noqa: E402
from etj.api.spec import EmbeddingTrainingJobSpec  # noqa: E402
from trainer_throughput import LEARNING_RATE, _tree_cpu, ps_job_spec  # noqa: E402

BATCH = 512
TABLES = 26
ROWS = 10_000
DIM = 16
DENSE = 13
LR = LEARNING_RATE
INITIAL_ACCUMULATOR = 0.1  # etj_trainer.task.optim.INITIAL_ACCUMULATOR
EMBEDDING_INIT = 0.05  # etj_trainer.models.ctr.EMBEDDING_INIT
WARM_STEPS = 25  # one etj chunk: excluded from every rate
HELD_OUT = 50_000
SYSTEMS = ("etj", "etj-ps", "torch", "torchrec")

# The widths of each model (DeepRec modelzoo's train.py; see the docstring).
MODELS: dict[str, dict[str, Any]] = {
    "dlrm": {
        "architecture": "dlrm",
        "dlrm": {"bottomUnits": [512, 256, 64]},
        "hiddenUnits": [512, 256],
    },
    "deepfm": {"architecture": "deepFM", "hiddenUnits": [1024, 256, 32]},
}
# DeepRec's published examples/s on 8 vCPUs (Xeon 8369HC): TF 1.15.5, DeepRec fp32, bf16.
DEEPREC = {"dlrm": (34_618, 59_068, 60_907), "deepfm": (18_849, 31_260, 34_627)}
DEEPREC_VCPUS = 8


def model_doc(model: str) -> dict[str, Any]:
    tables = [
        {"name": f"c{i + 1}", "vocabularySize": ROWS, "dimension": DIM} for i in range(TABLES)
    ]
    return {"embeddings": tables, "denseFeatures": DENSE, **MODELS[model]}


def job_spec(model: str, steps: int) -> EmbeddingTrainingJobSpec:
    """``model``'s job: trainer_throughput.py's (chief + 2 workers + 2 ps, Adagrad)."""
    return ps_job_spec(model_doc(model), BATCH, steps)


def _own_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


# --- the data: etj's generator, once -------------------------------------------------------


def make_data(model: str, examples: int, out: Path) -> None:
    """``examples`` training rows (stream 0) and HELD_OUT held-out rows (stream 1) of etj's
    synthetic stream, as ``ids`` [n, 26] int64, ``dense`` [n, 13], ``label`` [n]."""
    import numpy as np
    import tensorflow as tf

    from etj_trainer.data.pipeline import synthetic_batch_fn

    config = trainer_config(job_spec(model, 1))
    for name, stream, n in (("train", 0, examples), ("held_out", 1, HELD_OUT)):
        make = tf.function(synthetic_batch_fn(config.model, config.data, BATCH, stream))
        parts: dict[str, list[Any]] = {"ids": [], "dense": [], "label": []}
        for counter in range(n // BATCH):
            b = make(tf.constant(counter, tf.int64))
            parts["ids"].append(np.concatenate([b[f"c{i + 1}"].numpy() for i in range(TABLES)], 1))
            parts["dense"].append(b["dense"].numpy())
            parts["label"].append(b["label"].numpy())
        np.savez(out / f"{name}.npz", **{k: np.concatenate(v) for k, v in parts.items()})


def _load(data: Path, name: str) -> dict[str, Any]:
    import numpy as np

    with np.load(data / f"{name}.npz") as f:
        return {k: f[k] for k in f.files}


def _auc(labels: Any, scores: Any) -> float:
    """Exact ROC AUC (rank statistic, ties averaged)."""
    import numpy as np

    order = np.argsort(scores, kind="mergesort")
    ranks = np.empty(len(scores))
    sorted_scores = scores[order]
    # Average ranks over ties.
    _, first, counts = np.unique(sorted_scores, return_index=True, return_counts=True)
    avg = first + (counts - 1) / 2.0 + 1.0
    ranks[order] = np.repeat(avg, counts)
    pos = labels > 0.5
    n_pos, n_neg = int(pos.sum()), int((~pos).sum())
    return float((ranks[pos].sum() - n_pos * (n_pos + 1) / 2.0) / max(n_pos * n_neg, 1))


# --- etj ------------------------------------------------------------------------------------


def _etj_batches(arrays: dict[str, Any]) -> Any:
    """The rows as a tf.data of whole batches (one slice per batch: no per-row work)."""
    import tensorflow as tf

    n = len(arrays["label"]) // BATCH
    ids = arrays["ids"][: n * BATCH].reshape(n, BATCH, TABLES)
    batches = {f"c{i + 1}": ids[:, :, i : i + 1] for i in range(TABLES)}
    batches["dense"] = arrays["dense"][: n * BATCH].reshape(n, BATCH, DENSE)
    batches["label"] = arrays["label"][: n * BATCH].reshape(n, BATCH)
    return tf.data.Dataset.from_tensor_slices(batches)


def _etj_auc(model: Any, held: dict[str, Any]) -> float:
    import numpy as np
    import tensorflow as tf

    score = tf.function(lambda b: tf.sigmoid(model(b)))
    out = [score(b).numpy() for b in _etj_batches(held)]
    n = len(out) * BATCH
    return _auc(held["label"][:n], np.concatenate(out))


def run_etj(model: str, data: Path, steps: int) -> dict[str, Any]:
    import tensorflow as tf

    from etj_trainer.task.state import TrainingState
    from etj_trainer.task.threads import configure_threads

    configure_threads()
    config = trainer_config(job_spec(model, steps))
    state = TrainingState(config, tf.distribute.get_strategy())
    it = iter(_etj_batches(_load(data, "train")).prefetch(4))
    chunk = tf.constant(WARM_STEPS, tf.int64)
    float(state.train_chunk(it, chunk)[0])  # trace and warm up
    start, cpu0 = time.perf_counter(), _own_cpu()
    for _ in range(steps // WARM_STEPS - 1):
        loss, *_ = state.train_chunk(it, chunk)
    float(loss)
    seconds, cpu = time.perf_counter() - start, _own_cpu() - cpu0
    examples = (steps - WARM_STEPS) * BATCH
    return {
        "eps": examples / seconds,
        "cpu_per_k": cpu * 1000 / examples,
        "auc": _etj_auc(state.model, _load(data, "held_out")),
    }


def run_etj_ps(model: str, data: Path, steps: int) -> dict[str, Any]:
    """etj's PS job (chief + 2 workers + 2 ps, ``python -m etj_trainer`` each, bound to
    cores as ``etj run`` binds them): the steady rate between its first progress record
    past 10 % of its steps and its last one before 90 % (or before the end), each timed
    when first seen (polled every 50 ms, written every 0.25 s: the lag is alike at both
    ends); CPU of all five tasks over the same window; then the AUC of its final
    checkpoint. ``window_s`` says how long the window was: its steps arrive a chunk
    (~1 s of a worker's steps) at a time, so a window of a few seconds is no measure."""
    workdir = Path(tempfile.mkdtemp(prefix="etj-peers-ps-"))
    config = trainer_config(
        job_spec(model, steps),
        checkpoint_dir=workdir / "ckpt",
        every_steps=steps,
        keep=1,
        watchdog_seconds=900,  # a loaded machine's tracing outlasts the default
    )
    job = LocalJob(config, workdir, workers=2, ps=2, env={"ETJ_PROGRESS_SECONDS": "0.25"})
    try:
        job.start_all()
        pids = [p.pid for p in job.procs.values()]
        seen: list[tuple[float, int, float]] = []  # (first seen, step, CPU of the tasks)

        def finished() -> bool:
            job.check_chief_alive()
            step = job.step()
            if step and (not seen or step != seen[-1][1]):
                seen.append((time.monotonic(), step, _tree_cpu(pids)))
            return job.last("done") is not None

        wait_for(finished, 3600, "the PS job to finish", every=0.05)
        job.wait_done(timeout=900)
        first = next((s for s in seen if s[1] >= steps // 10), seen[0])
        inner = [s for s in seen if first[1] < s[1] <= steps * 9 // 10]
        last = inner[-1] if inner else next(s for s in reversed(seen) if s[1] > first[1])
        examples = (last[1] - first[1]) * BATCH
        result = {
            "eps": examples / (last[0] - first[0]),
            "cpu_per_k": (last[2] - first[2]) * 1000 / examples,
            "window_s": last[0] - first[0],
            "records": sum(1 for s in seen if first[1] <= s[1] <= last[1]),
        }
    finally:
        job.close()
    try:
        import tensorflow as tf

        from etj_trainer.models.ctr import CtrModel
        from etj_trainer.task.evaluate import restore_model

        net = CtrModel(config)
        step = tf.Variable(0, dtype=tf.int64)
        path = tf.train.latest_checkpoint(str(workdir / "ckpt"))
        assert path, f"no checkpoint under {workdir / 'ckpt'}"
        restore_model(net, step, path)
        result["auc"] = _etj_auc(net, _load(data, "held_out"))
        return result
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


# --- PyTorch and TorchRec -------------------------------------------------------------------


def _torch_tower(model: str) -> Any:
    """etj's tower (``etj_trainer.models.dlrm`` / ``deep_fm``) in PyTorch: the module that
    maps (pooled embeddings [b, 26, 16], first-order sums [b] or None, dense) to logits."""
    import torch
    from torch import nn

    def mlp(width: int, units: list[int], relu_last: bool) -> nn.Sequential:
        layers: list[nn.Module] = []
        for i, n in enumerate(units):
            lin = nn.Linear(width, n)
            nn.init.xavier_uniform_(lin.weight)
            nn.init.zeros_(lin.bias)
            layers.append(lin)
            if i < len(units) - 1 or relu_last:
                layers.append(nn.ReLU())
            width = n
        return nn.Sequential(*layers)

    settings = MODELS[model]

    class Dlrm(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.bottom = mlp(DENSE, [*settings["dlrm"]["bottomUnits"], DIM], True)
            n = TABLES + 1
            self.rows, self.cols = torch.tril_indices(n, n, offset=-1)
            self.top = mlp(n * (n - 1) // 2 + DIM, [*settings["hiddenUnits"], 1], False)

        def forward(self, emb: Any, linear: Any, dense: Any) -> Any:
            bottom = self.bottom(dense)
            v = torch.cat([bottom.unsqueeze(1), emb], 1)
            gram = torch.bmm(v, v.transpose(1, 2))
            x = torch.cat([bottom, gram[:, self.rows, self.cols]], 1)
            return self.top(x).squeeze(1)

    class DeepFm(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.deep = mlp(TABLES * DIM + DENSE, [*settings["hiddenUnits"], 1], False)

        def forward(self, emb: Any, linear: Any, dense: Any) -> Any:
            deep = self.deep(torch.cat([emb.flatten(1), dense], 1)).squeeze(1)
            total = emb.sum(1)
            fm = 0.5 * (total.square() - emb.square().sum(1)).sum(1)
            return deep + linear + fm

    return Dlrm() if model == "dlrm" else DeepFm()


def _torch_auc(predict: Any, held: dict[str, Any]) -> float:
    import numpy as np
    import torch

    with torch.no_grad():
        out = [
            torch.sigmoid(predict(held, s)).numpy() for s in range(0, HELD_OUT - BATCH + 1, BATCH)
        ]
    n = len(out) * BATCH
    return _auc(held["label"][:n], np.concatenate(out))


def _train_torch(step: Any, batches: list[Any]) -> dict[str, Any]:
    for b in batches[:WARM_STEPS]:
        step(b)
    start, cpu0 = time.perf_counter(), _own_cpu()
    for b in batches[WARM_STEPS:]:
        step(b)
    seconds, cpu = time.perf_counter() - start, _own_cpu() - cpu0
    examples = (len(batches) - WARM_STEPS) * BATCH
    return {"eps": examples / seconds, "cpu_per_k": cpu * 1000 / examples}


def run_torch(model: str, data: Path, steps: int, threads: int) -> dict[str, Any]:
    import torch
    from torch import nn

    torch.set_num_threads(threads)
    torch.manual_seed(0)
    linear_tables = model == "deepfm"

    def bags(dim: int) -> nn.ModuleList:
        out = nn.ModuleList(
            nn.EmbeddingBag(ROWS, dim, mode="sum", sparse=True) for _ in range(TABLES)
        )
        for t in out:
            nn.init.uniform_(t.weight, -EMBEDDING_INIT, EMBEDDING_INIT)
        return out

    tables, linear = bags(DIM), bags(1) if linear_tables else None
    tower = _torch_tower(model)
    params = [*tables.parameters(), *(linear.parameters() if linear else []), *tower.parameters()]
    opt = torch.optim.Adagrad(params, lr=LR, initial_accumulator_value=INITIAL_ACCUMULATOR)
    loss_fn = nn.BCEWithLogitsLoss()

    def logits(cols: list[Any], dense: Any) -> Any:
        emb = torch.stack([t(c) for t, c in zip(tables, cols, strict=True)], 1)
        lin = (
            torch.stack([t(c) for t, c in zip(linear, cols, strict=True)], 1).sum((1, 2))
            if linear
            else None
        )
        return tower(emb, lin, dense)

    def split(arrays: dict[str, Any], s: int) -> tuple[list[Any], Any, Any]:
        ids = torch.from_numpy(arrays["ids"][s : s + BATCH])
        cols = [ids[:, i : i + 1].contiguous() for i in range(TABLES)]
        return (
            cols,
            torch.from_numpy(arrays["dense"][s : s + BATCH]),
            torch.from_numpy(arrays["label"][s : s + BATCH]),
        )

    train = _load(data, "train")
    batches = [split(train, s * BATCH) for s in range(steps)]

    def step(b: Any) -> None:
        cols, dense, label = b
        opt.zero_grad(set_to_none=True)
        loss_fn(logits(cols, dense), label).backward()
        opt.step()

    result = _train_torch(step, batches)
    result["auc"] = _torch_auc(lambda h, s: logits(*split(h, s)[:2]), _load(data, "held_out"))
    return result


def run_torchrec(model: str, data: Path, steps: int, threads: int) -> dict[str, Any]:
    import torch
    from fbgemm_gpu.split_embedding_configs import EmbOptimType
    from fbgemm_gpu.split_table_batched_embeddings_ops_common import EmbeddingLocation
    from fbgemm_gpu.split_table_batched_embeddings_ops_training import (
        ComputeDevice,
        SplitTableBatchedEmbeddingBagsCodegen,
    )
    from torch import nn
    from torchrec.sparse.jagged_tensor import KeyedJaggedTensor

    torch.set_num_threads(threads)
    torch.manual_seed(0)
    keys = [f"c{i + 1}" for i in range(TABLES)]
    # FBGEMM takes dimensions in multiples of 4: the first-order tables are 4 wide and
    # only their first column is read (the others get no gradient).
    dims = [DIM] * TABLES + ([4] * TABLES if model == "deepfm" else [])

    # TorchRec's fused EmbeddingBagCollection on CPU is this FBGEMM module (its
    # BatchedFusedEmbeddingBag): every table in one kernel, Adagrad applied in backward.
    tbe = SplitTableBatchedEmbeddingBagsCodegen(
        embedding_specs=[(ROWS, d, EmbeddingLocation.HOST, ComputeDevice.CPU) for d in dims],
        optimizer=EmbOptimType.EXACT_ADAGRAD,
        learning_rate=LR,
        eps=1e-7,
    )
    with torch.no_grad():
        for w in tbe.split_embedding_weights():
            w.uniform_(-EMBEDDING_INIT, EMBEDDING_INIT)
        for s in tbe.split_optimizer_states():
            s[0].fill_(INITIAL_ACCUMULATOR)
    tower = _torch_tower(model)
    opt = torch.optim.Adagrad(
        tower.parameters(), lr=LR, initial_accumulator_value=INITIAL_ACCUMULATOR
    )
    loss_fn = nn.BCEWithLogitsLoss()
    tables = len(dims)

    def kjt(arrays: dict[str, Any], s: int) -> tuple[Any, Any, Any]:
        ids = torch.from_numpy(arrays["ids"][s : s + BATCH])
        if model == "deepfm":
            ids = torch.cat([ids, ids], 1)  # the first-order tables take the same ids
        names = keys + [f"{k}__linear" for k in keys] if model == "deepfm" else keys
        features = KeyedJaggedTensor.from_lengths_sync(
            keys=names,
            values=ids.t().reshape(-1),
            lengths=torch.ones(tables * BATCH, dtype=torch.int32),
        )
        return (
            features,
            torch.from_numpy(arrays["dense"][s : s + BATCH]),
            torch.from_numpy(arrays["label"][s : s + BATCH]),
        )

    def logits(features: Any, dense: Any) -> Any:
        pooled = tbe(indices=features.values(), offsets=features.offsets())
        emb = pooled[:, : TABLES * DIM].reshape(-1, TABLES, DIM)
        lin = pooled[:, TABLES * DIM :: 4].sum(1) if model == "deepfm" else None
        return tower(emb, lin, dense)

    train = _load(data, "train")
    batches = [kjt(train, s * BATCH) for s in range(steps)]

    def step(b: Any) -> None:
        features, dense, label = b
        opt.zero_grad(set_to_none=True)
        loss_fn(logits(features, dense), label).backward()
        opt.step()

    result = _train_torch(step, batches)
    result["auc"] = _torch_auc(lambda h, s: logits(*kjt(h, s)[:2]), _load(data, "held_out"))
    return result


# --- the driver -----------------------------------------------------------------------------


def bench_cores(threads: int) -> list[int]:
    """The cores every contender is bound to: the first ``threads`` this process may use,
    so that each system, the PS job's five processes among them, runs on the same ones."""
    return sorted(os.sched_getaffinity(0))[: max(1, threads)]


def contender_env(system: str, threads: int) -> dict[str, str]:
    """What a contender's process gains: ``ETJ_CPUS`` for the single etj process only. The
    PS job's launcher divides its cores among its five tasks as ``etj run`` does
    (``machine_share``), and a value set here would override each task's share."""
    return {CPUS_ENV: str(threads)} if system in ("etj", "data") else {}


def _in_subprocess(args: list[str], env: dict[str, str], cores: list[int]) -> dict[str, Any]:
    out = subprocess.run(
        [sys.executable, __file__, *args],
        env=trainer_env(env),
        preexec_fn=lambda: os.sched_setaffinity(0, cores),
        capture_output=True,
        text=True,
        timeout=3600,
    )
    if out.returncode != 0:
        raise RuntimeError(f"{args} failed:\n{out.stdout[-2000:]}\n{out.stderr[-6000:]}")
    return dict(json.loads(out.stdout.strip().splitlines()[-1]))


def _missing(modules: str) -> str | None:
    """Why ``modules`` (comma-separated) do not import here, or None."""
    probe = subprocess.run(
        [sys.executable, "-c", f"import {modules}"], capture_output=True, text=True
    )
    if probe.returncode == 0:
        return None
    lines = probe.stderr.strip().splitlines()
    return lines[-1] if lines else f"import failed ({probe.returncode})"


# A PS window shorter than this, or holding fewer progress records, is no measure: its
# steps arrive a chunk at a time (~1 s of a worker's steps), so two records a second apart
# can say twice or half the rate (seen on a loaded machine: a 2.1 s window of 3 records).
MIN_WINDOW_S = 5.0
MIN_RECORDS = 5


def no_measure(res: dict[str, Any]) -> str:
    """Why a run's rate is no measure ("" when it is one): only a PS run has a window."""
    if "window_s" not in res:
        return ""
    if res["window_s"] < MIN_WINDOW_S:
        return f"its steady window was {res['window_s']:.1f} s (< {MIN_WINDOW_S:.0f} s)"
    if res["records"] < MIN_RECORDS:
        return f"its steady window held {res['records']} progress records (< {MIN_RECORDS})"
    return ""


def ratios(res: dict[str, Any], base: dict[str, Any] | None) -> tuple[str, str]:
    """The run's examples/s and its examples per CPU-second, each as a ratio to PyTorch's.
    Per CPU-second is the figure other load on the machine disturbs least: a descheduled
    process loses wall time, not CPU time."""
    if not base:
        return "", ""
    return (
        f"{res['eps'] / base['eps']:.2f}x torch",
        f"{base['cpu_per_k'] / res['cpu_per_k']:.2f}x/CPU-s",
    )


def _load_avg() -> str:
    return " ".join(f"{x:.1f}" for x in os.getloadavg())


def compare(model: str, examples: int, rounds: int, threads: int, systems: list[str]) -> None:
    steps = examples // BATCH // WARM_STEPS * WARM_STEPS
    data = Path(tempfile.mkdtemp(prefix="etj-peers-data-"))
    cores = bench_cores(threads)
    try:
        _in_subprocess(
            ["--run", "data", "--model", model, "--steps", str(steps), "--data", str(data)],
            contender_env("data", threads),
            cores,
        )
        best: dict[str, dict[str, Any]] = {}
        for system, modules in (("torch", "torch"), ("torchrec", "torch, fbgemm_gpu, torchrec")):
            missing = _missing(modules) if system in systems else None
            if missing:
                print(
                    f"  {system}: skipped, it does not import here ({missing}); "
                    "`make benchmark-deps` installs it",
                    flush=True,
                )
                systems = [s for s in systems if s != system]
        for r in range(rounds):
            for system in systems:
                args = [
                    "--run",
                    system,
                    "--model",
                    model,
                    "--steps",
                    str(steps),
                    "--data",
                    str(data),
                ]
                began = time.monotonic()
                res = _in_subprocess(
                    [*args, "--threads", str(threads)], contender_env(system, threads), cores
                )
                window = (
                    f", window {res['window_s']:.1f} s of {res['records']} progress records"
                    if "window_s" in res
                    else ""
                )
                short = no_measure(res)
                print(
                    f"  round {r + 1} {system:<9}: {res['eps']:9,.0f} examples/s, "
                    f"{res['cpu_per_k']:.3f} CPU-s per 1k examples, AUC {res['auc']:.4f} "
                    f"({time.monotonic() - began:.0f} s{window}, load {_load_avg()})"
                    + (f": no measure, {short}" if short else ""),
                    flush=True,
                )
                if not short and (system not in best or res["eps"] > best[system]["eps"]):
                    best[system] = res
    finally:
        shutil.rmtree(data, ignore_errors=True)
    base = best.get("torch")
    print(
        f"{model}: best of {rounds}, {steps * BATCH:,} examples each, batch {BATCH}, "
        f"{threads} threads, every system bound to cores {cores}"
    )
    for system, res in best.items():
        ratio, per_cpu = ratios(res, base)
        print(
            f"  {system:<9} {res['eps']:9,.0f} ex/s  {ratio:>12}  "
            f"{1000 / res['cpu_per_k']:8,.0f} ex per CPU-s  {per_cpu:>12}  AUC {res['auc']:.4f}"
        )
    for system in systems:
        if system not in best:
            print(f"  {system:<9} no measure in {rounds} round(s): see the rounds above")
    if "etj" in best:
        mine = best["etj"]
        print(
            f"  etj per core: {mine['eps'] / threads:,.0f} ex/s per core here "
            f"({1000 / mine['cpu_per_k']:,.0f} per CPU-second); DeepRec modelzoo, another "
            f"machine (8 vCPU Xeon 8369HC, batch 512), per vCPU: "
            + ", ".join(
                f"{label} {v / DEEPREC_VCPUS:,.0f}"
                for label, v in zip(
                    ("TF 1.15.5", "DeepRec fp32", "bf16"), DEEPREC[model], strict=True
                )
            )
        )
    print(f"  load average {_load_avg()}", flush=True)


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true", help="100k examples per run, one round")
    parser.add_argument("--examples", type=int, default=None, help="examples per run")
    parser.add_argument("--rounds", type=int, default=None, help="alternating rounds (best kept)")
    parser.add_argument(
        "--threads",
        type=int,
        default=len(os.sched_getaffinity(0)),
        help="threads of each single-process run (default: the cores this process may use)",
    )
    parser.add_argument("--models", default="dlrm,deepfm")
    parser.add_argument("--systems", default=",".join(SYSTEMS))
    parser.add_argument("--run", choices=["data", *SYSTEMS], help=argparse.SUPPRESS)
    parser.add_argument("--model", choices=sorted(MODELS), help=argparse.SUPPRESS)
    parser.add_argument("--steps", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--data", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.run:
        runs = {
            "data": lambda: make_data(args.model, args.steps * BATCH, args.data) or {},
            "etj": lambda: run_etj(args.model, args.data, args.steps),
            "etj-ps": lambda: run_etj_ps(args.model, args.data, args.steps),
            "torch": lambda: run_torch(args.model, args.data, args.steps, args.threads),
            "torchrec": lambda: run_torchrec(args.model, args.data, args.steps, args.threads),
        }
        print(json.dumps(runs[args.run]()))
        return 0
    examples = args.examples or (100_000 if args.quick else 600_000)
    rounds = args.rounds or (1 if args.quick else 2)
    systems = [s for s in args.systems.split(",") if s]
    print(
        f"etj peers: load average {_load_avg()}, {len(os.sched_getaffinity(0))} cores",
        flush=True,
    )
    for model in args.models.split(","):
        compare(model, examples, rounds, args.threads, systems)
    return 0


if __name__ == "__main__":
    sys.exit(main())

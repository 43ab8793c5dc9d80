"""Issue 38's mechanical part: big modules cut along their seams, both import cycles
untied, misleading names renamed, spent tools deleted, test_components.py cut into one
test module per product module, and every reference rewritten.

Run from the repository root:  python tests/tools/restructure_38.py [--no-format]

Re-runnable on a newer main, and idempotent (rerun it on a clean checkout of main:
``git checkout -B move origin/main`` or the like; on a half-moved tree it cannot know what
the removed modules imported):

- Modules are cut by *name*, never by line or copied text: ``SPLITS`` maps each top-level
  definition (class, function, assignment) of a module to the file it goes to (``COPY``:
  into each destination that uses it, e.g. a test helper). A definition travels with its
  decorators and the comments above it (everything between the end of the previous
  top-level statement and its own end). Each destination gets the source's imports it uses
  (the others are left out), imports of what it uses from the other destinations of the
  same cut, and the docstring ``DOCS`` gives it; an existing destination gets the
  definitions appended and their imports added after its own.
- Before anything changes, every module to cut is checked against its table; each
  top-level name without a line stops the script, all of them named at once::

      restructure_38: trainer_image/etj_trainer/task/state.py defines new_helper (line 556),
      which SPLITS has no destination for: add a line to its table in
      tests/tools/restructure_38.py, then rerun

  Other stops: a top-level statement that defines no name (move it by hand); a new module
  without a docstring in ``DOCS``; a file that imports from an old module a name it
  neither defined nor imported; a module object (``from pkg import state as core``) used
  for names now in several modules; a destination that already defines a name
  differently; both ends of a plain move present.
- A module already cut (its source gone, or no name left to move) is left as it is; file
  moves happen only when their source exists; patches apply only where their old text is
  found (else a WARNING says so); rewrites map old names only.

What it does, in order:
1. plain moves (``git mv``): ``render/names.py`` -> ``render/validate_names.py`` (it
   validates) and the test modules of cut modules (``test_objects*`` -> ``test_build*``,
   ``test_pod_restricted``; ``test_roles`` -> ``test_threads``);
2. the cuts (``SPLITS``): ``api/spec.py`` into the package ``api/spec/`` by section (its
   ``__init__`` re-exports every public name, so ``from etj.api.spec import X`` keeps
   working); ``render/objects.py`` into ``meta``, ``settings``, ``trainer_config``,
   ``pod``, ``build`` (``NetworkPolicySettings`` joins ``settings``: the cycle with
   ``networkpolicy`` is gone); ``decide.py``'s types into ``reconcile/decision.py``, its
   pass state into ``policies/pass_state.py``, its finalisation, failure and recovery
   rules into ``policies/finish.py``, ``failures.py``, ``recovery.py`` (and
   ``gang_unavailable`` into ``policies/gang.py``); ``task/state.py``'s chunk helpers into
   ``task/step.py``; ``task/progress.py``'s ``emit`` into ``task/events.py`` (the cycle
   with ``termination`` is gone); ``task/roles.py``'s thread sizing into
   ``task/threads.py``; ``test_components.py`` into one test module per product module
   (its ``tf`` fixture into tests/trainer/conftest.py);
3. every ``from <old module> import <name>`` (any indentation) is rewritten to the name's
   new module (a re-exported public name of ``etj.api.spec`` stays), as are module objects
   used for moved names, dotted names (``etj.core.render.objects.build_pod``) and paths in
   every text file under ``ROOTS``;
4. renames: ``Task.is_chief()`` -> ``is_leader()``, ``policies.backoff.wait_for`` ->
   ``restart_wait``, the stale logger names (``etj.cache``, ``etj.leader``) -> ``__name__``;
5. guarded patches: the lazy imports the cycles needed become plain imports; docstrings
   that named what moved; an ``acyclic_siblings`` import-linter contract (``make lint``
   fails on an import cycle);
6. spent tools deleted (``tests/tools/restructure_24.py``, ``tests/tools/mirror_tests.py``);
7. ``ruff check --fix`` and ``ruff format`` (from .venv when there is one), ``git add``.

Not mechanical, left for the hand-made part of #38: ``TrainingState``'s step methods stay
in the class (``task/state.py`` keeps the class whole; ``step.py`` has the chunk helpers);
the helpers moved out of ``decide.py`` keep their private names (``_Pass``, ``_finished``,
...), imported across modules.
"""

from __future__ import annotations

import argparse
import ast
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path.cwd()
SELF = "tests/tools/restructure_38.py"
COPY = "*"  # a destination: copied into every destination that uses it

API = "operator/etj/api"
RENDER = "operator/etj/core/render"
RECONCILE = "operator/etj/core/reconcile"
POLICIES = f"{RECONCILE}/policies"
TASK = "trainer_image/etj_trainer/task"
TT = "tests/trainer/etj_trainer"

# Where references are rewritten.
ROOTS = [
    "operator",
    "trainer_image",
    "tests",
    "benchmarks",
    "examples",
    "charts",
    ".ci",
    "README.md",
    "Makefile",
    "pyproject.toml",
]

# Plain moves: old path -> new path.
MOVES: list[tuple[str, str]] = [
    # It checks the derived names (it renders nothing of its own).
    (f"{RENDER}/names.py", f"{RENDER}/validate_names.py"),
    # Tests of cut modules, beside what they test.
    (f"{TT}/task/test_roles.py", f"{TT}/task/test_threads.py"),
    ("tests/unit/etj/core/render/test_objects.py", "tests/unit/etj/core/render/test_build.py"),
    (
        "tests/unit/etj/core/render/test_objects_restricted.py",
        "tests/unit/etj/core/render/test_pod_restricted.py",
    ),
    (
        "tests/unit/etj/core/render/test_objects_storage.py",
        "tests/unit/etj/core/render/test_build_storage.py",
    ),
]

DELETE = ["tests/tools/restructure_24.py", "tests/tools/mirror_tests.py"]


@dataclass
class Split:
    """One module cut by name: ``table`` maps each top-level name to its destination
    file (the source itself: it stays; ``COPY``: copied where used)."""

    src: str
    table: dict[str, str]
    # The source becomes a package of this directory whose __init__ re-exports every
    # public name (the source file is removed).
    package: str | None = None
    # Where a bare mention of the old module (prose, paths) points once it is gone.
    bare: str | None = None
    # Drop "# --- section ---" comment lines (a test module's sections).
    drop_sections: bool = False


def _t(dest: str, *names: str) -> dict[str, str]:
    return dict.fromkeys(names, dest)


SPEC = f"{API}/spec"
SPLITS: list[Split] = [
    Split(
        f"{API}/spec.py",
        package=SPEC,
        table={
            "_cel": COPY,
            **_t(f"{SPEC}/strategy.py", "Strategy"),
            **_t(
                f"{SPEC}/sizing.py",
                "Optimizer",
                "OPTIMIZER_SLOTS",
                "ROW_SLOT_OPTIMIZERS",
                "DTYPE_BYTES",
                "SLOT_DTYPE_BYTES",
                "slot_bytes_per_row",
                "table_row_bytes",
                "largest_variable_row_bytes",
            ),
            **_t(
                f"{SPEC}/replicas.py",
                "ResourceRequirements",
                "ReplicaSpec",
                "ChiefSpec",
                "MAX_PS",
                "PsSpec",
                "ReplicasSpec",
            ),
            **_t(f"{SPEC}/model.py", "EmbeddingTable", "ModelSpec"),
            **_t(
                f"{SPEC}/data.py",
                "SyntheticData",
                "_FILE_RULES",
                "FileData",
                "ValidationData",
                "DataSpec",
                "UNSUPPORTED_SCHEMES",
                "UNSUPPORTED_SCHEME_REASON",
            ),
            **_t(
                f"{SPEC}/training.py",
                "DEFAULT_STEPS_PER_EXECUTION",
                "MAX_STEPS_PER_EXECUTION",
                "TrainingSpec",
                "ShardingSpec",
            ),
            **_t(
                f"{SPEC}/checkpoint.py",
                "GCS_CREDENTIALS_MOUNT",
                "CheckpointStorage",
                "SecretKey",
                "_CHECKPOINT_RULES",
                "CheckpointSpec",
                "CHECKPOINT_NOT_SHARED",
            ),
            **_t(
                f"{SPEC}/run_policy.py",
                "RestartPolicy",
                "CleanPodPolicy",
                "SuccessPolicy",
                "RestartBackoff",
                "GangScheduler",
                "SchedulingPolicy",
                "RunPolicy",
            ),
            **_t(f"{SPEC}/pod.py", "EnvVar", "PodTemplateOverrides", "Placement"),
            **_t(
                f"{SPEC}/job.py",
                "_EPOCH_RULES",
                "_DATA_SCHEME_RULES",
                "_managed_by",
                "IMMUTABLE_MANAGED_BY",
                "_workers_run_own_program",
                "_chief_count",
                "CHIEF_RULES",
                "EmbeddingTrainingJobSpec",
            ),
        },
    ),
    Split(
        f"{RENDER}/objects.py",
        bare=f"{RENDER}/pod.py",
        table={
            **_t(f"{RENDER}/settings.py", "RenderSettings"),
            **_t(
                f"{RENDER}/meta.py",
                "_SCALARS",
                "_plain",
                "_metadata",
                "common_labels",
                "job_selector",
                "owner_reference",
                "config_map_name",
                "checkpoint_claim_name",
            ),
            **_t(
                f"{RENDER}/trainer_config.py",
                "checkpoint_dir",
                "build_trainer_config",
            ),
            **_t(
                f"{RENDER}/pod.py",
                "replica_set",
                "_role_spec",
                "role_template",
                "_role_resources",
                "replica_resources",
                "_volumes",
                "model_code_config_map",
                "NODE_LOSS_TAINTS",
                "placement",
                "_pod_overrides",
                "build_pod",
                "build_pods",
            ),
            **_t(
                f"{RENDER}/build.py",
                "build_checkpoint_claim",
                "build_service",
                "build_config_map",
                "build_gang_object",
                "build_objects",
            ),
        },
    ),
    Split(
        f"{RENDER}/networkpolicy.py",
        table={
            **_t(f"{RENDER}/settings.py", "NetworkPolicySettings"),
            **_t(f"{RENDER}/networkpolicy.py", "build_network_policy"),
        },
    ),
    Split(
        f"{RECONCILE}/decide.py",
        table={
            **_t(
                f"{RECONCILE}/decision.py",
                "Event",
                "World",
                "Decision",
                "iso",
                "parse_time",
            ),
            # (Not beside the types: it calls policies, which call it.)
            **_t(f"{POLICIES}/pass_state.py", "_Pass"),
            **_t(f"{POLICIES}/gang.py", "gang_unavailable"),
            **_t(
                f"{POLICIES}/finish.py",
                "failed_status",
                "_invalid",
                "_leader_did_not_exit",
                "_finished",
                "_suspend",
            ),
            **_t(
                f"{POLICIES}/failures.py",
                "_failures",
                "_handle_failures",
                "_requeued",
                "_back_off",
                "_count_role_restarts",
                "_oom",
            ),
            **_t(f"{POLICIES}/recovery.py", "_restarted", "_forget_recovered"),
            **_t(
                f"{RECONCILE}/decide.py",
                "decide",
                "_warm_start_pending",
                "_warm_start",
                "_gang",
                "_scale",
                "_create_missing",
                "_summarise",
            ),
        },
    ),
    Split(
        f"{TASK}/state.py",
        table={
            **_t(
                f"{TASK}/step.py",
                "UNROLL",
                "LONG_UNROLL",
                "LONG_UNROLL_MIN_STEPS",
                "block_steps",
                "histogram",
                "ChunkResult",
                "unpack_chunk",
            ),
            **_t(
                f"{TASK}/state.py",
                "SlotStore",
                "TrainingState",
                "_update_of",
                "checkpoint_keys",
                "_group_slots",
                "variable_sum",
            ),
        },
    ),
    Split(
        f"{TASK}/progress.py",
        table={
            **_t(f"{TASK}/events.py", "emit"),
            **_t(
                f"{TASK}/progress.py",
                "log",
                "AUC_WINDOW",
                "Metrics",
                "is_leader",
                "metrics_port",
                "ProgressReporter",
                "write_scalars",
            ),
        },
    ),
    Split(
        f"{TASK}/roles.py",
        table={
            **_t(
                f"{TASK}/threads.py",
                "Threads",
                "cpu_budget",
                "cgroup_cpus",
                "thread_counts",
                "configure_threads",
            ),
            **_t(
                f"{TASK}/roles.py",
                "STOP_SIGNALS",
                "run_server",
                "run_ps_chief",
                "run_synchronous",
                "_numpy",
                "resolve_epochs",
                "log_placement",
            ),
        },
    ),
    Split(
        f"{TT}/test_components.py",
        drop_sections=True,
        table={
            **_t(COPY, "_config_text", "_run_trainer", "_CHILD", "_model_spec"),
            # One fixture for every trainer test (some modules bind ``tf`` at the top).
            **_t("tests/trainer/conftest.py", "tf"),
            **_t(COPY, "_tensorboard_scalars"),
            **_t(
                f"{TT}/test_config.py",
                "test_config_flag_wins_over_env",
                "test_config_errors_name_the_field",
            ),
            **_t(f"{TT}/task/test_cluster.py", "test_tf_config_parsing"),
            **_t(
                f"{TT}/test_main.py",
                "test_usage_errors_exit_2",
                "test_local_run_on_files_trains_and_exits_0",
            ),
            **_t(f"{TT}/test_exitcodes.py", "test_exit_code_classes"),
            **_t(
                f"{TT}/task/test_supervisor.py",
                "test_supervisor_watchdog_kills_a_silent_child",
                "test_watchdog_leaves_the_stacks_and_a_termination_message",
                "test_supervisor_passes_exit_codes_and_sigterm",
            ),
            **_t(
                f"{TT}/task/test_termination.py",
                "test_termination_text_is_one_line_within_the_kubernetes_limit",
            ),
            **_t(
                f"{TT}/task/test_progress.py",
                "test_the_chiefs_completion_message_is_read_back_by_the_operator",
                "test_the_dynamic_tables_the_chief_reports_reach_status_from_page_and_line",
            ),
            **_t(
                f"{TT}/task/test_loop.py",
                "test_the_watchdog_counts_steps_not_the_tracing_of_the_step",
            ),
            **_t(f"{TT}/task/test_auc.py", "test_auc_from_histogram_matches_pairwise_auc"),
            **_t(
                f"{TT}/task/test_optim.py",
                "test_sparse_updates_touch_only_batch_rows",
                "test_dedup_sums_repeated_rows",
            ),
            **_t(
                f"{TT}/data/test_pipeline.py",
                "test_synthetic_data_is_skewed_and_learnable",
                "test_files_roundtrip_and_sharding",
                "test_missing_files_are_a_clear_error",
            ),
            **_t(f"{TT}/data/test_batch.py", "test_a_feature_schema_trains_on_synthetic_data"),
            **_t(
                f"{TT}/task/test_export.py",
                "test_export_serves_the_trained_model_from_mapped_tables",
            ),
        },
    ),
]

# Docstrings of the modules the cuts create (and of those whose old one would be untrue).
DOCS: dict[str, str] = {
    f"{SPEC}/__init__.py": """The ``spec`` of an EmbeddingTrainingJob: what a user writes, one module per section.

These models are the single source of truth for the API: the CRD's OpenAPI schema is
generated from them (``etj.core.crd``), ``etj validate`` uses them, and the trainer reads the
model/data/training parts from the rendered trainer config. Validation that a schema can
express lives in the section's module as field constraints (or as CEL rules under
``x-kubernetes-validations`` for cross-field rules) so the API server rejects a bad job
before the operator sees it; checks only code can make (does the plan fit?) live in
``etj.core.validation``.

The sections: ``strategy``, ``sizing`` (optimizers, dtypes and the bytes of a table row),
``replicas``, ``model``, ``data``, ``training`` (and sharding), ``checkpoint``,
``run_policy``, ``pod`` (pod overrides and placement) and ``job`` (the whole spec and the
rules that join its sections). This package re-exports every public name, so
``from etj.api.spec import X`` reads any of them.

Pure: no I/O, no environment, no kopf or Kubernetes client.
""",
    f"{SPEC}/strategy.py": """``spec.strategy``: how a job distributes its training.

Pure: no I/O, no environment, no kopf or Kubernetes client.
""",
    f"{SPEC}/sizing.py": """Optimizers and table dtypes, and the bytes of one table row with its optimizer slots
(what the planner counts against a ps's memory).

Pure: no I/O, no environment, no kopf or Kubernetes client.
""",
    f"{SPEC}/replicas.py": """``spec.replicas``: how many replicas of each role, and what each gets.

Pure: no I/O, no environment, no kopf or Kubernetes client.
""",
    f"{SPEC}/model.py": """``spec.model``: the embedding tables, the input features and the tower.

Pure: no I/O, no environment, no kopf or Kubernetes client.
""",
    f"{SPEC}/data.py": """``spec.data``: where training examples come from (synthetic or files, held-out files),
and the storage schemes TensorFlow cannot read.

Pure: no I/O, no environment, no kopf or Kubernetes client.
""",
    f"{SPEC}/training.py": """``spec.training`` (the training loop) and ``spec.sharding`` (how tables are split over
parameter servers).

Pure: no I/O, no environment, no kopf or Kubernetes client.
""",
    f"{SPEC}/checkpoint.py": """``spec.checkpoint``: where and how often training state is saved, and the rules on it.

Pure: no I/O, no environment, no kopf or Kubernetes client.
""",
    f"{SPEC}/run_policy.py": """``spec.runPolicy``: restarts and their back-off, deadlines, success, clean-up and gang
scheduling.

Pure: no I/O, no environment, no kopf or Kubernetes client.
""",
    f"{SPEC}/pod.py": """``spec.podTemplate`` (fields merged into every replica's Pod) and ``spec.placement``
(spreading replicas over nodes).

Pure: no I/O, no environment, no kopf or Kubernetes client.
""",
    f"{SPEC}/job.py": """``EmbeddingTrainingJobSpec``: the whole spec, and the rules that join its sections (the
chief rules, epochs and data, data schemes, the immutable ``managedBy``).

Pure: no I/O, no environment, no kopf or Kubernetes client.
""",
    f"{RENDER}/settings.py": """What the operator (or ``etj render``) decides beyond the job itself: ``RenderSettings``,
and the NetworkPolicy's ``NetworkPolicySettings`` among them.

Plain values, no logic beyond parsing a flag; nothing here reads the environment.
""",
    f"{RENDER}/meta.py": """What every rendered object shares: its metadata (labels, owner reference, the job's
selector), the names of the job's objects, and ``_plain``.

Every value that comes from the job or the settings goes through ``_plain``: a fresh copy
as the JSON it stands for (mappings' keys sorted, enums as their values), so an object
shares nothing with the job and renders the same bytes every time. Pure: no I/O.
""",
    f"{RENDER}/trainer_config.py": """The trainer's config for a job: what the trainer reads from its ConfigMap (model, data,
training, the shard plan, the checkpoint directory). Pure: no I/O.
""",
    f"{RENDER}/pod.py": """The Pod of each replica: its tasks (``replica_set``), resources raised to what the plan
needs, volumes, placement over nodes, TF_CONFIG and environment, merged with the role's
template. TF_CONFIG is built by ``etj.core.tfconfig`` with ``json``.

Objects are built as Python data (dicts and lists), as the API server will store them; no
text templates, no YAML parsed back. Pure: no I/O, no environment.
""",
    f"{RENDER}/build.py": """Every object the operator creates for a job (``build_objects``): the NetworkPolicy, the
Service, the trainer's ConfigMap, the checkpoint claim, the gang object, then the Pods.

Objects are built as Python data (dicts and lists), as the API server will store them.
Nothing here talks to the API server or reads the environment: the operator's settings
come in as ``RenderSettings``.
""",
    f"{RECONCILE}/decision.py": """The types of one reconcile pass: the observed ``World`` in, the ``Decision`` out and its
``Event`` records; the time format of the status.

Pure: no I/O; the caller passes the time.
""",
    f"{POLICIES}/pass_state.py": """``_Pass``: the mutable state of one decision (the world, the new status, the Decision
being made), so each rule of ``decide`` is a short function of it.

Pure: no I/O; the caller passes the time.
""",
    f"{POLICIES}/finish.py": """Passes that end early: an invalid spec (Failed), a leader that reported its last step
and did not exit (Succeeded), a finished job (clean-up and TTL), a suspended one (pods
deleted, status and checkpoints kept); and the status of a job that cannot even be parsed
(``failed_status``).

Pure: no I/O; each rule changes the pass it is given.
""",
    f"{POLICIES}/failures.py": """Failed replicas: which failures count, restarting their group (or failing the job when
the restart policy or backoffLimit says so), the restart back-off, a Kueue requeue, and a
raised memory limit after an OOM kill.

Pure: no I/O; each rule changes the pass it is given.
""",
    f"{POLICIES}/recovery.py": """Replicas coming back: a restarted replica's back-off entry, and the failure counts of
replicas that have run cleanly for resetAfterSeconds.

Pure: no I/O; each rule changes the pass it is given.
""",
    f"{TASK}/step.py": """A chunk of training steps as the loop sees it: how many steps a chunk writes out per
loop iteration (``block_steps``), its prediction histogram (what the chief turns into
AUC) and its results (``ChunkResult``, ``unpack_chunk``).

Strategy-neutral; it trains nothing itself (``etj_trainer.task.state`` does).
""",
    f"{TASK}/events.py": """The trainer's structured records: one JSON line per event on stdout (read by the local
runner and log pipelines).

No TensorFlow, numpy or Prometheus: the termination path imports it too.
""",
    f"{TASK}/threads.py": """A replica's threads: from its CPU budget (``etj run``'s share, a container's quota)
to TensorFlow's intra-op and inter-op pools.

Called once per process before TensorFlow runs an op; it decides nothing else.
""",
    f"{TT}/test_config.py": '"""The trainer\'s config: where it is read from, and errors that name the field."""\n',
    f"{TT}/task/test_cluster.py": '"""TF_CONFIG as the trainer parses and checks it."""\n',
    f"{TT}/test_main.py": '"""``python -m etj_trainer`` as a process: usage errors, and a local run on files."""\n',
    f"{TT}/test_exitcodes.py": '"""The trainer\'s exit codes: which are retried."""\n',
    f"{TT}/task/test_supervisor.py": '"""The watchdog supervisor: it kills a silent child, leaves the stacks and a termination\nmessage, and passes exit codes and SIGTERM."""\n',
    f"{TT}/task/test_progress.py": '"""The progress reporter: what the chief reports, the operator reads back (completion\nmessage, dynamic tables)."""\n',
    f"{TT}/task/test_auc.py": '"""AUC from a prediction histogram."""\n',
    f"{TT}/task/test_optim.py": '"""The sparse optimizers: updates touch only the batch\'s rows; repeated rows sum."""\n',
    f"{TT}/task/test_export.py": '"""The export: the trained model served from mapped tables."""\n',
}

# Identifier renames: (defining module's file, old name, new name). Rewritten in that file
# and in every file that imports the name from it.
RENAMES: list[tuple[str, str, str]] = [
    # The tests' deadline helper is ``wait_for``; this one says how long a replica waits.
    (f"{POLICIES}/backoff.py", "wait_for", "restart_wait"),
]


def git(*args: str, check: bool = True) -> str:
    return subprocess.run(
        ["git", *args], cwd=ROOT, check=check, capture_output=True, text=True
    ).stdout


def say(msg: str) -> None:
    print(f"restructure_38: {msg}")


def fail(msg: str) -> None:
    raise SystemExit(f"restructure_38: {msg}")


def dotted(path: str) -> str:
    """operator/etj/a/b.py -> etj.a.b; trainer_image/etj_trainer/x.py -> etj_trainer.x."""
    p = path.removesuffix(".py").removesuffix("/__init__")
    for base in ("operator/", "trainer_image/"):
        if p.startswith(base):
            return p[len(base) :].replace("/", ".")
    return p.replace("/", ".")


def tracked(prefix: str) -> list[str]:
    return [p for p in git("ls-files", "--", prefix).splitlines() if p]


# --- 1. plain moves -------------------------------------------------------------------


def do_moves() -> None:
    for src, dst in MOVES:
        s, d = ROOT / src, ROOT / dst
        if not s.exists():
            continue
        if d.exists():
            fail(f"both {src} and {dst} exist: merge them by hand, then rerun")
        d.parent.mkdir(parents=True, exist_ok=True)
        if tracked(src):
            git("mv", src, dst)
        else:
            shutil.move(str(s), str(d))
            git("add", dst)
        say(f"moved {src} -> {dst}")


# --- 2. the cuts ----------------------------------------------------------------------


@dataclass(eq=False)
class Chunk:
    name: str  # the (first) name it defines
    names: list[str]
    text: str
    line: int
    index: int  # its place among the module's chunks
    blank: int  # blank lines before it in the module
    is_def: bool  # a class or function


@dataclass(eq=False)
class Parsed:
    split: Split
    doc: str | None
    future: bool
    imports: list[ast.stmt]  # top-level imports and ``if TYPE_CHECKING:`` blocks
    chunks: list[Chunk]
    # Names the module imported: bound name -> (module, name).
    origins: dict[str, tuple[str, str]] = field(default_factory=dict)


# Cut module's file -> {name -> its destination file}.
Where = dict[str, dict[str, str]]


def defined_names(node: ast.stmt) -> list[str]:
    if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
        return [node.name]
    targets: list[ast.expr] = []
    if isinstance(node, ast.Assign):
        targets = node.targets
    elif isinstance(node, ast.AnnAssign):
        targets = [node.target]
    names = []
    for t in targets:
        for n in ast.walk(t):
            if isinstance(n, ast.Name):
                names.append(n.id)
    return names


def is_type_checking_block(node: ast.stmt) -> bool:
    return (
        isinstance(node, ast.If)
        and ast.unparse(node.test) in ("TYPE_CHECKING", "typing.TYPE_CHECKING")
        and all(isinstance(b, ast.Import | ast.ImportFrom) for b in node.body)
        and not node.orelse
    )


def parse_module(split: Split) -> Parsed | None:
    path = ROOT / split.src
    if not path.exists():
        return None
    text = path.read_text()
    lines = text.splitlines(keepends=True)
    tree = ast.parse(text)
    body = list(tree.body)
    doc = None
    first = body[0] if body else None
    if (
        isinstance(first, ast.Expr)
        and isinstance(first.value, ast.Constant)
        and isinstance(first.value.value, str)
    ):
        doc = "".join(lines[first.lineno - 1 : first.end_lineno])
        body = body[1:]
    parsed = Parsed(split, doc, False, [], [])
    prev_end = tree.body[0].end_lineno if doc else 0
    unknown: list[str] = []
    for node in body:
        start, end = prev_end + 1, node.end_lineno or node.lineno
        prev_end = end
        if isinstance(node, ast.ImportFrom) and node.module == "__future__":
            parsed.future = True
            continue
        if isinstance(node, ast.Import | ast.ImportFrom) or is_type_checking_block(node):
            parsed.imports.append(node)
            for imp in [node] if not isinstance(node, ast.If) else node.body:
                for a in imp.names:  # type: ignore[attr-defined]
                    if isinstance(imp, ast.ImportFrom) and imp.module:
                        parsed.origins[a.asname or a.name] = (imp.module, a.name)
            continue
        names = defined_names(node)
        if not names:
            fail(
                f"{split.src}:{node.lineno}: a top-level statement that defines no name "
                f"({ast.unparse(node)[:60]!r}): move it by hand, then rerun"
            )
        chunk_lines = lines[start - 1 : end]
        blank = 0
        while chunk_lines and not chunk_lines[0].strip():
            chunk_lines.pop(0)
            blank += 1
        if split.drop_sections:
            chunk_lines = [ln for ln in chunk_lines if not ln.startswith("# ---")]
            while chunk_lines and not chunk_lines[0].strip():
                chunk_lines.pop(0)
        for n in names:
            if n not in split.table:
                unknown.append(f"{n} (line {node.lineno})")
        is_def = isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef)
        chunk = Chunk(
            names[0], names, "".join(chunk_lines), node.lineno, len(parsed.chunks), blank, is_def
        )
        parsed.chunks.append(chunk)
    tail = "".join(lines[prev_end:]).strip()
    if tail:
        say(f"WARNING: {split.src}: text after the last statement is dropped: {tail[:60]!r}")
    if unknown:
        fail(
            f"{split.src} defines {', '.join(unknown)}, which SPLITS has no destination for: "
            "add a line to its table in tests/tools/restructure_38.py, then rerun"
        )
    return parsed


def used_names(code: str) -> set[str]:
    """Names a piece of code reads (and fixture parameters: pytest passes them by name)."""
    out: set[str] = set()
    tree = ast.parse(code)
    annotations: list[ast.expr | None] = []
    for n in ast.walk(tree):
        if isinstance(n, ast.Name):
            out.add(n.id)
        elif isinstance(n, ast.arg):
            out.add(n.arg)
            annotations.append(n.annotation)
        elif isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef):
            annotations.append(n.returns)
        elif isinstance(n, ast.AnnAssign):
            annotations.append(n.annotation)
    for a in annotations:  # string annotations name what they need too
        for c in ast.walk(a) if a is not None else ():
            if isinstance(c, ast.Constant) and isinstance(c.value, str):
                out.update(re.findall(r"[A-Za-z_]\w*", c.value))
    return out


def import_text(node: ast.stmt, used: set[str], skip: set[str]) -> str:
    """``node`` with only the names ``used`` (and not ``skip``: defined here); '' if none."""
    if isinstance(node, ast.If):
        inner = [import_text(b, used, skip) for b in node.body]
        inner = [i for i in inner if i]
        if not inner:
            return ""
        used.add("TYPE_CHECKING")
        return "if TYPE_CHECKING:\n" + "".join("    " + i for i in inner)
    kept = []
    for a in node.names:  # type: ignore[attr-defined]
        bound = a.asname or a.name.split(".")[0]
        if bound in used and bound not in skip:
            kept.append(a.name + (f" as {a.asname}" if a.asname else ""))
    if not kept:
        return ""
    if isinstance(node, ast.Import):
        return "".join(f"import {k}\n" for k in kept)
    assert isinstance(node, ast.ImportFrom)
    module = "." * node.level + (node.module or "")
    return f"from {module} import {', '.join(kept)}\n"


def existing_names(path: Path) -> dict[str, str]:
    if not path.exists():
        return {}
    text = path.read_text()
    lines = text.splitlines(keepends=True)
    out = {}
    for node in ast.parse(text).body:
        for n in defined_names(node):
            out[n] = "".join(lines[node.lineno - 1 : node.end_lineno])
    return out


def plan_cuts(parsed: list[Parsed]) -> dict[str, list[tuple[Parsed, Chunk]]]:
    """Destination file -> its chunks (copies included where used), in source order."""
    dests: dict[str, list[tuple[Parsed, Chunk]]] = {}
    for p in parsed:
        for c in p.chunks:
            dest = p.split.table[c.name]
            if dest != COPY:
                dests.setdefault(dest, []).append((p, c))
    # Copies: into each destination of their split that uses them (to a fixed point).
    for p in parsed:
        copies = [c for c in p.chunks if p.split.table[c.name] == COPY]
        changed = True
        while changed:
            changed = False
            for items in dests.values():
                if not any(q is p for q, _ in items):
                    continue
                used: set[str] = set()
                for _, c in items:
                    used |= used_names(c.text)
                for c in copies:
                    if c.name in used and not any(x is c for _, x in items):
                        items.append((p, c))
                        changed = True
        for items in dests.values():
            items.sort(key=lambda pc: (parsed.index(pc[0]), pc[1].line))
    return dests


def module_parts(
    dest: str, items: list[tuple[Parsed, Chunk]], where: Where, skip: set[str] | None = None
) -> tuple[str, str]:
    """The imports ``items`` need at ``dest`` (of their sources' imports, those they use;
    of what the other destinations of their cuts define, what they use) and their code.
    ``skip``: names ``dest`` defines already."""
    code = joined([(p, relocated(c, p.split.src, dest)) for p, c in items])
    defined = {n for _, c in items for n in c.names} | (skip or set())
    used = used_names(code)
    own = dotted(dest)
    imports: list[str] = []
    seen: set[str] = set()
    sources = list(dict.fromkeys(p.split.src for p, _ in items))
    nodes = [n for p in dict.fromkeys(p for p, _ in items) for n in p.imports]
    nodes = [n for n in nodes if not (isinstance(n, ast.ImportFrom) and n.module == own)]
    # ``if TYPE_CHECKING:`` blocks first: one that stays needs TYPE_CHECKING imported.
    blocks = [import_text(n, used, defined) for n in nodes if isinstance(n, ast.If)]
    for t in [
        *(import_text(n, used, defined) for n in nodes if not isinstance(n, ast.If)),
        *blocks,
    ]:
        if t and t not in seen:
            seen.add(t)
            imports.append(t)
    siblings: dict[str, list[str]] = {}
    for name in sorted(used - defined):
        other = next((where[s][name] for s in sources if name in where[s]), None)
        if other is not None and other != dest:
            siblings.setdefault(dotted(other), []).append(name)
    for module, names in sorted(siblings.items()):
        imports.append(f"from {module} import {', '.join(names)}\n")
    return "".join(imports), code


def relocated(c: Chunk, src: str, dest: str) -> Chunk:
    """``c`` as code of ``dest``: a path found from ``__file__`` (``parents[N]``) counts the
    folders between them; any other use of ``__file__`` moved to another depth stops it."""
    depth = dest.count("/") - src.count("/")
    if not depth or "__file__" not in c.text:
        return c
    text = re.sub(
        r"(__file__\)(?:\.resolve\(\))?\.parents\[)(\d+)\]",
        lambda m: f"{m[1]}{int(m[2]) + depth}]",
        c.text,
    )
    if len(re.findall(r"__file__", text)) != len(
        re.findall(r"__file__\)(?:\.resolve\(\))?\.parents\[", text)
    ):
        fail(f"{src}: {c.name} uses __file__ and moves to {dest}, another folder: move it by hand")
    return Chunk(c.name, c.names, text, c.line, c.index, c.blank, c.is_def)


def joined(items: list[tuple[Parsed, Chunk]]) -> str:
    """The chunks' code: neighbours in their module as far apart as they were there."""
    out = ""
    for i, (p, c) in enumerate(items):
        if i:
            q, b = items[i - 1]
            if q is p and b.index + 1 == c.index:
                out += "\n" * (c.blank + 1)
            else:
                out += "\n\n\n" if (b.is_def or c.is_def) else "\n\n"
        out += c.text.rstrip("\n")
    return out + "\n"


def quoted(doc: str) -> str:
    """A docstring as written: ``DOCS`` gives its text, a source module its literal."""
    doc = doc.rstrip("\n")
    return doc if doc.startswith(('"""', "'''")) else '"""' + doc + '\n"""'


def module_text(dest: str, items: list[tuple[Parsed, Chunk]], where: Where, doc: str) -> str:
    imports, code = module_parts(dest, items, where)
    doc = quoted(doc)
    future = any(p.future for p, _ in items)
    head = doc.rstrip("\n") + "\n\n"
    head += "from __future__ import annotations\n\n" if future else ""
    return head + imports + "\n\n" + code


def append_text(path: Path, items: list[tuple[Parsed, Chunk]], where: Where) -> str:
    """An existing module with ``items`` appended, the imports they need added after its
    own (a name it already defines, identically, is not added again)."""
    text = path.read_text()
    have = existing_names(path)
    new_items = []
    for p, c in items:
        if c.name in have:
            if have[c.name].strip() not in c.text:
                fail(
                    f"{path.relative_to(ROOT)} already defines {c.name}, differently: merge by hand"
                )
            continue
        new_items.append((p, c))
    if not new_items:
        return text
    imports, code = module_parts(str(path.relative_to(ROOT)), new_items, where, set(have))
    tree = ast.parse(text)
    last_import = max(
        (n.end_lineno or 0 for n in tree.body if isinstance(n, ast.Import | ast.ImportFrom)),
        default=tree.body[0].end_lineno or 0 if tree.body else 0,
    )
    lines = text.splitlines(keepends=True)
    head, rest = "".join(lines[:last_import]), "".join(lines[last_import:])
    return head + imports + rest.rstrip("\n") + "\n\n\n" + code


def reexport_init(package: str, parsed: Parsed) -> str:
    by_module: dict[str, list[str]] = {}
    for c in parsed.chunks:
        dest = parsed.split.table[c.name]
        for n in c.names:
            if not n.startswith("_") and dest != COPY:
                by_module.setdefault(dotted(dest), []).append(n)
    names = sorted(
        (n for ns in by_module.values() for n in ns),
        key=lambda n: (0 if n.isupper() else 1 if n[0].isupper() else 2, n),
    )
    doc = DOCS.get(f"{package}/__init__.py", f'"""The {dotted(package)} package."""\n')
    out = quoted(doc) + "\n\n"
    for module, ns in sorted(by_module.items()):
        out += f"from {module} import {', '.join(sorted(ns))}\n"
    out += "\n__all__ = [\n" + "".join(f'    "{n}",\n' for n in names) + "]\n"
    return out


def do_cuts() -> list[Parsed]:
    parsed = [p for p in (parse_module(s) for s in SPLITS) if p is not None]
    # Nothing left to move: a source that stays and keeps all of its names.
    parsed = [
        p for p in parsed if any(p.split.table[c.name] not in (p.split.src,) for c in p.chunks)
    ]
    if not parsed:
        say("nothing to cut (already done)")
        return []
    dests = plan_cuts(parsed)
    # Where each name of each cut module now lives (for the imports between destinations).
    where: Where = {
        p.split.src: {
            n: p.split.table[c.name]
            for c in p.chunks
            for n in c.names
            if p.split.table[c.name] != COPY
        }
        # Test modules never import each other: pytest passes fixtures by name.
        if not p.split.src.startswith("tests/")
        else {}
        for p in parsed
    }
    sources = {p.split.src for p in parsed}
    for dest, items in dests.items():
        path = ROOT / dest
        if path.exists() and dest not in sources:
            text = append_text(path, items, where)
        else:
            doc = DOCS.get(dest)
            if doc is None and dest in sources:
                doc = next(p.doc for p in parsed if p.split.src == dest)
            if doc is None:
                fail(f"DOCS has no docstring for the new module {dest}: add one, then rerun")
            text = module_text(dest, items, where, doc)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        git("add", dest)
        say(f"wrote {dest} ({', '.join(c.name for _, c in items)})")
    for p in parsed:
        if p.split.src not in dests:
            git("rm", "-q", "-f", p.split.src)
            say(f"removed {p.split.src}")
        if p.split.package:
            init = f"{p.split.package}/__init__.py"
            (ROOT / init).write_text(reexport_init(p.split.package, p))
            git("add", init)
    return parsed


# --- 3. references --------------------------------------------------------------------


def text_files() -> list[Path]:
    files = []
    for root in ROOTS:
        for rel in tracked(root):
            p = ROOT / rel
            if rel == SELF or not p.is_file() or rel in DELETE:
                continue
            files.append(p)
    return files


@dataclass
class Route:
    """Where the names of one old module now live."""

    module: str
    path: str
    table: dict[str, str]  # name -> new module (dotted)
    origins: dict[str, tuple[str, str]]
    keeps: bool  # the old module (or package) still exists
    reexports: bool  # the package re-exports every public name
    bare: str | None


def routes(parsed: list[Parsed]) -> list[Route]:
    origins = {p.split.src: p.origins for p in parsed}
    out = []
    for s in SPLITS:
        if s.src.startswith("tests/"):
            continue
        table = {n: dotted(d) for n, d in s.table.items() if d != COPY}
        keeps = s.package is not None or any(d == s.src for d in s.table.values())
        out.append(
            Route(
                dotted(s.src),
                s.src,
                table,
                origins.get(s.src, {}),
                keeps,
                s.package is not None,
                dotted(s.bare) if s.bare else None,
            )
        )
    return out


def target_of(route: Route, name: str, where: str) -> str:
    if route.reexports and not name.startswith("_") and name in route.table:
        return route.module
    if name in route.table:
        return route.table[name]
    if name in route.origins:
        return route.origins[name][0]
    fail(
        f"{where}: imports {name} from {route.module}, which neither defined nor imported "
        "it when cut: fix the import by hand, then rerun"
    )
    raise AssertionError


def rewrite_imports(path: Path, text: str, rts: dict[str, Route]) -> str:
    try:
        tree = ast.parse(text)
    except SyntaxError:
        return text
    own = dotted(str(path.relative_to(ROOT)))
    lines = text.splitlines(keepends=True)
    edits: list[tuple[int, int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module in rts:
            route = rts[node.module]
            groups: dict[str, list[str]] = {}
            for a in node.names:
                real = route.origins.get(a.name, (None, a.name))[1]
                target = target_of(route, a.name, str(path.relative_to(ROOT)))
                if target == own:
                    continue
                groups.setdefault(target, []).append(
                    real
                    + (
                        f" as {a.asname}"
                        if a.asname
                        else (f" as {a.name}" if real != a.name else "")
                    )
                )
            if list(groups) == [node.module]:
                continue
            indent = " " * node.col_offset
            last = lines[(node.end_lineno or node.lineno) - 1]
            tail = last[node.end_col_offset :].rstrip("\n")
            new = [f"{indent}from {m} import {', '.join(ns)}" for m, ns in groups.items()]
            if not new:
                new = [f"{indent}pass"] if indent else []
            if new:
                new[0] += tail
            edits.append(
                (node.lineno, node.end_lineno or node.lineno, "".join(n + "\n" for n in new))
            )
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            # ``from etj_trainer.task import state as core`` then ``core.<moved name>``.
            for a in node.names:
                full = f"{node.module}.{a.name}"
                if full not in rts:
                    continue
                alias = a.asname or a.name
                target = module_use(path, tree, alias, rts[full])
                if target == full:
                    continue
                if len(node.names) > 1:
                    fail(
                        f"{path.relative_to(ROOT)}:{node.lineno}: {alias} ({full}) is used for "
                        f"names now in {target}: import that module by hand, then rerun"
                    )
                parent, _, leaf = target.rpartition(".")
                indent = " " * node.col_offset
                line = f"{indent}from {parent} import {leaf} as {alias}\n"
                edits.append((node.lineno, node.end_lineno or node.lineno, line))
        elif isinstance(node, ast.Import):
            for a in node.names:
                if (
                    a.name in rts
                    and a.asname
                    and module_use(path, tree, a.asname, rts[a.name]) != a.name
                ):
                    fail(
                        f"{path.relative_to(ROOT)}:{node.lineno}: {a.asname} ({a.name}) "
                        "is used for names that moved: import them by hand, then rerun"
                    )
    for start, end, new in sorted(edits, reverse=True):
        lines[start - 1 : end] = [new]
    return "".join(lines)


def module_use(path: Path, tree: ast.AST, alias: str, route: Route) -> str:
    """The one module whose names ``alias`` (the old module) is used for; it fails on
    names of several modules."""
    targets = {
        route.table.get(n.attr, route.module)
        for n in ast.walk(tree)
        if isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name) and n.value.id == alias
    }
    if len(targets) > 1:
        fail(
            f"{path.relative_to(ROOT)}: {alias} ({route.module}) is used for names of "
            f"{sorted(targets)}: import each by hand, then rerun"
        )
    return targets.pop() if targets else route.module


def dotted_patterns(rts: list[Route]) -> list[tuple[re.Pattern[str], object]]:
    out: list[tuple[re.Pattern[str], object]] = []
    for r in sorted(rts, key=lambda r: len(r.module), reverse=True):

        def repl(m: re.Match[str], r: Route = r) -> str:
            name = m["name"]
            if name is None:
                return r.bare if (r.bare and not r.keeps) else m[0]
            target = r.table.get(name)
            if target is None or (r.reexports and not name.startswith("_")):
                if r.bare and not r.keeps:
                    return f"{r.bare}.{name}"
                return m[0]
            return f"{target}.{name}"

        out.append(
            (
                re.compile(r"(?<![\w.])" + re.escape(r.module) + r"(?:\.(?P<name>\w+))?(?![\w])"),
                repl,
            )
        )
        if r.bare and not r.keeps:
            bare_path = r.bare.replace(".", "/") + ".py"
            for prefix in ("operator/", "trainer_image/", ""):
                old = prefix + r.module.replace(".", "/") + ".py"
                new = prefix + bare_path
                out.append((re.compile(r"(?<![\w/.-])" + re.escape(old) + r"(?![\w-])"), new))
    # Plain moves.
    for src, dst in MOVES:
        if src.endswith(".py"):  # (tests import each other as tests.unit.x too)
            out.append(
                (re.compile(r"(?<![\w.])" + re.escape(dotted(src)) + r"(?![\w])"), dotted(dst))
            )
        out.append((re.compile(r"(?<![\w/.-])" + re.escape(src) + r"(?![\w-])"), dst))
    return out


def rewrite_references(parsed: list[Parsed]) -> int:
    rts = routes(parsed)
    by_module = {r.module: r for r in rts}
    patterns = dotted_patterns(rts)
    changed = 0
    for p in text_files():
        try:
            text = p.read_text()
        except UnicodeDecodeError:
            continue
        new = rewrite_imports(p, text, by_module) if p.suffix == ".py" else text
        for pat, repl in patterns:
            new = pat.sub(repl, new)  # type: ignore[arg-type]
        if new != text:
            p.write_text(new)
            changed += 1
    return changed


# --- 4. renames -------------------------------------------------------------------------


def rename_identifiers() -> None:
    for path, old, new in RENAMES:
        module = dotted(path)
        word = re.compile(rf"(?<![\w.]){old}(?!\w)")
        for p in text_files():
            if p.suffix != ".py":
                continue
            text = p.read_text()
            rel = str(p.relative_to(ROOT))
            if rel == path:
                out = re.sub(rf"^def {old}\(", f"def {new}(", text, flags=re.M)
            else:
                tree = ast.parse(text)
                imports = [
                    n
                    for n in ast.walk(tree)
                    if isinstance(n, ast.ImportFrom)
                    and any(a.name == old and not a.asname for a in n.names)
                ]
                if not any(n.module == module for n in imports):
                    out = text
                elif len(imports) > 1:
                    fail(f"{rel} imports {old} from {module} and elsewhere: rename by hand")
                else:
                    out = word.sub(new, text)
            out = re.sub(rf"(?<![\w.]){re.escape(module)}\.{old}(?!\w)", f"{module}.{new}", out)
            if out != text:
                p.write_text(out)
                say(f"{rel}: {old} -> {new}")
    # Task.is_chief() returns the leader (the chief, else worker 0).
    cluster = ROOT / TASK / "cluster.py"
    patch(
        f"{TASK}/cluster.py",
        "    def is_chief(self) -> bool:\n",
        "    def is_leader(self) -> bool:\n",
    )
    if "def is_leader(self)" in cluster.read_text():
        for p in text_files():
            if p.suffix in (".py", ".md"):
                text = p.read_text()
                out = re.sub(r"\.is_chief\(\)", ".is_leader()", text)
                out = out.replace("Task.is_chief", "Task.is_leader")
                if out != text:
                    p.write_text(out)
    # Logger names from before the last move.
    for rel, old in (
        ("operator/etj/controller/cache.py", "etj.cache"),
        ("operator/etj/controller/leader.py", "etj.leader"),
    ):
        patch(rel, f'logging.getLogger("{old}")', "logging.getLogger(__name__)")


# --- 5. patches -------------------------------------------------------------------------


def patch(rel: str, old: str, new: str) -> None:
    """Replace ``old`` by ``new`` in a file when ``old`` is there (else: done already, or
    a warning says the patch was not applied)."""
    p = ROOT / rel
    if not p.exists():
        say(f"WARNING: {rel} missing; patch skipped")
        return
    text = p.read_text()
    if old in text:
        p.write_text(text.replace(old, new, 1))
    elif new not in text:
        say(f"WARNING: {rel}: old text not found, patch not applied: {old[:70]!r}")


def hoist(rel: str, lazy: str, top: str) -> None:
    """A function-level import (``lazy``, a whole line) becomes the top-level ``top``."""
    p = ROOT / rel
    if not p.exists():
        say(f"WARNING: {rel} missing; patch skipped")
        return
    text = p.read_text()
    if lazy not in text:
        if top not in text:
            say(f"WARNING: {rel}: lazy import not found: {lazy.strip()[:70]!r}")
        return
    # (with the blank line after it, if any)
    text = text.replace(lazy + "\n", "") if lazy + "\n" in text else text.replace(lazy, "")
    future = "from __future__ import annotations\n"
    text = text.replace(future, future + "\n" + top + "\n", 1)
    p.write_text(text)


ACYCLIC = """
[[tool.importlinter.contracts]]
# No import cycle, at any depth: among the modules of each package, and among its
# subpackages (each counted with everything inside it).
name = "No import cycles"
type = "acyclic_siblings"
ancestors = ["etj", "etj_trainer"]
"""


def patches() -> None:
    # The cycles' lazy imports, now plain imports.
    hoist(
        f"{RENDER}/build.py",
        "    from etj.core.render.networkpolicy import build_network_policy  # it builds on this module\n",
        "from etj.core.render.networkpolicy import build_network_policy",
    )
    hoist(
        f"{TASK}/termination.py",
        "    from etj_trainer.task.events import emit  # numpy and prometheus: only when it is needed\n",
        "from etj_trainer.task.events import emit",
    )
    patch(
        f"{TASK}/termination.py",
        "``report_failure`` writes both records of a failure (the ``error`` event and\nthis message).",
        "``report_failure`` writes both records of a failure (the ``error`` event,\n"
        "``etj_trainer.task.events``, and this message).",
    )
    # Docstrings that named what moved.
    patch(
        f"{TASK}/state.py",
        '"""The training state and the training function, shared by every strategy.\n',
        '"""The training state and the training function, shared by every strategy (a chunk\'s\n'
        "length, histogram and results: ``etj_trainer.task.step``).\n",
    )
    patch(
        f"{RENDER}/networkpolicy.py",
        "send a ps or worker graph ops. The policy selects every pod of the job and admits\n"
        "ingress on exactly those two ports; egress is left alone. Pure: no I/O.\n",
        "send a ps or worker graph ops. The policy selects every pod of the job and admits\n"
        "ingress on exactly those two ports; egress is left alone. Its settings\n"
        "(``NetworkPolicySettings``) live in ``etj.core.render.settings``. Pure: no I/O.\n",
    )
    patch(
        f"{RECONCILE}/decide.py",
        "status write.\n",
        "status write. The pass's types live in ``etj.core.reconcile.decision``, its state in\n"
        "``policies.pass_state``; the rules that end a pass early, handle failures and forget\n"
        "recovered replicas in ``policies`` (``finish``, ``failures``, ``recovery``).\n",
    )
    patch(
        f"{POLICIES}/__init__.py",
        '"""One module per policy, each a few pure functions with its own test module."""',
        '"""One module per policy, each a few pure functions with its own test module; and the\n'
        "rules of ``decide`` that change one pass (``pass_state``): ``finish``, ``failures``,\n"
        '``recovery``, tested through ``decide`` (tests/unit/etj/core/reconcile/test_decide*.py)."""',
    )
    patch(
        "trainer_image/README.md",
        "                        trainers), loop.py (the training loop they share), state.py,\n"
        "                        optim.py, checkpoint.py, evaluate.py, auc.py, progress.py,\n"
        "                        termination.py, supervisor.py, export.py, export_reader.py\n",
        "                        trainers), threads.py (a process's thread pools), loop.py\n"
        "                        (the training loop they share), state.py, step.py,\n"
        "                        optim.py, checkpoint.py, evaluate.py, auc.py, progress.py,\n"
        "                        events.py, termination.py, supervisor.py, export.py,\n"
        "                        export_reader.py\n",
    )
    pyproject = ROOT / "pyproject.toml"
    text = pyproject.read_text()
    if 'type = "acyclic_siblings"' not in text:
        pyproject.write_text(text.rstrip("\n") + "\n" + ACYCLIC)


def delete_spent() -> None:
    for rel in DELETE:
        if (ROOT / rel).exists():
            git("rm", "-q", "-f", rel)
            say(f"deleted {rel}")


# --- 6. format ------------------------------------------------------------------------


def fmt() -> None:
    venv_bin = ROOT / ".venv" / "bin"
    ruff = str(venv_bin / "ruff") if (venv_bin / "ruff").exists() else shutil.which("ruff")
    if not ruff:
        say("WARNING: no ruff found; run `make fmt`")
        return
    dirs = ["operator", "trainer_image", "tests", "benchmarks"]
    subprocess.run([ruff, "check", "--fix", "-q", *dirs], cwd=ROOT, check=False)
    subprocess.run([ruff, "format", "-q", *dirs], cwd=ROOT, check=False)


def main() -> None:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--no-format", action="store_true", help="skip ruff --fix / format")
    args = ap.parse_args()
    if not (ROOT / "operator/etj").is_dir():
        sys.exit("run from the repository root")
    # Every module to cut is checked against its table before anything changes.
    problems = []
    for s in SPLITS:
        try:
            parse_module(s)
        except SystemExit as e:
            problems.append(str(e))
    if problems:
        sys.exit("\n".join(problems))
    do_moves()
    parsed = do_cuts()
    say(f"references rewritten in {rewrite_references(parsed)} files")
    rename_identifiers()
    patches()
    delete_spent()
    if not args.no_format:
        fmt()
    git("add", "-A", "--", *[r for r in ROOTS if (ROOT / r).exists()])
    say("done; review with `git status` and run `make lint`")


if __name__ == "__main__":
    main()

"""Issue 24's test move: each test folder mirrors the package tree it tests.

Run from the repository root:

    .venv/bin/python tests/tools/mirror_tests.py [--suite NAME]... [--product-docs] [--strict]
                                                 [--no-format]

Without ``--suite``, every suite: ``unit``, ``trainer``, ``local``, ``integration``
(tests/e2e, tests/images, tests/lint, tests/cases and tests/cluster stay as they are).

Each test file goes to the folder of the module it mainly tests, named
``test_<module>[_<aspect>].py`` so a folder's listing groups a module's tests; a file that
covers a whole package (the purity check, the spec fuzzing, the trainer's multi-process
runs) sits at that package's level:

- ``tests/unit/etj/<package>/...`` for the operator package (``etj.api``, ``etj.core`` and
  its ``render``/``reconcile``/``policies``, ``etj.cli``, ``etj.controller``, ``etj.local``),
  ``tests/unit/etj_testcluster/`` for the test cluster, ``tests/unit/benchmarks/`` and
  ``tests/unit/lint/`` for the tests of those tools;
- ``tests/trainer/etj_trainer/{data,models,task}/`` for the trainer's real TensorFlow
  processes;
- ``tests/local/etj/local/`` for ``etj run``'s (``test_runner_*.py``: what it runs);
- ``tests/integration/{etj/controller,etj/api,etj/cli,etj_testcluster,charts,scenarios}/``
  for the tests on a real API server (``scenarios/``: a whole job's story through operator
  and nodes).

The shared helpers stay at each suite's root: ``conftest.py`` (so that its fixtures and
hooks, such as tests/trainer's ``trainer`` marker, apply to every folder below),
``fake_api.py``, ``reconcile_helpers.py`` and ``golden/``; ``harness.py``, ``zoo.py`` and
the ``same_math_*.py`` scripts; ``operator_helpers.py``.

Reproducible and idempotent: a move happens only when its source exists, so a tree already
moved is left as it is, and the script can run again on a newer tree (files added since
are reported, not left silently). What it does, suite by suite, in order:
1. the package folders with their ``__init__.py`` (every test folder is a package, so two
   files of one basename in two folders never collide, and ``tests/unit/etj`` is only ever
   ``tests.unit.etj``, never the product's ``etj``);
2. ``git mv`` file by file; ``test_policy_deadline_ttl_suspend.py`` is split into one
   file per policy (its tests unchanged, each with the imports it uses);
3. in each moved file: relative imports become absolute ``tests...`` imports of the new
   places (a module imported by a name that changed is renamed throughout the file), and
   ``Path(__file__).resolve().parents[N]`` counts the new depth; in a file that stays, a
   relative import of a moved module becomes the absolute import of its new place;
4. a few files' own edits (``PATCHES``), such as the trainer's helper scripts finding the
   trainer package before tests/trainer/etj_trainer (the tests of it, a package too);
5. references to the old paths and module names (``tests/unit/test_render.py``,
   ``tests.integration.test_chart``) are rewritten in tests/, benchmarks/, examples/,
   README.md and the Makefile (``--product-docs``: in the product's docstrings too);
6. ``ruff check --fix`` and ``ruff format`` over the moved suites (imports sorted, the
   split files' unused imports dropped).
At the end it names every test file left at a suite's root that its table does not place
(exit status 1 with ``--strict``), and every move it could not make because both the old
and the new file exist (always exit status 1: merge them by hand, run again).
"""

from __future__ import annotations

import argparse
import ast
import importlib.util
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path.cwd()
SELF = "tests/tools/mirror_tests.py"
# Records of earlier moves: left as they were written.
HISTORY = {SELF, "tests/tools/restructure_24.py"}

E = "etj"
API, CORE, CLI, CTRL, LOCAL = f"{E}/api", f"{E}/core", f"{E}/cli", f"{E}/controller", f"{E}/local"
RENDER, RECONCILE = f"{CORE}/render", f"{CORE}/reconcile"
POLICIES = f"{RECONCILE}/policies"
TC = "etj_testcluster"

# tests/unit: old path -> new path, both relative to tests/unit. The comment says why when
# the module a file mainly tests is not plain from its old name (as in every table below).
UNIT_MOVES: dict[str, str] = {
    # etj.api: the contract.
    "api/test_contract_names.py": f"{API}/test_contract_names.py",
    "api/test_roles.py": f"{API}/test_roles.py",
    "test_admission.py": f"{API}/test_admission.py",
    # spec.model.custom: the API's rules first (also its rendered volume, its ModelError).
    "test_custom_model.py": f"{API}/test_custom.py",
    "test_features_api.py": f"{API}/test_features.py",
    "test_model_architectures.py": f"{API}/test_architectures.py",
    # etj.api.names (and the names etj.core.render.names derives from them).
    "test_names.py": f"{API}/test_names.py",
    "test_quantity.py": f"{API}/test_quantity.py",
    "test_storage.py": f"{API}/test_storage.py",
    # etj.core: one file per module; what covers the whole core sits at its level.
    "test_crd.py": f"{CORE}/test_crd.py",
    "test_planner.py": f"{CORE}/test_planner.py",
    "test_planner_slots.py": f"{CORE}/test_planner_slots.py",
    "test_dynamic_plan.py": f"{CORE}/test_planner_dynamic.py",
    "test_tfconfig.py": f"{CORE}/test_tfconfig.py",
    # The malformed corpus through `etj validate` (and the CRD schema).
    "test_malformed.py": f"{CORE}/test_validation_malformed.py",
    "test_purity.py": f"{CORE}/test_purity.py",
    "test_spec_fuzz.py": f"{CORE}/test_spec_fuzz.py",
    # Kubernetes API conventions across the CRD and the reconcile decisions.
    "test_conventions.py": f"{CORE}/test_k8s_conventions.py",
    # etj.core.render (render/__init__ re-exports objects' build_*).
    "test_render.py": f"{RENDER}/test_objects.py",
    "test_render_storage.py": f"{RENDER}/test_objects_storage.py",
    # Pod Security `restricted` over every pod etj renders.
    "test_restricted.py": f"{RENDER}/test_objects_restricted.py",
    "test_render_scheduling.py": f"{RENDER}/test_scheduling.py",
    "test_kueue.py": f"{RENDER}/test_kueue.py",
    "test_network_policy.py": f"{RENDER}/test_networkpolicy.py",
    "test_podtemplate.py": f"{RENDER}/test_podtemplate.py",
    # etj.core.reconcile.
    "test_reconcile_decide.py": f"{RECONCILE}/test_decide.py",
    # status.evaluation as decide() keeps it (and as etj run reads it).
    "test_evaluation_status.py": f"{RECONCILE}/test_decide_evaluation.py",
    "test_reconcile_observe.py": f"{RECONCILE}/test_observe.py",
    "test_reconcile_progress.py": f"{RECONCILE}/test_progress.py",
    # status.progress.dynamicTables from the metrics page (parse_progress) or the log line.
    "test_dynamic_status.py": f"{RECONCILE}/test_progress_dynamic.py",
    "test_policy_backoff.py": f"{POLICIES}/test_backoff.py",
    "test_policy_completion.py": f"{POLICIES}/test_completion.py",
    "test_policy_gang.py": f"{POLICIES}/test_gang.py",
    "test_node_loss.py": f"{POLICIES}/test_nodeloss.py",
    "test_policy_oom.py": f"{POLICIES}/test_oom.py",
    "test_policy_queue.py": f"{POLICIES}/test_queue.py",
    "test_policy_restart.py": f"{POLICIES}/test_restart.py",
    "test_policy_scale.py": f"{POLICIES}/test_scale.py",
    # etj.cli.
    "test_cli.py": f"{CLI}/test_main.py",
    "test_cli_files.py": f"{CLI}/test_files.py",
    "test_convert.py": f"{CLI}/test_convert.py",
    "test_infer.py": f"{CLI}/test_from_data.py",
    # etj.controller.
    "test_handlers.py": f"{CTRL}/test_handlers.py",
    # The diff-base storage kopf gets (etj.controller.handlers.EssenceStorage).
    "test_kopf_essence.py": f"{CTRL}/test_handlers_essence.py",
    "test_k8s.py": f"{CTRL}/test_kube.py",
    "test_k8s_gang.py": f"{CTRL}/test_kube_gang.py",
    "test_leader.py": f"{CTRL}/test_leader.py",
    "test_operator_login.py": f"{CTRL}/test_login.py",
    "test_reconciler.py": f"{CTRL}/test_reconciler.py",
    "test_reconciler_gang.py": f"{CTRL}/test_reconciler_gang.py",
    "test_reconciler_storage.py": f"{CTRL}/test_reconciler_storage.py",
    "test_watch_cache.py": f"{CTRL}/test_cache.py",
    # etj.local.
    "test_local_configmaps.py": f"{LOCAL}/test_configmaps.py",
    "test_local_process.py": f"{LOCAL}/test_pod_process.py",
    # What LocalRunner runs for a template's command.
    "test_local_command.py": f"{LOCAL}/test_runner_command.py",
    # The test cluster.
    "test_local_kueue.py": f"{TC}/test_kueue.py",
    "test_node_paths.py": f"{TC}/test_process_node_paths.py",
    "test_node_pod_security.py": f"{TC}/test_pod_security.py",
    # Tools beside the product.
    "test_dynamic_benchmark_data.py": "benchmarks/test_dynamic_data.py",
    "test_lint_objects.py": "lint/test_lint_objects.py",
}

# tests/unit: old path -> {new path: (its docstring, the top-level test functions it takes)}.
UNIT_SPLITS: dict[str, dict[str, tuple[str, list[str]]]] = {
    "test_policy_deadline_ttl_suspend.py": {
        f"{POLICIES}/test_deadline.py": ("policies/deadline.", ["test_deadline"]),
        f"{POLICIES}/test_ttl.py": ("policies/ttl.", ["test_ttl"]),
        f"{POLICIES}/test_suspend.py": (
            "policies/suspend.",
            ["test_suspend_deletes_every_pod_not_already_going"],
        ),
    },
}

TR = "etj_trainer"
# tests/trainer: old path -> new path, both relative to tests/trainer.
TRAINER_MOVES: dict[str, str] = {
    # etj_trainer.data.
    "test_batch.py": f"{TR}/data/test_batch.py",
    "test_delimited.py": f"{TR}/data/test_delimited.py",
    "test_delimited_quoting.py": f"{TR}/data/test_delimited_quoting.py",
    "test_features.py": f"{TR}/data/test_features.py",
    "test_parquet.py": f"{TR}/data/test_parquet.py",
    # The ParameterServerStrategy input pipeline (data.pipeline's per-worker datasets).
    "test_ps_input.py": f"{TR}/data/test_ps_input.py",
    "test_tfrecord.py": f"{TR}/data/test_tfrecord.py",
    # etj_trainer.models: one file per architecture, the dynamic tables' modules.
    "test_dynamic_table.py": f"{TR}/models/test_dynamic.py",
    "test_dynamic_relayout.py": f"{TR}/models/test_dynamic_relayout.py",
    "test_dynamic_shards.py": f"{TR}/models/test_dynamic_shards.py",
    "test_dynamic_training.py": f"{TR}/models/test_dynamic_training.py",
    "test_dynamic_fused.py": f"{TR}/models/test_dynamic_fused.py",
    "test_fused.py": f"{TR}/models/test_fused.py",
    "test_model_custom.py": f"{TR}/models/test_custom.py",
    "test_model_dcn_v2.py": f"{TR}/models/test_dcn_v2.py",
    "test_model_deep_fm.py": f"{TR}/models/test_deep_fm.py",
    "test_model_dlrm.py": f"{TR}/models/test_dlrm.py",
    "test_model_dnn.py": f"{TR}/models/test_dnn.py",
    "test_model_wide_deep.py": f"{TR}/models/test_wide_deep.py",
    # etj_trainer.task.
    "test_loop_pause.py": f"{TR}/task/test_loop.py",
    # task.state's restore digest (sums on each variable's device).
    "test_digest.py": f"{TR}/task/test_state_digest.py",
    # task.evaluate: restoring a dynamic table a ParameterServer job sharded.
    "test_dynamic_evaluator.py": f"{TR}/task/test_evaluate_dynamic.py",
    # Low-precision tables: task.rounding's stochastic rounding, through training.
    "test_low_precision.py": f"{TR}/task/test_low_precision.py",
    "test_server_stop.py": f"{TR}/task/test_server_stop.py",
    "test_serving_model.py": f"{TR}/task/test_serving_model.py",
    "test_termination.py": f"{TR}/task/test_termination.py",
    # The whole trainer: its SDK, a job's placement, its data errors, the multi-process
    # runs of each strategy, and the module-by-module checks of test_components.
    "test_components.py": f"{TR}/test_components.py",
    "test_data_errors.py": f"{TR}/test_data_errors.py",
    "test_dynamic_ps.py": f"{TR}/test_dynamic_ps.py",
    "test_mwms.py": f"{TR}/test_mwms.py",
    "test_placement.py": f"{TR}/test_placement.py",
    "test_ps_training.py": f"{TR}/test_ps_training.py",
    "test_restore.py": f"{TR}/test_restore.py",
    "test_sdk.py": f"{TR}/test_sdk.py",
}

# tests/local (`etj run`, etj.local): old path -> new path, both relative to tests/local.
# test_runner_*: what `etj run` runs, end to end.
LOCAL_MOVES: dict[str, str] = {
    "test_procs.py": f"{LOCAL}/test_launch.py",
    "test_runner_backoff.py": f"{LOCAL}/test_runner_backoff.py",
    "test_etj_run.py": f"{LOCAL}/test_runner.py",
    "test_etj_run_scale.py": f"{LOCAL}/test_runner_scale.py",
    "test_examples.py": f"{LOCAL}/test_runner_examples.py",
    "test_custom_tower_run.py": f"{LOCAL}/test_runner_custom_tower.py",
    "test_own_program.py": f"{LOCAL}/test_runner_own_program.py",
    "test_quoted_data.py": f"{LOCAL}/test_runner_quoted_data.py",
    "test_tfjob_shapes.py": f"{LOCAL}/test_runner_tfjob_shapes.py",
}

SCEN = "scenarios"
# tests/integration (a real API server): old path -> new path, relative to tests/integration.
# scenarios/: a whole job's story through the operator and the process-backed nodes.
INTEGRATION_MOVES: dict[str, str] = {
    # etj.controller: the operator as a process against the API server.
    "test_operator.py": f"{CTRL}/test_operator.py",
    "test_operator_ha.py": f"{CTRL}/test_operator_ha.py",
    "test_apiserver_faults.py": f"{CTRL}/test_apiserver_faults.py",
    "test_bounded_planning.py": f"{CTRL}/test_bounded_planning.py",
    "test_gang_scheduling.py": f"{CTRL}/test_gang_scheduling.py",
    "test_kueue_labels.py": f"{CTRL}/test_kueue_labels.py",
    "test_storage_server.py": f"{CTRL}/test_storage_server.py",
    # etj.api: the CRD and the admission policy as the API server applies them.
    "test_admission_policy.py": f"{API}/test_admission_policy.py",
    "test_conventions.py": f"{API}/test_conventions.py",
    "test_malformed_server.py": f"{API}/test_malformed_server.py",
    # etj.cli.
    "test_convert_server.py": f"{CLI}/test_convert_server.py",
    # The test cluster itself (etj cluster, its nodes, Kueue, the binaries).
    "test_binaries.py": f"{TC}/test_binaries.py",
    "test_cluster.py": f"{TC}/test_cluster.py",
    "test_cluster_lifecycle.py": f"{TC}/test_cluster_lifecycle.py",
    "test_cluster_process_node.py": f"{TC}/test_cluster_process_node.py",
    "test_kueue_admission.py": f"{TC}/test_kueue_admission.py",
    "test_kueue_preemption.py": f"{TC}/test_kueue_preemption.py",
    "test_locked_down_cli.py": f"{TC}/test_locked_down_cli.py",
    "test_process_node_security.py": f"{TC}/test_process_node_security.py",
    # The Helm chart.
    "test_chart.py": "charts/test_chart.py",
    "test_chart_ops.py": "charts/test_chart_ops.py",
    "test_chart_process_node.py": "charts/test_chart_process_node.py",
    "test_click_logs.py": f"{SCEN}/test_click_logs.py",
    "test_custom_tower_node.py": f"{SCEN}/test_custom_tower_node.py",
    "test_data_errors.py": f"{SCEN}/test_data_errors.py",
    "test_e2e_local.py": f"{SCEN}/test_e2e_local.py",
    "test_elastic_workers_node.py": f"{SCEN}/test_elastic_workers_node.py",
    "test_own_program_node.py": f"{SCEN}/test_own_program_node.py",
    "test_tfjob_shapes_node.py": f"{SCEN}/test_tfjob_shapes_node.py",
}

# A file's own edits beyond names: (its path after the move, from the repository root; old
# text, new text). Applied when the old text is there (so once); a file with neither text
# is reported.
UNIT_PATCHES = [
    # golden/ stays a shared folder at tests/unit (README: ETJ_UPDATE_GOLDEN).
    (
        f"tests/unit/{RENDER}/test_objects.py",
        'GOLDEN = Path(__file__).parent / "golden"',
        'GOLDEN = ROOT / "tests" / "unit" / "golden"',
    ),
]
# tests/trainer/etj_trainer is a package named as the trainer's: with tests/trainer first
# on the path (as a script's own folder is, or the conftest or a benchmark put it) it would
# shadow it.
BENCHMARK_PATH = (
    'for _p in (ROOT / "operator", ROOT / "trainer_image", ROOT / "tests" / "trainer"):\n'
    "    sys.path.insert(0, str(_p))"
)
BENCHMARK_PATH_AFTER = (
    "# tests/trainer (harness, zoo) after the product: its etj_trainer/ holds the trainer's "
    "tests.\n"
    'for _p in (ROOT / "tests" / "trainer", ROOT / "operator", ROOT / "trainer_image"):\n'
    "    sys.path.insert(0, str(_p))"
)
TRAINER_PATCHES = [
    ("benchmarks/model_quality.py", BENCHMARK_PATH, BENCHMARK_PATH_AFTER),
    ("benchmarks/trainer_throughput.py", BENCHMARK_PATH, BENCHMARK_PATH_AFTER),
    (
        "tests/trainer/conftest.py",
        """if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))""",
        """# After the product (never first: its etj_trainer/, the tests of the trainer package,
# would shadow that package): for `from harness import ...`.
if str(HERE) not in sys.path:
    sys.path.append(str(HERE))""",
    ),
    (
        "tests/trainer/harness.py",
        'PYTHONPATH = os.pathsep.join([str(ROOT / "operator"), str(ROOT / "trainer_image")])',
        """# The product, then tests/trainer: the scripts zoo runs with `python -P` (not their own
# folder first on the path) import each other from there.
PYTHONPATH = os.pathsep.join(
    [str(ROOT / "operator"), str(ROOT / "trainer_image"), str(ROOT / "tests" / "trainer")]
)""",
    ),
    (
        "tests/trainer/zoo.py",
        '[sys.executable, str(HERE / "same_math_',
        '[sys.executable, "-P", str(HERE / "same_math_',
    ),
]


@dataclass
class Suite:
    """One test folder and where its files go."""

    root: str
    moves: dict[str, str]
    # The shared helpers: stay at the root.
    keep: set[str]
    splits: dict[str, dict[str, tuple[str, list[str]]]] = field(default_factory=dict)
    patches: list[tuple[str, str, str]] = field(default_factory=list)


SUITES = {
    "unit": Suite(
        "tests/unit",
        UNIT_MOVES,
        {"__init__.py", "conftest.py", "fake_api.py", "reconcile_helpers.py"},
        UNIT_SPLITS,
        UNIT_PATCHES,
    ),
    "trainer": Suite(
        "tests/trainer",
        TRAINER_MOVES,
        {
            "__init__.py",
            "conftest.py",
            "harness.py",
            "zoo.py",
            "same_math_chief.py",
            "same_math_mwms.py",
        },
        patches=TRAINER_PATCHES,
    ),
    "local": Suite("tests/local", LOCAL_MOVES, {"__init__.py"}),
    "integration": Suite(
        "tests/integration",
        INTEGRATION_MOVES,
        {"__init__.py", "conftest.py", "operator_helpers.py"},
    ),
}

# Where references to the old paths are rewritten (--product-docs adds the product's).
REFERENCE_ROOTS = ["tests", "benchmarks", "examples", "README.md", "Makefile", ".ci"]
PRODUCT_ROOTS = ["operator", "trainer_image"]
TEXT_SUFFIXES = {".py", ".md", ".toml", ".txt", ".sh", ".yaml", ".yml", ".cfg", ".ini"}
# References that name no one file, or a module by its name alone: (the suites that must
# have moved, old text, new text).
REFERENCE_TEXTS = [
    (
        {"trainer"},
        "tests/trainer/test_model_*.py",
        "tests/trainer/etj_trainer/models/test_<architecture>.py",
    ),
    (
        {"trainer"},
        "tests/trainer/test_model_<architecture>.py",
        "tests/trainer/etj_trainer/models/test_<architecture>.py",
    ),
    ({"trainer", "local"}, "(test_model_dnn, test_etj_run)", "(test_dnn, test_runner)"),
    ({"local"}, "layout: test_quoted_data)", "layout: test_runner_quoted_data)"),
]


def git(*args: str) -> str:
    return subprocess.run(
        ["git", *args], cwd=ROOT, check=True, capture_output=True, text=True
    ).stdout


def say(msg: str) -> None:
    print(f"mirror_tests: {msg}")


def dotted(root: str, rel: str) -> str:
    """A suite's file (relative to its root) -> its module name."""
    return root.replace("/", ".") + "." + rel[: -len(".py")].replace("/", ".")


def depth(rel: str) -> int:
    return rel.count("/")


# The old module name of a moved file (tests.unit.test_x) -> the new one, every suite's.
NEW_MODULE = {
    dotted(s.root, old): dotted(s.root, new)
    for s in SUITES.values()
    for old, new in s.moves.items()
}


# --- 1. package folders ---------------------------------------------------------------------


def make_packages(suite: Suite, targets: list[str]) -> None:
    for rel in targets:
        d = Path(rel).parent
        while str(d) != ".":
            init = ROOT / suite.root / d / "__init__.py"
            if not init.exists():
                init.parent.mkdir(parents=True, exist_ok=True)
                init.write_text("")
                git("add", init.relative_to(ROOT).as_posix())
            d = d.parent


# --- 3. imports and paths -------------------------------------------------------------------

REL_FROM = re.compile(
    r"^(?P<indent>[ \t]*)from (?P<dots>\.+)(?P<mod>[\w.]*) import (?P<names>.+)$", re.M
)
PARENTS = re.compile(r"Path\(__file__\)\.resolve\(\)\.parents\[(\d+)\]")


def absolute(module: str, dots: str, mod: str) -> str:
    """The absolute module a relative import in ``module`` names."""
    package = module.split(".")[:-1]
    base = package[: len(package) - (len(dots) - 1)]
    return ".".join(base + ([mod] if mod else []))


def rewrite_imports(module: str, text: str, only_moved: bool) -> str:
    """``module``'s relative imports as absolute imports of the new places: all of them
    (a moved file), or only those of a moved module (``only_moved``: a file that stays)."""
    renames: dict[str, str] = {}

    def from_import(m: re.Match[str]) -> str:
        target = absolute(module, m["dots"], m["mod"])
        if m["mod"]:  # from .x import a, b
            if only_moved and target not in NEW_MODULE:
                return m[0]
            return f"{m['indent']}from {NEW_MODULE.get(target, target)} import {m['names']}"
        # from . import x, y: each a module of that package; one import line each.
        names = [n.strip() for n in m["names"].split(",")]
        if only_moved and not any(f"{target}.{n}" in NEW_MODULE for n in names):
            return m[0]
        lines = []
        for name in names:
            full = f"{target}.{name}"
            moved = NEW_MODULE.get(full, full)
            parent, _, leaf = moved.rpartition(".")
            if leaf != name:
                renames[name] = leaf
            lines.append(f"{m['indent']}from {parent} import {leaf}")
        return "\n".join(lines)

    text = REL_FROM.sub(from_import, text)
    for old_name, new_name in renames.items():
        text = re.sub(rf"\b{re.escape(old_name)}\b", new_name, text)
    return text


def rewrite_moved(suite: Suite, old: str, new: str, text: str) -> str:
    text = rewrite_imports(dotted(suite.root, old), text, only_moved=False)
    shift = depth(new) - depth(old)
    return PARENTS.sub(lambda m: f"Path(__file__).resolve().parents[{int(m[1]) + shift}]", text)


def rewrite_stayed(suite: Suite) -> int:
    """The files left at the root (helpers, files no table places) import moved modules
    from their new places."""
    changed = 0
    for p in sorted((ROOT / suite.root).glob("*.py")):
        rel = p.relative_to(ROOT / suite.root).as_posix()
        text = p.read_text()
        new = rewrite_imports(dotted(suite.root, rel), text, only_moved=True)
        if new != text:
            p.write_text(new)
            changed += 1
    return changed


# --- 2. moves and splits --------------------------------------------------------------------


def move(suite: Suite, old: str, new: str) -> bool:
    src, dst = ROOT / suite.root / old, ROOT / suite.root / new
    if dst.exists():
        return False
    dst.parent.mkdir(parents=True, exist_ok=True)
    git("mv", src.relative_to(ROOT).as_posix(), dst.relative_to(ROOT).as_posix())
    dst.write_text(rewrite_moved(suite, old, new, dst.read_text()))
    return True


def split(suite: Suite, old: str, parts: dict[str, tuple[str, list[str]]]) -> bool:
    if any((ROOT / suite.root / new).exists() for new in parts):
        return False
    src = ROOT / suite.root / old
    text = src.read_text()
    tree = ast.parse(text)
    lines = text.splitlines(keepends=True)
    funcs = {n.name: n for n in tree.body if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)}
    first = min(
        (n.decorator_list[0].lineno if n.decorator_list else n.lineno) for n in funcs.values()
    )
    doc = ast.get_docstring(tree, clean=False)
    header = "".join(lines[: first - 1])
    taken: set[str] = set()
    for name in (n for _, names in parts.values() for n in names):
        taken.add(name)
    left = set(funcs) - taken
    if any(n.startswith("test_") for n in left):
        raise SystemExit(f"{suite.root}/{old}: tests no part takes: {sorted(left)}")
    for new, (docstring, names) in parts.items():
        body = []
        for name in names:
            n = funcs[name]
            start = n.decorator_list[0].lineno if n.decorator_list else n.lineno
            body.append("".join(lines[start - 1 : n.end_lineno]))
        head = header.replace(f'"""{doc}"""', f'"""{docstring}"""', 1)
        dst = ROOT / suite.root / new
        dst.parent.mkdir(parents=True, exist_ok=True)
        dst.write_text(rewrite_moved(suite, old, new, head + "\n\n".join(body)))
        git("add", dst.relative_to(ROOT).as_posix())
    git("rm", "-q", src.relative_to(ROOT).as_posix())
    return True


# --- 4. a file's own edits ----------------------------------------------------------------------


def patch(suite: Suite) -> list[str]:
    """Apply the suite's patches; return those whose file has neither text (fix by hand)."""
    unmatched = []
    for rel, before, after in suite.patches:
        p = ROOT / rel
        if not p.exists():
            continue
        text = p.read_text()
        if before in text:
            p.write_text(text.replace(before, after))
        elif after not in text:
            unmatched.append(rel)
    return unmatched


# --- 5. references ---------------------------------------------------------------------------


def done_moves(suite: Suite) -> dict[str, str]:
    """The suite's moves made (now or before): old path -> new path, relative to the root."""
    return {
        o: n
        for o, n in suite.moves.items()
        if (ROOT / suite.root / n).exists() and not (ROOT / suite.root / o).exists()
    }


def is_text(p: Path) -> bool:
    """A file whose references to test paths are rewritten: text, the Makefile, a script."""
    if p.suffix in TEXT_SUFFIXES or p.name == "Makefile":
        return True
    return not p.suffix and p.read_bytes().startswith(b"#!")


def references(suites: list[Suite], texts: list[tuple[str, str]], roots: list[str]) -> int:
    """Rewrite the moved files' old paths (with or without ``.py``, ``::test`` after) and
    old module names in the files under ``roots``."""
    pairs: dict[str, str] = {}  # old -> new, as a path without .py, or a dotted name
    folders: dict[str, str] = {}  # a split file's old path -> the folder of its parts
    for s in suites:
        for o, n in done_moves(s).items():
            pairs[f"{s.root}/{o}".removesuffix(".py")] = f"{s.root}/{n}".removesuffix(".py")
            pairs[dotted(s.root, o)] = dotted(s.root, n)
        for o, parts in s.splits.items():
            if not (ROOT / s.root / o).exists():
                folders[f"{s.root}/{o}"] = f"{s.root}/{Path(next(iter(parts))).parent}/"
    patterns = [
        (re.compile(rf"(?<![\w/.-]){re.escape(o)}(?![\w-])"), n)
        for o, n in sorted(pairs.items(), key=lambda p: -len(p[0]))
    ] + [(re.compile(rf"(?<![\w/.-]){re.escape(o)}"), n) for o, n in folders.items()]
    changed = 0
    for root in roots:
        for rel in git("ls-files", "--", root).splitlines():
            p = ROOT / rel
            if rel in HISTORY or not p.is_file() or not is_text(p):
                continue
            text = p.read_text()
            new = text
            for old_text, new_text in texts:
                new = new.replace(old_text, new_text)
            for pat, repl in patterns:
                new = pat.sub(lambda _m, r=repl: r, new)
            if new != text:
                p.write_text(new)
                changed += 1
    return changed


# --- 6. format ----------------------------------------------------------------------------


def fmt(roots: list[str]) -> None:
    if importlib.util.find_spec("ruff") is None:
        say("WARNING: no ruff in this interpreter (run it with .venv/bin/python); run `make fmt`")
        return
    for args in (["check", "--fix", "-q"], ["format", "-q"]):
        subprocess.run([sys.executable, "-m", "ruff", *args, *roots], cwd=ROOT, check=False)


def run_suite(name: str, suite: Suite) -> tuple[list[str], list[str]]:
    """Move one suite; return the moves it could not make, and the patches it could not
    apply."""
    todo = {o: n for o, n in suite.moves.items() if (ROOT / suite.root / o).exists()}
    splits = {o: p for o, p in suite.splits.items() if (ROOT / suite.root / o).exists()}
    make_packages(suite, [*todo.values(), *(n for p in splits.values() for n in p)])
    conflicts = []
    moved = 0
    for old, new in todo.items():
        if move(suite, old, new):
            moved += 1
        else:
            conflicts.append(f"{suite.root}/{old} and {suite.root}/{new}")
    done_splits = 0
    for old, parts in splits.items():
        if split(suite, old, parts):
            done_splits += 1
        else:
            conflicts.append(f"{suite.root}/{old} and parts of it in {sorted(parts)}")
    # An emptied old folder (tests/unit/api) goes, with its __init__.py.
    for d in sorted({Path(o).parent for o in suite.moves if "/" in o}, reverse=True):
        folder = ROOT / suite.root / d
        if folder.is_dir() and not any(
            p.suffix == ".py" and p.name != "__init__.py" for p in folder.rglob("*")
        ):
            if (folder / "__init__.py").exists():
                git("rm", "-q", (folder / "__init__.py").relative_to(ROOT).as_posix())
            shutil.rmtree(folder, ignore_errors=True)
    stayed = rewrite_stayed(suite)
    unmatched = patch(suite)
    say(
        f"{name}: moved {moved} files, split {done_splits}, "
        f"imports of moved modules rewritten in {stayed} files that stay"
    )
    return conflicts, unmatched


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--suite",
        action="append",
        choices=sorted(SUITES),
        help="move only this suite (repeatable); default: every suite",
    )
    ap.add_argument("--no-format", action="store_true", help="skip ruff --fix / format")
    ap.add_argument(
        "--product-docs",
        action="store_true",
        help="also rewrite the old test paths the product's docstrings name",
    )
    ap.add_argument(
        "--strict",
        action="store_true",
        help="exit status 1 when a test file is left at a suite's root that no table places",
    )
    args = ap.parse_args()
    if not (ROOT / SELF).is_file():
        sys.exit("run from the repository root")
    names = args.suite or list(SUITES)
    conflicts: list[str] = []
    unmatched: list[str] = []
    for name in names:
        c, u = run_suite(name, SUITES[name])
        conflicts += c
        unmatched += u
    suites = [SUITES[n] for n in names]
    texts = [(o, n) for need, o, n in REFERENCE_TEXTS if need <= set(names)]
    roots = REFERENCE_ROOTS + (PRODUCT_ROOTS if args.product_docs else [])
    say(f"references rewritten in {references(suites, texts, roots)} files")
    if not args.no_format:
        fmt([s.root for s in suites])
    for s in suites:
        git("add", "-A", "--", s.root)
    left = [
        f"{s.root}/{p.name}"
        for s in suites
        for p in sorted((ROOT / s.root).glob("test_*.py"))
        if p.name not in s.keep
    ]
    if left:
        say(f"WARNING: not placed (add them to the suite's table, run again): {left}")
    for c in conflicts:
        say(f"ERROR: both {c} exist: merge them by hand, run again")
    for u in unmatched:
        say(f"ERROR: {u} has changed: make its PATCHES edit by hand")
    say("done; review with `git status` and run `make lint`")
    if conflicts or unmatched or (left and args.strict):
        sys.exit(1)


if __name__ == "__main__":
    main()

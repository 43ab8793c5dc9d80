"""Issue 24's test move: tests/unit mirrors the package tree it tests.

Run from the repository root:  .venv/bin/python tests/tools/mirror_tests.py [--no-format] [--product-docs]

Each unit test file goes to the folder of the module it mainly tests, named
``test_<module>[_<aspect>].py`` so a folder's listing groups a module's tests:
``tests/unit/etj/<package>/...`` for the operator package (``etj.api``, ``etj.core`` and its
``render``/``reconcile``/``policies``, ``etj.cli``, ``etj.controller``, ``etj.local``),
``tests/unit/etj_testcluster/`` for the test cluster, ``tests/unit/benchmarks/`` and
``tests/unit/lint/`` for the tests of those tools. A file covering a whole package (the
purity check, the spec fuzzing) sits at that package's level. The shared helpers stay where
they are: ``conftest.py`` (so its fixtures apply to every folder), ``fake_api.py``,
``reconcile_helpers.py`` and ``golden/``.

Reproducible and idempotent: a move happens only when its source exists, so a tree already
moved is left as it is. What it does, in order:
1. the package folders with their ``__init__.py`` (every test folder is a package, so two
   files of one basename in two folders never collide, and ``tests/unit/etj`` is only ever
   ``tests.unit.etj``, never the product's ``etj``);
2. ``git mv`` file by file; ``test_policy_deadline_ttl_suspend.py`` is split into one
   file per policy (its tests unchanged, each with the imports it uses);
3. in each moved file: relative imports become absolute ``tests.unit...`` imports of the
   new places (a module imported by a name that changed is renamed throughout the file),
   and ``Path(__file__).resolve().parents[N]`` counts the new depth;
4. references to the old paths (``tests/unit/test_render.py``) are rewritten in tests/,
   benchmarks/ and README.md (``--product-docs``: in the product's docstrings too);
5. ``ruff check --fix`` and ``ruff format`` over tests/unit (imports sorted, the split
   files' unused imports dropped).
A test file left at tests/unit that this script does not place is reported.
"""

from __future__ import annotations

import argparse
import ast
import importlib.util
import re
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path.cwd()
UNIT = "tests/unit"
SELF = "tests/tools/mirror_tests.py"
# Records of earlier moves: left as they were written.
HISTORY = {SELF, "tests/tools/restructure_24.py"}

E = "etj"
API, CORE, CLI, CTRL, LOCAL = f"{E}/api", f"{E}/core", f"{E}/cli", f"{E}/controller", f"{E}/local"
RENDER, RECONCILE = f"{CORE}/render", f"{CORE}/reconcile"
POLICIES = f"{RECONCILE}/policies"
TC = "etj_testcluster"

# Old path -> new path, both relative to tests/unit. The comment says why when the module
# a file mainly tests is not plain from its old name.
MOVES: dict[str, str] = {
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

# Old path -> {new path: (its docstring, the top-level test functions it takes)}.
SPLITS: dict[str, dict[str, tuple[str, list[str]]]] = {
    "test_policy_deadline_ttl_suspend.py": {
        f"{POLICIES}/test_deadline.py": ("policies/deadline.", ["test_deadline"]),
        f"{POLICIES}/test_ttl.py": ("policies/ttl.", ["test_ttl"]),
        f"{POLICIES}/test_suspend.py": (
            "policies/suspend.",
            ["test_suspend_deletes_every_pod_not_already_going"],
        ),
    },
}

# The shared helpers: stay at tests/unit.
KEEP = {"__init__.py", "conftest.py", "fake_api.py", "reconcile_helpers.py"}

# Where references to the old paths are rewritten (--product-docs adds the product's).
REFERENCE_ROOTS = ["tests", "benchmarks", "README.md"]
PRODUCT_ROOTS = ["operator", "trainer_image"]

# A file's own edits beyond names: (new path, old text, new text).
PATCHES = [
    # golden/ stays a shared folder at tests/unit (README: ETJ_UPDATE_GOLDEN).
    (
        f"{RENDER}/test_objects.py",
        'GOLDEN = Path(__file__).parent / "golden"',
        'GOLDEN = ROOT / "tests" / "unit" / "golden"',
    ),
]


def git(*args: str) -> str:
    return subprocess.run(
        ["git", *args], cwd=ROOT, check=True, capture_output=True, text=True
    ).stdout


def say(msg: str) -> None:
    print(f"mirror_tests: {msg}")


def dotted(rel: str) -> str:
    """tests/unit-relative file -> its module name."""
    return "tests.unit." + rel[: -len(".py")].replace("/", ".")


def depth(rel: str) -> int:
    return rel.count("/")


# The old module name of a moved file (tests.unit.test_x) -> the new one.
NEW_MODULE = {dotted(old): dotted(new) for old, new in MOVES.items()}


# --- 1. package folders ---------------------------------------------------------------------


def make_packages(targets: list[str]) -> None:
    for rel in targets:
        d = Path(rel).parent
        while str(d) != ".":
            init = ROOT / UNIT / d / "__init__.py"
            if not init.exists():
                init.parent.mkdir(parents=True, exist_ok=True)
                init.write_text("")
                git("add", init.relative_to(ROOT).as_posix())
            d = d.parent


# --- 3. each moved file's own rewrite -----------------------------------------------------------

REL_FROM = re.compile(
    r"^(?P<indent>[ \t]*)from (?P<dots>\.+)(?P<mod>[\w.]*) import (?P<names>.+)$", re.M
)
PARENTS = re.compile(r"Path\(__file__\)\.resolve\(\)\.parents\[(\d+)\]")


def absolute(old: str, dots: str, mod: str) -> str:
    """The absolute module a relative import of the file at ``old`` names."""
    package = dotted(old).split(".")[:-1]
    base = package[: len(package) - (len(dots) - 1)]
    return ".".join(base + ([mod] if mod else []))


def rewrite_moved(old: str, new: str, text: str) -> str:
    renames: dict[str, str] = {}

    def from_import(m: re.Match[str]) -> str:
        target = absolute(old, m["dots"], m["mod"])
        if m["mod"]:  # from .x import a, b
            return f"{m['indent']}from {NEW_MODULE.get(target, target)} import {m['names']}"
        # from . import x, y: each a module of that package; one import line each.
        lines = []
        for name in (n.strip() for n in m["names"].split(",")):
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
    shift = depth(new) - depth(old)
    text = PARENTS.sub(lambda m: f"Path(__file__).resolve().parents[{int(m[1]) + shift}]", text)
    for path, before, after in PATCHES:
        if path == new:
            text = text.replace(before, after)
    return text


# --- 2. moves and splits --------------------------------------------------------------------


def move(old: str, new: str) -> None:
    src, dst = ROOT / UNIT / old, ROOT / UNIT / new
    if dst.exists():
        raise SystemExit(f"both {UNIT}/{old} and {UNIT}/{new} exist: merge them by hand, re-run")
    dst.parent.mkdir(parents=True, exist_ok=True)
    git("mv", src.relative_to(ROOT).as_posix(), dst.relative_to(ROOT).as_posix())
    dst.write_text(rewrite_moved(old, new, dst.read_text()))


def split(old: str, parts: dict[str, tuple[str, list[str]]]) -> None:
    src = ROOT / UNIT / old
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
    for new, (docstring, names) in parts.items():
        body = []
        for name in names:
            n = funcs[name]
            start = n.decorator_list[0].lineno if n.decorator_list else n.lineno
            body.append("".join(lines[start - 1 : n.end_lineno]))
            taken.add(name)
        head = header.replace(f'"""{doc}"""', f'"""{docstring}"""', 1)
        out = rewrite_moved(old, new, head + "\n\n".join(body))
        dst = ROOT / UNIT / new
        if dst.exists():
            raise SystemExit(f"{UNIT}/{new} exists: merge it by hand, re-run")
        dst.write_text(out)
        git("add", dst.relative_to(ROOT).as_posix())
    left = set(funcs) - taken
    if any(n.startswith("test_") for n in left):
        raise SystemExit(f"{UNIT}/{old}: tests no part takes: {sorted(left)}")
    git("rm", "-q", src.relative_to(ROOT).as_posix())


# --- 4. references ---------------------------------------------------------------------------


def references(roots: list[str]) -> int:
    pairs = {f"{UNIT}/{o}": f"{UNIT}/{n}" for o, n in MOVES.items()}
    pairs |= {f"{UNIT}/{o}": f"{UNIT}/{Path(n).parent}/" for o, p in SPLITS.items() for n in p}
    patterns = [
        (re.compile(rf"(?<![\w/.-]){re.escape(o)}(?![\w-])"), n)
        for o, n in sorted(pairs.items(), key=lambda p: -len(p[0]))
    ]
    changed = 0
    for root in roots:
        for rel in git("ls-files", "--", root).splitlines():
            p = ROOT / rel
            if rel in HISTORY or not p.is_file() or p.suffix not in {".py", ".md", ".toml", ".txt"}:
                continue
            text = p.read_text()
            new = text
            for pat, repl in patterns:
                new = pat.sub(repl, new)
            if new != text:
                p.write_text(new)
                changed += 1
    return changed


# --- 5. format ----------------------------------------------------------------------------


def fmt() -> None:
    if importlib.util.find_spec("ruff") is None:
        say("WARNING: no ruff in this interpreter (run it with .venv/bin/python); run `make fmt`")
        return
    for args in (["check", "--fix", "-q"], ["format", "-q"]):
        subprocess.run([sys.executable, "-m", "ruff", *args, UNIT], cwd=ROOT, check=False)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--no-format", action="store_true", help="skip ruff --fix / format")
    ap.add_argument(
        "--product-docs",
        action="store_true",
        help="also rewrite the old test paths the product's docstrings name",
    )
    args = ap.parse_args()
    if not (ROOT / UNIT).is_dir():
        sys.exit("run from the repository root")
    todo = {o: n for o, n in MOVES.items() if (ROOT / UNIT / o).exists()}
    splits = {o: p for o, p in SPLITS.items() if (ROOT / UNIT / o).exists()}
    make_packages([*todo.values(), *(n for p in splits.values() for n in p)])
    for old, new in todo.items():
        move(old, new)
    for old, parts in splits.items():
        split(old, parts)
    say(f"moved {len(todo)} files, split {len(splits)}")
    # An emptied old folder (tests/unit/api) goes, with its __init__.py.
    for d in sorted({Path(o).parent for o in MOVES if "/" in o}, reverse=True):
        folder = ROOT / UNIT / d
        if folder.is_dir() and not any(
            p.suffix == ".py" and p.name != "__init__.py" for p in folder.rglob("*")
        ):
            if (folder / "__init__.py").exists():
                git("rm", "-q", (folder / "__init__.py").relative_to(ROOT).as_posix())
            shutil.rmtree(folder, ignore_errors=True)
    roots = REFERENCE_ROOTS + (PRODUCT_ROOTS if args.product_docs else [])
    say(f"references rewritten in {references(roots)} files")
    if not args.no_format:
        fmt()
    git("add", "-A", "--", UNIT)
    left = sorted(p.name for p in (ROOT / UNIT).glob("test_*.py") if p.name not in KEEP)
    if left:
        say(f"WARNING: not placed (add them to MOVES): {left}")
    say("done; review with `git status` and run `make lint`")


if __name__ == "__main__":
    main()

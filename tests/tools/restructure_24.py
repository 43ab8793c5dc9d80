"""Issue 24's mechanical move: the operator package's loose modules into layer packages,
the test cluster out of the product, and every reference rewritten.

Run from the repository root:  python tests/tools/restructure_24.py [--no-format]

Reproducible and idempotent: each ``git mv`` happens only when its source exists (a tree
already moved is left as it is; a file added at an old path since is moved too), every
rewrite maps old names only (a new name never matches an old pattern), and the patches
apply only where their old text is found. The last step runs ``ruff check --fix`` and
``ruff format`` (from .venv when there is one) so the imports come out sorted.

What it does, in order:
1. relative imports in the operator package (and the test cluster) become absolute, read
   from each file's place *before* the move, so none of them crosses a moved boundary;
2. ``git mv`` file by file (directories merge; a file at both places, different, stops it);
3. old dotted names (``etj.k8s``, ``python -m etj.localcluster``, ``mock.patch("etj.x.y")``)
   and old file paths (``operator/etj/k8s.py``) are rewritten, longest first, in every text
   file under the listed roots;
4. patches the move needs beyond names: the ``etj.commands`` entry-point group the CLI
   reads (the test cluster registers ``etj cluster`` there), the test cluster's
   pyproject.toml, the Makefile's editable install of it, pyproject's mypy and
   import-linter settings, the packages' docstrings and the README's layout section.
"""

from __future__ import annotations

import argparse
import re
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path.cwd()
OP = "operator/etj"
TC = "tests/cluster/etj_testcluster"

# Old path -> new path (files or directories), relative to the repository root.
MOVES: list[tuple[str, str]] = [
    # The pure core.
    (f"{OP}/planner.py", f"{OP}/core/planner.py"),
    (f"{OP}/tfconfig.py", f"{OP}/core/tfconfig.py"),
    (f"{OP}/validation.py", f"{OP}/core/validation.py"),
    (f"{OP}/crd.py", f"{OP}/core/crd.py"),
    (f"{OP}/render", f"{OP}/core/render"),
    (f"{OP}/reconcile", f"{OP}/core/reconcile"),
    # The entry points.
    (f"{OP}/cli.py", f"{OP}/cli/main.py"),
    (f"{OP}/init_cli.py", f"{OP}/cli/init.py"),
    (f"{OP}/cliio.py", f"{OP}/cli/files.py"),
    (f"{OP}/convert.py", f"{OP}/cli/convert.py"),
    (f"{OP}/infer.py", f"{OP}/cli/from_data.py"),
    (f"{OP}/planview.py", f"{OP}/cli/planview.py"),
    (f"{OP}/local/cli.py", f"{OP}/cli/run.py"),
    # `etj operator` is an entry point too: it reads files through etj.cli.files, which
    # the controller layer (below cli) may not import.
    (f"{OP}/controller/cli.py", f"{OP}/cli/operator.py"),
    # The one module that talks to the API.
    (f"{OP}/k8s.py", f"{OP}/controller/kube.py"),
    # The local runner's names.
    (f"{OP}/local/process.py", f"{OP}/local/pod_process.py"),
    (f"{OP}/local/procs.py", f"{OP}/local/launch.py"),
    # The test cluster out of the product (node.py first: the directory move follows).
    (f"{OP}/localcluster/node.py", f"{TC}/process_node.py"),
    (f"{OP}/localcluster", TC),
]

# Old dotted module name -> new one.
MODULES: dict[str, str] = {
    "etj.planner": "etj.core.planner",
    "etj.tfconfig": "etj.core.tfconfig",
    "etj.validation": "etj.core.validation",
    "etj.crd": "etj.core.crd",
    "etj.render": "etj.core.render",
    "etj.reconcile": "etj.core.reconcile",
    "etj.cli": "etj.cli.main",
    "etj.init_cli": "etj.cli.init",
    "etj.cliio": "etj.cli.files",
    "etj.convert": "etj.cli.convert",
    "etj.infer": "etj.cli.from_data",
    "etj.planview": "etj.cli.planview",
    "etj.local.cli": "etj.cli.run",
    "etj.controller.cli": "etj.cli.operator",
    "etj.k8s": "etj.controller.kube",
    "etj.local.process": "etj.local.pod_process",
    "etj.local.procs": "etj.local.launch",
    "etj.localcluster.node": "etj_testcluster.process_node",
    "etj.localcluster": "etj_testcluster",
}
# The new etj.cli package's modules: "etj.cli.<one of these>" is already new.
CLI_MODULES = ("main", "init", "files", "convert", "from_data", "planview", "run", "operator")

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
SELF = "tests/tools/restructure_24.py"


def git(*args: str, check: bool = True) -> str:
    return subprocess.run(
        ["git", *args], cwd=ROOT, check=check, capture_output=True, text=True
    ).stdout


def say(msg: str) -> None:
    print(f"restructure_24: {msg}")


# --- 1. relative imports -> absolute -------------------------------------------------

REL_IMPORT = re.compile(r"^(?P<indent>[ \t]*)from (?P<dots>\.+)(?P<rest>[\w.]*) import ", re.M)


def module_parts(path: Path) -> list[str] | None:
    """The dotted module name of a file of the operator package or the test cluster."""
    rel = path.relative_to(ROOT).as_posix()
    for base, prefix in ((OP, ["etj"]), (TC, ["etj_testcluster"])):
        if rel.startswith(base + "/"):
            parts = prefix + rel[len(base) + 1 : -len(".py")].split("/")
            if parts[-1] == "__init__":
                parts = parts[:-1]
                parts.append("__init__")
            return parts
    return None


def absolutize(path: Path) -> bool:
    parts = module_parts(path)
    if parts is None:
        return False
    package = parts[:-1]  # a module's package; for __init__ the package itself
    text = path.read_text()

    def repl(m: re.Match[str]) -> str:
        up = len(m["dots"]) - 1
        if up > len(package) - 1:
            raise SystemExit(f"{path}: relative import beyond the top package: {m[0]}")
        base = package[: len(package) - up]
        target = ".".join(base + ([m["rest"]] if m["rest"] else []))
        return f"{m['indent']}from {target} import "

    new = REL_IMPORT.sub(repl, text)
    if new != text:
        path.write_text(new)
        return True
    return False


# --- 2. moves ---------------------------------------------------------------------------


def tracked(prefix: str) -> list[str]:
    return [p for p in git("ls-files", "--", prefix).splitlines() if p]


def move_file(src: str, dst: str) -> None:
    s, d = ROOT / src, ROOT / dst
    if d.exists():
        if s.read_bytes() != d.read_bytes():
            raise SystemExit(
                f"both {src} and {dst} exist and differ: merge them by hand, then re-run"
            )
        git("rm", "-q", "-f", src)
        return
    d.parent.mkdir(parents=True, exist_ok=True)
    if src in tracked(src):
        git("mv", src, dst)
    else:  # untracked (a new file not yet added): move and add it
        shutil.move(str(s), str(d))
        git("add", dst)


def do_moves() -> None:
    for src, dst in MOVES:
        s = ROOT / src
        if s.is_file():
            move_file(src, dst)
            say(f"moved {src} -> {dst}")
        elif s.is_dir():
            files = [p for p in tracked(src) if (ROOT / p).exists()]
            for f in files:
                move_file(f, dst + f[len(src) :])
            # Untracked non-cache files move too; caches are dropped.
            for p in sorted(s.rglob("*")):
                if p.is_file() and "__pycache__" not in p.parts:
                    rel = p.relative_to(ROOT).as_posix()
                    move_file(rel, dst + rel[len(src) :])
            shutil.rmtree(s, ignore_errors=True)
            if files:
                say(f"moved {src}/ -> {dst}/ ({len(files)} files)")


# --- 3. rewrites ---------------------------------------------------------------------------


def dotted_patterns() -> list[tuple[re.Pattern[str], str]]:
    out = []
    for old in sorted(MODULES, key=len, reverse=True):
        new = MODULES[old]
        tail = r"(?!\w)"
        if old == "etj.cli":
            # Ambiguous: the old module or the new package. Only the module's uses are
            # rewritten: ``from etj.cli import x`` (x not one of the package's modules),
            # ``etj.cli:main``, ``etj.cli.attr`` (attr not one of them); prose stays.
            mods = "|".join(CLI_MODULES)
            others = "|".join(m for m in CLI_MODULES if m != "main")
            tail = rf"(?=\s+import\s|:\w|\.\w)(?!\.(?:{mods})\b)(?!\s+import\s+(?:{others})\b)"
            out.append(
                (
                    re.compile(r"^([ \t]*import )etj\.cli([ \t]*(?:as \w+)?[ \t]*(?:#.*)?)$", re.M),
                    r"\1etj.cli.main\2",
                )
            )
        out.append((re.compile(r"(?<![\w.])" + re.escape(old) + tail), new))
    return out


def path_patterns() -> list[tuple[re.Pattern[str], str]]:
    """operator/etj/k8s.py -> operator/etj/controller/kube.py; also the package-relative
    form (etj/k8s.py -> etj/controller/kube.py, etj/localcluster -> etj_testcluster)."""
    out = []
    for src, dst in sorted(MOVES, key=lambda m: len(m[0]), reverse=True):
        end = r"(?![\w-])"
        out.append((re.compile(r"(?<![\w-])" + re.escape(src) + end), dst))
        bare_src = src[len("operator/") :]
        bare_dst = dst[len("operator/") :] if dst.startswith(OP) else dst[len("tests/cluster/") :]
        out.append((re.compile(r"(?<![\w./-])" + re.escape(bare_src) + end), bare_dst))
    return out


FROM_ETJ_IMPORT = re.compile(
    r"^(?P<indent>[ \t]*)from etj import (?P<name>\w+)(?P<alias> as \w+)?[ \t]*$", re.M
)


def from_etj_import(text: str) -> str:
    """``from etj import k8s`` -> ``from etj.controller import kube as k8s``."""

    def repl(m: re.Match[str]) -> str:
        old = f"etj.{m['name']}"
        if old not in MODULES:
            return m[0]
        parent, _, leaf = MODULES[old].rpartition(".")
        alias = m["alias"] or (f" as {m['name']}" if leaf != m["name"] else "")
        return f"{m['indent']}from {parent} import {leaf}{alias}"

    return FROM_ETJ_IMPORT.sub(repl, text)


def text_files() -> list[Path]:
    files = []
    for root in ROOTS:
        for rel in tracked(root):
            p = ROOT / rel
            if rel == SELF or not p.is_file():
                continue
            files.append(p)
    return files


def rewrite(files: list[Path]) -> int:
    dotted, paths = dotted_patterns(), path_patterns()
    changed = 0
    for p in files:
        try:
            text = p.read_text()
        except UnicodeDecodeError:
            continue
        new = from_etj_import(text)
        for pat, repl in [*paths, *dotted]:
            new = pat.sub(repl, new)
        if new != text:
            p.write_text(new)
            changed += 1
    return changed


# --- 4. patches ---------------------------------------------------------------------------


def patch(rel: str, old: str, new: str, *, regex: bool = False, done: str = "") -> None:
    """Replace ``old`` by ``new`` in a file when ``old`` is there (else: already done;
    for a regex, ``done`` is text that shows it, else a warning says the patch failed)."""
    p = ROOT / rel
    if not p.exists():
        say(f"WARNING: {rel} missing; patch skipped")
        return
    text = p.read_text()
    if not regex and new and new in text:  # done already (new may contain old)
        return
    out = re.sub(old, new, text, flags=re.S | re.M) if regex else text.replace(old, new)
    if out != text:
        p.write_text(out)
    elif (new if not regex else done) not in text:
        say(f"WARNING: {rel}: old text not found, patch not applied: {old[:60]!r}")


def write_new(rel: str, text: str) -> None:
    p = ROOT / rel
    if not p.exists():
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text)
        git("add", rel)


CORE_INIT = '''"""The pure core: the shard plan (``planner``), TF_CONFIG (``tfconfig``), validation, the
CRD (``crd``), the rendered objects (``render``) and the reconcile decisions
(``reconcile``). Pure functions: no I/O, no environment, neither kopf, the Kubernetes client
nor TensorFlow (import-linter and tests/unit/test_purity.py check it).
"""
'''

CLI_INIT = '''"""The entry points: the ``etj`` command (``main``) and its subcommands (``init``,
``convert``, ``run``, ``operator``, the plan view), and the file reading they share
(``files``). Commands read files and print; the logic they call lives below them. Extra
subcommands come from other distributions through the ``etj.commands`` entry-point group
(the test cluster's ``etj cluster``): the product imports none of them.
"""
'''

ETJ_INIT_DOC = '''"""etj: a Kubernetes operator for multi-worker TensorFlow training of large embedding models.

The package is layered (import-linter checks it): the entry points (``etj.cli``) above the
operator (``etj.controller``, the one place that talks to the API), the local runner
(``etj.local``), the pure core (``etj.core``: plan, TF_CONFIG, validation, CRD, rendering,
reconcile decisions; no I/O, no kopf) and the API types every layer shares (``etj.api``).
The test cluster is not part of it (``etj_testcluster``, under tests/cluster). Importing
this package is cheap.
"""'''

TC_PYPROJECT = """# The local Kubernetes control plane and its nodes, for tests and development only: not
# part of the etj product (its wheel and images do not carry it). `make venv` installs it
# editable after etj; it registers `etj cluster` in the etj CLI's `etj.commands` group.
[build-system]
requires = ["hatchling>=1.24"]
build-backend = "hatchling.build"

[project]
name = "etj-testcluster"
version = "0.1.0"
description = "A local Kubernetes control plane (real binaries) and process/kubelet nodes for etj's tests"
requires-python = ">=3.11"
# etj itself (with the operator extra: the Kubernetes client), installed from the
# repository root first.
dependencies = ["etj[operator]"]

[project.entry-points."etj.commands"]
cluster = "etj_testcluster.cli:cluster"

[tool.hatch.build.targets.wheel]
packages = ["etj_testcluster"]
"""

LAYERS = """[[tool.importlinter.contracts]]
# Each layer may import the layers below it, never one above: the entry points (the
# `etj` command and its subcommands); the operator (kopf handlers, the reconcile loop, and
# `kube`, the one module that talks to the API); the local runner (`etj run`'s processes);
# the pure core; the API types every layer shares.
name = "Layers: entry points > operator > local runner > pure core > API types"
type = "layers"
containers = ["etj"]
layers = [
    "cli",
    "controller",
    "local",
    "core",
    "api",
]

[[tool.importlinter.contracts]]
# Inside the pure core (``|``: siblings that may not import each other either): the
# decisions; rendering and the CRD; validation; planning and TF_CONFIG.
name = "Core layers: decisions > rendering | CRD > validation > planning | TF_CONFIG"
type = "layers"
containers = ["etj.core"]
layers = [
    "reconcile",
    "render | crd",
    "validation",
    "planner | tfconfig",
]

[[tool.importlinter.contracts]]
name = "The product never imports the test cluster"
type = "forbidden"
source_modules = ["etj"]
forbidden_modules = ["etj_testcluster"]
"""

README_LAYOUT = """Layout (each package and what it may import; import-linter checks it in `make lint`):

- `operator/etj` — the product's package, in layers, each importing only those below it:
  - `etj.cli` — the entry points: `main` (the `etj` command), `init`, `convert`,
    `from_data` (a job from a data file), `planview`, `run` (`etj run`), `operator`
    (`etj operator`), `files` (reading job files). May import everything below. Extra
    subcommands come from the `etj.commands` entry-point group (the test cluster's
    `etj cluster`), never by import.
  - `etj.controller` — the operator: kopf handlers, the reconcile loop, leader election,
    metrics, and `kube`, the one module that talks to the API. May import `local`,
    `core`, `api`.
  - `etj.local` — `etj run`'s processes: `pod_process` (a rendered Pod as a process spec,
    pure), `launch` (start, poll, stop processes), `runner`, `configmaps`. May import
    `core`, `api`.
  - `etj.core` — the pure core (no I/O, no kopf, no Kubernetes client, no TensorFlow):
    `reconcile` (decisions and policies) > `render` | `crd` > `validation` > `planner` |
    `tfconfig`. May import `api`.
  - `etj.api` — the pydantic models (the CRD's one source), constants, rules. Imports no
    other etj package.
- `trainer_image/etj_trainer` — the trainer (entry points > task > models > data >
  config); no kopf, no Kubernetes client.
- `tests/cluster/etj_testcluster` — the local control plane and its nodes (distribution
  `etj-testcluster`, installed by `make venv` only; `python -m etj_testcluster`); may import
  `etj`, which never imports it.
- `crds/` (generated), `charts/`, `examples/`, `tests/`, `benchmarks/`.
"""

CLI_GROUP_OLD = """    def __init__(self, *args: object, lazy: dict[str, str] | None = None, **kwargs: object):
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        self._lazy = lazy or {}
"""
CLI_GROUP_NEW = """    def __init__(self, *args: object, lazy: dict[str, str] | None = None, **kwargs: object):
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        self._own = lazy or {}

    @property
    def _lazy(self) -> dict[str, str]:
        # Subcommands other distributions register (the test cluster's `etj cluster`),
        # read when asked for: the product never imports them.
        from importlib.metadata import entry_points

        extra = {ep.name: ep.value for ep in entry_points(group="etj.commands")}
        return {**extra, **self._own}
"""


def patches() -> None:
    write_new(f"{OP}/core/__init__.py", CORE_INIT)
    write_new(f"{OP}/cli/__init__.py", CLI_INIT)
    write_new("tests/cluster/pyproject.toml", TC_PYPROJECT)

    patch(
        f"{OP}/__init__.py",
        r'\A""".*?"""',
        ETJ_INIT_DOC.replace("\\", "\\\\"),
        regex=True,
        done="(``etj.core``",
    )
    patch(f"{OP}/cli/main.py", CLI_GROUP_OLD, CLI_GROUP_NEW)
    patch(
        f"{OP}/local/__init__.py",
        "``process`` maps a rendered Pod to a process spec (pure);\n``procs`` starts and stops",
        "``pod_process`` maps a rendered Pod to a process spec (pure);\n``launch`` starts and stops",
    )
    patch(f"{OP}/cli/main.py", '        "cluster": "etj_testcluster.cli:cluster",\n', "")

    patch("pyproject.toml", 'etj = "etj.cli:main"', 'etj = "etj.cli.main:main"')
    patch(
        "pyproject.toml",
        r'^mypy_path = \["operator", "trainer_image"\]\npackages = \["etj"\]',
        'mypy_path = ["operator", "trainer_image", "tests/cluster"]\n'
        'packages = ["etj", "etj_testcluster"]',
        regex=True,
        done='packages = ["etj", "etj_testcluster"]',
    )
    patch(
        "pyproject.toml",
        r'^src = \["operator", "trainer_image", "tests", "benchmarks"\]',
        'src = ["operator", "trainer_image", "tests", "tests/cluster", "benchmarks"]',
        regex=True,
        done='"tests/cluster", "benchmarks"]',
    )
    # The purity contract: the whole core (etj.core.x items become one etj.core).
    pyproject = ROOT / "pyproject.toml"

    def one_core(m: re.Match[str]) -> str:
        items = re.findall(r'"([^"]+)"', m[1])
        kept = list(dict.fromkeys("etj.core" if i.startswith("etj.core.") else i for i in items))
        return "source_modules = [" + ", ".join(f'"{i}"' for i in kept) + "]"

    pyproject.write_text(
        re.sub(
            r"^source_modules = \[([^\]\n]*\betj\.core\.[^\]\n]*)\]",
            one_core,
            pyproject.read_text(),
            flags=re.M,
        )
    )
    patch(
        "pyproject.toml",
        r'^(forbidden_modules = \["kopf", "kubernetes", "tensorflow", )"etj\.controller\.kube", "etj\.controller"\]',
        r'\1"etj.controller", "etj.cli", "etj.local"]',
        regex=True,
        done='"tensorflow", "etj.controller", "etj.cli", "etj.local"]',
    )
    # The layers contract over the old top-level names -> the packages. A name the old
    # contract had that this script does not know (a module added since) is reported.
    layers_re = (
        r'^\[\[tool\.importlinter\.contracts\]\]\n(?:#[^\n]*\n)*name = "Layers: entry points > runners[^\n]*\n'
        r'type = "layers"\ncontainers = \["etj"\]\nlayers = \[\n(.*?)\n\]\n'
    )
    m = re.search(layers_re, pyproject.read_text(), flags=re.S | re.M)
    if m:
        known = {
            "cli", "init_cli", "controller", "localcluster", "local", "k8s", "reconcile",
            "render", "crd", "infer", "planview", "validation", "planner", "tfconfig", "api",
            "cliio",
        }  # fmt: skip
        unknown = set(re.findall(r"\w+", m[1])) - known
        if unknown:
            say(f"WARNING: the old layers contract names {sorted(unknown)}: place them by hand")
    patch(
        "pyproject.toml",
        layers_re,
        LAYERS.replace("\\", "\\\\"),
        regex=True,
        done='name = "Layers: entry points > operator > local runner',
    )
    patch(
        "Makefile",
        "\t$(PY) -m pip install -q -e '.[operator,trainer,dev]'\n\ttouch $@",
        "\t$(PY) -m pip install -q -e '.[operator,trainer,dev]'\n"
        "\t@# The test cluster (etj cluster, python -m etj_testcluster): dev only, not in the product.\n"
        "\t$(PY) -m pip install -q -e tests/cluster\n\ttouch $@",
    )
    patch(
        "Makefile",
        "$(VENV)/.installed: pyproject.toml\n",
        "$(VENV)/.installed: pyproject.toml tests/cluster/pyproject.toml\n",
    )
    patch(
        "README.md",
        "`etj cluster up` (no root needed) starts a process-backed node",
        "`etj cluster` comes with the test cluster (`tests/cluster/etj_testcluster`, which\n"
        "`make venv` installs; the etj wheel and images do not carry it).\n"
        "`etj cluster up` (no root needed) starts a process-backed node",
    )
    patch(
        "README.md",
        r"^Layout: `operator/etj`.*?(?=\n\n|\Z)\n?"
        r"|^Layout \(each package and what it may import.*?^- `crds/` \(generated\)[^\n]*\n",
        README_LAYOUT.replace("\\", "\\\\"),
        regex=True,
        done="Layout (each package and what it may import",
    )


# --- 5. format ----------------------------------------------------------------------------


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
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--no-format", action="store_true", help="skip ruff --fix / format")
    args = ap.parse_args()
    if not (ROOT / OP).is_dir():
        sys.exit("run from the repository root")
    n = 0
    for base in (OP, TC):
        for p in sorted((ROOT / base).rglob("*.py")) if (ROOT / base).is_dir() else []:
            n += absolutize(p)
    say(f"relative imports made absolute in {n} files")
    do_moves()
    say(f"references rewritten in {rewrite(text_files())} files")
    patches()
    if not args.no_format:
        fmt()
    git("add", "-A", "--", *[r for r in ROOTS if (ROOT / r).exists()])
    say("done; review with `git status` and run `make lint`")


if __name__ == "__main__":
    main()

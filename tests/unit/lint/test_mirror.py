"""Every product module with logic has a test module of its name, in the tree that mirrors
its package.

"With logic": the module defines a function or a method (``def`` or ``async def``
anywhere in it, a validator of a pydantic model included). Constants, imports and
re-exports, and classes made of fields only (dataclasses, pydantic models, enums) are not
logic: the schema is tested where it is used (the CRD, the rules, the planner).

The mirror (README.md's "Development"): ``operator/etj/<path>/<name>.py`` is tested in
``tests/{unit,local,integration}/etj/<path>/``; ``trainer_image/etj_trainer/<path>/<name>.py``
in ``tests/trainer/etj_trainer/<path>/``; by a module ``test_<name>.py`` or
``test_<name>_<aspect>.py``. A package's ``__init__.py`` with logic is ``<name>`` = the
package, tested in the package's own mirror directory (``etj_trainer/models/__init__.py``:
``tests/trainer/etj_trainer/models/test_models.py``).

``COVERED_ELSEWHERE`` lists the few modules whose tests cannot live under their name, each
with where they are and why. Nothing else is excused.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
# Product package -> (its import name, the test trees that mirror it).
TREES = {
    "operator/etj": ("etj", ("tests/unit", "tests/local", "tests/integration")),
    "trainer_image/etj_trainer": ("etj_trainer", ("tests/trainer",)),
}
# Module (from the root) -> where its tests are, and why not under its name.
COVERED_ELSEWHERE: dict[str, str] = {}


def has_logic(source: str) -> bool:
    """Whether the module defines a function or a method."""
    return any(
        isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
        for node in ast.walk(ast.parse(source))
    )


def mirror_of(module: Path, package_dir: Path) -> tuple[Path, str]:
    """(mirror directory relative to the test tree's package, module name) of ``module``."""
    rel = module.relative_to(package_dir)
    if rel.name == "__init__.py":
        return rel.parent, rel.parent.name or package_dir.name
    return rel.parent, rel.stem


def mirror_tests(
    module: Path, package_dir: Path, name: str, roots: tuple[str, ...], root: Path
) -> list[Path]:
    """The test modules of ``module`` (of the package ``name`` at ``package_dir``)."""
    directory, stem = mirror_of(module, package_dir)
    found: list[Path] = []
    for tree in roots:
        base = root / tree / name / directory
        found += [*base.glob(f"test_{stem}.py"), *base.glob(f"test_{stem}_*.py")]
    return found


def untested(root: Path = ROOT) -> list[str]:
    """Modules with logic and no test module, as paths from ``root``."""
    missing = []
    for src, (name, roots) in TREES.items():
        package_dir = root / src
        for module in sorted(package_dir.rglob("*.py")):
            if not has_logic(module.read_text()):
                continue
            if not mirror_tests(module, package_dir, name, roots, root):
                missing.append(str(module.relative_to(root)))
    return missing


def test_every_module_with_logic_has_a_test_module():
    missing = [m for m in untested() if m not in COVERED_ELSEWHERE]
    assert not missing, (
        "product modules with logic and no test module of their name (tests/unit/lint/"
        "test_mirror.py says where it goes):\n" + "\n".join(missing)
    )


def test_every_excuse_is_still_needed():
    missing = set(untested())
    for module, reason in COVERED_ELSEWHERE.items():
        assert reason.strip()
        assert (ROOT / module).exists(), f"{module} is gone: drop it from COVERED_ELSEWHERE"
        assert module in missing, f"{module} has a test module now: drop it from COVERED_ELSEWHERE"


def test_logic_is_a_function_or_a_method():
    assert has_logic("def f():\n    return 1\n")
    assert has_logic(
        "class M(Base):\n    x: int = 0\n\n    @validator('x')\n    def v(cls, x): return x\n"
    )
    assert has_logic("async def main():\n    pass\n")
    assert not has_logic('"""Doc."""\nfrom a import b\n__all__ = ["b"]\nX = 1\n')
    assert not has_logic("class Phase(str, Enum):\n    A = 'A'\n\nclass M(Base):\n    x: int = 0\n")


def test_the_check_finds_a_module_without_its_test(tmp_path: Path):
    pkg = tmp_path / "operator" / "etj"
    (pkg / "core" / "render").mkdir(parents=True)
    (pkg / "__init__.py").write_text('"""Doc."""\n')
    (pkg / "core" / "__init__.py").write_text("def f():\n    pass\n")
    (pkg / "core" / "render" / "pod.py").write_text("def render():\n    pass\n")
    (pkg / "core" / "render" / "meta.py").write_text("def labels():\n    pass\n")
    (pkg / "core" / "render" / "names.py").write_text("NAME = 'x'\n")
    (tmp_path / "trainer_image" / "etj_trainer").mkdir(parents=True)
    tests = tmp_path / "tests" / "unit" / "etj" / "core"
    (tests / "render").mkdir(parents=True)
    (tests / "render" / "test_pod_restricted.py").write_text("")
    assert untested(tmp_path) == [
        "operator/etj/core/__init__.py",
        "operator/etj/core/render/meta.py",
    ]
    (tests / "test_core.py").write_text("")
    (tmp_path / "tests" / "local" / "etj" / "core" / "render").mkdir(parents=True)
    (tmp_path / "tests" / "local" / "etj" / "core" / "render" / "test_meta.py").write_text("")
    assert untested(tmp_path) == []

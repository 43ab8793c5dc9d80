"""Loading the kernels: a missing, stale or broken library is a clear error that says what
to run, never a crash."""

from __future__ import annotations

from pathlib import Path

import pytest

from etj_trainer.kernels import build, library


@pytest.fixture
def empty_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("ETJ_KERNELS_DIR", str(tmp_path))
    library.load.cache_clear()
    yield tmp_path
    library.load.cache_clear()


def test_a_missing_library_says_to_build_it(empty_cache: Path):
    with pytest.raises(library.KernelsError, match=r"not built.*make kernels") as e:
        library.load()
    assert str(build.library_path()) in str(e.value)
    assert "other sources" not in str(e.value)


def test_a_stale_library_is_named_and_never_loaded(empty_cache: Path):
    old = empty_cache / "0123456789abcdef"
    old.mkdir()
    (old / build.LIBRARY).write_bytes(b"built from older sources")
    with pytest.raises(library.KernelsError, match=r"0123456789abcdef.*other sources"):
        library.load()


def test_a_library_that_does_not_load_is_a_clear_error(empty_cache: Path):
    path = build.library_path()
    path.parent.mkdir(parents=True)
    path.write_bytes(b"not a shared library")
    with pytest.raises(library.KernelsError, match="do not load into this TensorFlow"):
        library.load()


def test_the_built_library_loads_with_its_ops(kernels: Path):
    library.load.cache_clear()
    ops = library.load()
    assert library.load() is ops
    assert callable(ops.etj_disk_table_lookup)

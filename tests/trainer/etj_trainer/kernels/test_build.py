"""The kernels' build: one library per hash of the sources, TensorFlow's version and the
flags, built once and reused."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from etj_trainer.kernels import build


def test_the_key_changes_with_a_source_and_with_tensorflows_version(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    for source in build.sources():
        shutil.copy(source, tmp_path / source.name)
    monkeypatch.setattr(build, "HERE", tmp_path)
    key = build.build_key()
    assert build.build_key() == key
    assert build.build_key("asan") != key and build.build_key("asan").endswith("-asan")
    (tmp_path / "disk_table.cc").write_text((tmp_path / "disk_table.cc").read_text() + "\n")
    changed = build.build_key()
    assert changed != key
    flags = build._flags()
    monkeypatch.setattr(build, "_flags", lambda: (flags[0], flags[1], "2.99.0"))
    assert build.build_key() not in (key, changed)


def test_the_cache_is_etj_kernels_dir_when_set(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("ETJ_KERNELS_DIR", str(tmp_path))
    assert build.library_path().parent.parent == tmp_path
    monkeypatch.delenv("ETJ_KERNELS_DIR")
    assert build.cache_root() == Path.home() / ".cache" / "etj" / "kernels"


def test_the_command_compiles_every_source_without_contraction():
    cmd = build.command(Path("/x/lib.so"))
    assert cmd[cmd.index("-o") + 1] == "/x/lib.so"
    assert all(str(s) in cmd for s in build.sources())
    assert "-ffp-contract=off" in cmd and "-shared" in cmd
    assert any(flag.startswith("-l") for flag in cmd)
    assert "-fsanitize=address" in build.command(Path("/x/lib.so"), "asan")


def test_a_built_library_is_reused_not_rebuilt(kernels: Path, monkeypatch: pytest.MonkeyPatch):
    assert kernels == build.library_path() and kernels.stat().st_size > 0
    # Any user loads it (the image builds as root and runs as uid 1000).
    assert kernels.stat().st_mode & 0o005 == 0o005
    mtime = kernels.stat().st_mtime_ns

    def no_compiler(*args: object, **kwargs: object) -> None:
        raise AssertionError("compiled again")

    monkeypatch.setattr(build.subprocess, "run", no_compiler)
    assert build.build() == kernels
    assert kernels.stat().st_mtime_ns == mtime


def test_a_failed_compile_says_so_and_leaves_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    monkeypatch.setenv("ETJ_KERNELS_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("CXX", "false")
    with pytest.raises(RuntimeError, match="building the etj kernels failed"):
        build.build()
    assert not list((tmp_path / "cache").glob("*/*.so*"))

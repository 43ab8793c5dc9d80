"""The two images, built from their Dockerfiles by ``make images`` (tests/cluster/build-images.sh).

Checks what a user of the images sees first: each prints its help, and the trainer image
trains the quickstart in single-process mode (no TF_CONFIG) to its last step, writing
checkpoints to a mounted directory. Each image carries only what it runs: the operator
image no TensorFlow, trainer or test cluster; the trainer image etj.api of the operator's
package and nothing else of it. Runs with docker where a Docker engine answers, else
with podman (root: buildah/podman come from Debian packages). Skips with the reason
elsewhere, except in CI (``CI`` set), where a missing engine is a failure.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from etj_testcluster.cluster import cache_dir

ROOT = Path(__file__).resolve().parents[2]
BUILD = ROOT / "tests" / "cluster" / "build-images.sh"
# The tags build-images.sh gives the images (it reads the same variables).
OPERATOR = os.environ.get("ETJ_OPERATOR_IMAGE", "etj-operator:dev")
TRAINER = os.environ.get("ETJ_TRAINER_IMAGE", "etj-trainer:dev")
STEPS = 200  # a short run of the quickstart's model: what matters is that it trains and ends
CONTAINERS_CONF = ROOT / "tests" / "cluster" / "containers.conf"


def _engine_env() -> dict[str, str]:
    """The environment the engine runs in: the project's registries and storage settings."""
    return {**os.environ, "CONTAINERS_CONF": str(CONTAINERS_CONF)}


def _engine() -> tuple[str | None, str]:
    """The engine to build and run with, or None and why not."""
    docker = shutil.which("docker")
    if docker and subprocess.run([docker, "info"], capture_output=True).returncode == 0:
        return "docker", ""
    if os.geteuid() != 0:
        return None, "no Docker engine, and buildah/podman need root here"
    return "podman", ""


@pytest.fixture(scope="module")
def engine() -> Iterator[str]:
    name, why = _engine()
    if name is None:
        if os.environ.get("CI"):
            pytest.fail(f"CI must build the images: {why}")
        pytest.skip(f"images not built: {why}")
    env = _engine_env()
    # Cached by the hash of the inputs: cold ~5 min, warm under a few seconds.
    build = subprocess.run(
        ["bash", str(BUILD)], capture_output=True, text=True, env=env, timeout=3600
    )
    assert build.returncode == 0, f"make images failed:\n{build.stdout[-3000:]}{build.stderr}"
    yield name


def run(engine: str, *args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [engine, "run", "--rm", "--network", "none", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=_engine_env(),
    )


def test_operator_image_prints_help_without_tensorflow(engine: str) -> None:
    help_ = run(engine, OPERATOR, "--help")
    assert help_.returncode == 0, help_.stderr
    assert "operator" in help_.stdout and "render" in help_.stdout
    # The operator image must not carry TensorFlow; kopf and the client are there.
    probe = run(
        engine,
        "--entrypoint",
        "python",
        OPERATOR,
        "-c",
        "import importlib.util as u; print(u.find_spec('tensorflow'), "
        "u.find_spec('kopf') is not None, u.find_spec('kubernetes') is not None)",
    )
    assert probe.stdout.split() == ["None", "True", "True"], probe.stderr
    user = run(engine, "--entrypoint", "id", OPERATOR, "-u")
    assert user.stdout.strip() == "1000"


def importable(engine: str, image: str, *modules: str) -> dict[str, bool]:
    """Which of ``modules`` import in ``image`` (each in its own interpreter state, by a
    real import: a package that is there but whose dependencies are not counts as absent)."""
    script = (
        "import importlib, json, sys\n"
        "def ok(m):\n"
        "    try:\n"
        "        importlib.import_module(m)\n"
        "    except ImportError:\n"
        "        return False\n"
        "    return True\n"
        "print(json.dumps({m: ok(m) for m in sys.argv[1:]}))\n"
    )
    probe = run(engine, "--entrypoint", "python", image, "-c", script, *modules)
    assert probe.returncode == 0, probe.stderr
    return dict(json.loads(probe.stdout.splitlines()[-1]))


def test_operator_image_carries_neither_the_trainer_nor_the_test_cluster(engine: str) -> None:
    assert importable(
        engine,
        OPERATOR,
        "etj.controller",
        "etj.cli.main",
        "tensorflow",
        "etj_trainer",
        "etj_testcluster",
    ) == {
        "etj.controller": True,
        "etj.cli.main": True,
        "tensorflow": False,
        "etj_trainer": False,
        "etj_testcluster": False,
    }


def test_trainer_image_carries_etj_api_alone_of_the_operators_package(engine: str) -> None:
    assert importable(
        engine,
        TRAINER,
        "etj_trainer.main",
        "etj_trainer.sdk",
        "etj.api.job",
        "etj.controller",
        "etj.core",
        "etj.cli",
        "etj.local",
        "kopf",
        "kubernetes",
        "etj_testcluster",
    ) == {
        "etj_trainer.main": True,
        "etj_trainer.sdk": True,
        "etj.api.job": True,
        "etj.controller": False,
        "etj.core": False,
        "etj.cli": False,
        "etj.local": False,
        "kopf": False,
        "kubernetes": False,
        "etj_testcluster": False,
    }


def test_trainer_image_prints_help(engine: str) -> None:
    help_ = run(engine, TRAINER, "--help")
    assert help_.returncode == 0, help_.stderr
    assert "--config" in help_.stdout and "etj trainer" in help_.stdout


def _quickstart_config(steps: int) -> dict:
    """The chief's trainer.json for the quickstart, as the operator renders it."""
    job = yaml.safe_load((ROOT / "examples" / "quickstart.yaml").read_text())
    job["spec"]["training"]["steps"] = steps
    job["spec"]["checkpoint"]["everySteps"] = steps // 2
    etj = Path(sys.executable).with_name("etj")
    rendered = subprocess.run(
        [str(etj), "render", "-"], input=yaml.safe_dump(job), capture_output=True, text=True
    )
    if rendered.returncode != 0:  # `render` takes a path; write one
        raise AssertionError(rendered.stderr)
    for doc in yaml.safe_load_all(rendered.stdout):
        if doc and doc.get("kind") == "ConfigMap":
            return json.loads(doc["data"]["trainer.json"])
    raise AssertionError("no trainer ConfigMap in `etj render` output")


def test_trainer_image_trains_quickstart_single_process(engine: str, tmp_path: Path) -> None:
    config = _quickstart_config(STEPS)
    etc = tmp_path / "etc"
    ckpt = tmp_path / "checkpoints"
    etc.mkdir()
    ckpt.mkdir()
    ckpt.chmod(0o777)  # the image runs as uid 1000
    (etc / "trainer.json").write_text(json.dumps(config))
    trained = run(
        engine,
        "-v",
        f"{etc}:/etc/etj:ro",
        "-v",
        f"{ckpt}:/var/lib/etj/checkpoints",
        "-e",
        "ETJ_TRAINER_CONFIG=/etc/etj/trainer.json",
        "--memory",
        "4g",
        TRAINER,
        timeout=900,
    )
    out = trained.stdout + trained.stderr
    assert trained.returncode == 0, out[-4000:]
    assert "strategy local" in out, out[-4000:]  # single-process: no TF_CONFIG
    events = [json.loads(line) for line in trained.stdout.splitlines() if line.startswith("{")]
    assert {"event": "done", "step": STEPS} in events, out[-4000:]
    assert any(e["event"] == "progress" for e in events), out[-4000:]
    checkpoints = list((ckpt / "quickstart").glob("ckpt-*.index"))
    assert checkpoints, f"no checkpoint written: {sorted(p.name for p in ckpt.rglob('*'))}"


def test_an_up_to_date_image_whose_archive_is_gone_is_saved_again(engine: str) -> None:
    """kind's nodes get the images from their archives (tests/cluster/kind-load-images.sh):
    an image the engine already holds, its archive deleted with a cleared cache, is saved
    again rather than passed over as up to date (a cold CI run found no archive to load and
    every kind e2e test timed out waiting for the operator's pod)."""
    images = cache_dir() / "images"
    archives = sorted(images.glob("etj-pause-*.tar"))
    assert len(archives) == 1, f"the pause image's archive in {images}: {archives}"
    archive = archives[0]
    aside = archive.with_name(archive.name + ".aside")
    archive.rename(aside)
    try:
        got = subprocess.run(
            ["bash", str(BUILD), "pause"],
            capture_output=True,
            text=True,
            env=_engine_env(),
            timeout=600,
        )
        assert got.returncode == 0, got.stdout + got.stderr
        assert archive.is_file(), f"{archive} not saved again:\n{got.stdout}"
        assert "up to date" in got.stdout, got.stdout  # not rebuilt: only saved
    finally:
        if archive.exists():
            aside.unlink()
        else:
            aside.rename(archive)

"""``etj cluster up|status|down``: a local control plane in the background."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import click

from etj.localcluster.cluster import cache_dir


def _state(state_dir: str | None) -> Path:
    return Path(state_dir) if state_dir else cache_dir() / "cluster"


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie still "exists"; its /proc status says so.
    try:
        return "State:\tZ" not in Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return True


def _supervisor_pid(state: Path) -> int | None:
    try:
        pid = int((state / "supervisor.pid").read_text())
    except (OSError, ValueError):
        return None
    return pid if _alive(pid) else None


def _component_pids(state: Path) -> list[int]:
    try:
        return list(json.loads((state / "cluster" / "pids.json").read_text()).values())
    except (OSError, ValueError):
        return []


state_option = click.option(
    "--state-dir",
    default=None,
    help="Where the cluster keeps its state (default: ~/.cache/etj/cluster).",
)


@click.group()
def cluster() -> None:
    """A local Kubernetes control plane (etcd, kube-apiserver, controller-manager, scheduler)."""


@cluster.command()
@state_option
@click.option("--timeout", default=180.0, show_default=True, help="Seconds to wait for readiness.")
def up(state_dir: str | None, timeout: float) -> None:
    """Start the cluster in the background and print its kubeconfig path."""
    state = _state(state_dir)
    kubeconfig = state / "cluster" / "kubeconfig"
    if _supervisor_pid(state) and (state / "ready").exists():
        click.echo(kubeconfig)
        return
    state.mkdir(parents=True, exist_ok=True)
    log = open(state / "supervisor.log", "wb")  # noqa: SIM115 - handed to the child
    proc = subprocess.Popen(
        [sys.executable, "-m", "etj.localcluster", str(state)],
        stdout=log,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
        start_new_session=True,
    )
    log.close()
    (state / "supervisor.pid").write_text(str(proc.pid))
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if (state / "ready").exists():
            click.echo(kubeconfig)
            return
        if proc.poll() is not None:
            raise click.ClickException(
                f"the cluster did not start:\n{(state / 'supervisor.log').read_text()[-4000:]}"
            )
        time.sleep(0.25)  # poll interval of a deadline-bounded wait
    proc.terminate()
    raise click.ClickException(
        f"the cluster was not ready within {timeout:.0f}s; see {state / 'supervisor.log'}"
    )


@cluster.command()
@state_option
def status(state_dir: str | None) -> None:
    """Say whether the cluster runs, and print its kubeconfig path."""
    state = _state(state_dir)
    if _supervisor_pid(state) and (state / "ready").exists():
        click.echo(f"running: {state / 'cluster' / 'kubeconfig'}")
        return
    click.echo(f"not running (state: {state})")
    raise SystemExit(1)


@cluster.command()
@state_option
@click.option("--timeout", default=30.0, show_default=True)
def down(state_dir: str | None, timeout: float) -> None:
    """Stop every process of the cluster."""
    state = _state(state_dir)
    pid = _supervisor_pid(state)
    components = _component_pids(state)
    if pid:
        os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and any(
        _alive(p) for p in [*((pid and [pid]) or []), *components]
    ):
        time.sleep(0.2)  # poll interval of a deadline-bounded wait
    for p in [*((pid and [pid]) or []), *components]:
        if _alive(p):
            os.kill(p, signal.SIGKILL)
    (state / "supervisor.pid").unlink(missing_ok=True)
    click.echo("stopped")

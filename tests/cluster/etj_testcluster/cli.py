"""``etj cluster up|status|down``: a local control plane in the background.

``up`` starts a supervisor process (``python -m etj_testcluster STATE``) in its own
session, waits until it reports the cluster ready, and prints the kubeconfig path, so
``export KUBECONFIG=$(etj cluster up)`` works. The supervisor holds the components (they die
with it) and stops them on SIGTERM. ``down`` sends that SIGTERM, then SIGKILLs whatever is
left after a deadline. This module only starts, inspects and stops: the cluster itself is
``etj_testcluster.cluster``.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import click

from etj_testcluster.cluster import cache_dir, process_alive
from etj_testcluster.waiting import WaitTimeout, wait_for


def _state(state_dir: str | None) -> Path:
    return Path(state_dir) if state_dir else cache_dir() / "cluster"


def _supervisor_pid(state: Path) -> int | None:
    try:
        pid = int((state / "supervisor.pid").read_text())
    except (OSError, ValueError):
        return None
    return pid if process_alive(pid) else None


def _component_pids(state: Path) -> dict[str, int]:
    try:
        return {str(k): int(v) for k, v in json.loads((state / "pids.json").read_text()).items()}
    except (OSError, ValueError, AttributeError):
        return {}


def _running(state: Path) -> bool:
    """The supervisor lives, reported ready, and every component it started still runs."""
    components = _component_pids(state / "cluster")
    return (
        _supervisor_pid(state) is not None
        and (state / "ready").exists()
        and bool(components)
        and all(process_alive(p) for p in components.values())
    )


state_option = click.option(
    "--state-dir",
    default=None,
    envvar="ETJ_CLUSTER_STATE",
    help="Where the cluster keeps its state and logs (default: ~/.cache/etj/cluster).",
)


@click.group()
def cluster() -> None:
    """A local Kubernetes control plane (etcd, kube-apiserver, controller-manager, scheduler)."""


@cluster.command()
@state_option
@click.option("--timeout", default=180.0, show_default=True, help="Seconds to wait for readiness.")
@click.option(
    "--node",
    type=click.Choice(["process", "none"]),
    default="process",
    show_default=True,
    help="process: a node that runs pods as local processes (no root); none: a control "
    "plane only (pods are scheduled, never run). Real containers on several nodes: "
    "`make kind-up`.",
)
@click.option(
    "--locked-down",
    is_flag=True,
    help="Admit as a locked-down cluster (OpenShift) does: OwnerReferencesPermissionEnforcement "
    "and PodSecurity (label a namespace pod-security.kubernetes.io/enforce=restricted).",
)
def up(state_dir: str | None, timeout: float, node: str, locked_down: bool) -> None:
    """Start the cluster in the background and print its kubeconfig path."""
    state = _state(state_dir)
    kubeconfig = state / "cluster" / "kubeconfig"
    if _running(state):
        click.echo(kubeconfig)
        return
    if _supervisor_pid(state):
        raise click.ClickException(
            f"a cluster in {state} is starting or broken; `etj cluster down` first"
        )
    state.mkdir(parents=True, exist_ok=True)
    (state / "ready").unlink(missing_ok=True)
    log_path = state / "supervisor.log"
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "etj_testcluster",
                str(state),
                node,
                "locked-down" if locked_down else "",
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            # Its own session: a Ctrl-C in the shell that ran `up` must not reach it.
            start_new_session=True,
        )
    (state / "supervisor.pid").write_text(str(proc.pid))
    click.echo(f"starting the local cluster (logs: {state / 'cluster' / 'logs'})", err=True)

    def ready() -> bool:
        if (state / "ready").exists():
            return True
        if proc.poll() is not None:
            raise click.ClickException(
                f"the cluster did not start:\n{log_path.read_text(errors='replace')[-4000:]}"
            )
        return False

    try:
        wait_for(ready, timeout, "the local cluster to be ready")
    except WaitTimeout:
        _stop(state, 30.0)
        raise click.ClickException(
            f"the cluster was not ready within {timeout:.0f}s; see {log_path}"
        ) from None
    click.echo(kubeconfig)


@cluster.command()
@state_option
def status(state_dir: str | None) -> None:
    """Say whether the cluster runs and print its kubeconfig path (exit 1 if it does not)."""
    state = _state(state_dir)
    if _running(state):
        click.echo(f"running: {state / 'cluster' / 'kubeconfig'}")
        return
    click.echo(f"not running (state: {state})")
    raise SystemExit(1)


def _stop(state: Path, timeout: float) -> bool:
    """SIGTERM the supervisor, then SIGKILL anything left; whether anything was running."""
    supervisor = _supervisor_pid(state)
    pids = [*([supervisor] if supervisor else []), *_component_pids(state / "cluster").values()]
    pids = [p for p in pids if process_alive(p)]
    if supervisor:
        os.kill(supervisor, signal.SIGTERM)
    # What is still alive at the deadline is killed below.
    with contextlib.suppress(WaitTimeout):
        wait_for(lambda: not any(process_alive(p) for p in pids), timeout, "the cluster to stop")
    for p in pids:
        if process_alive(p):
            with contextlib.suppress(ProcessLookupError):
                os.kill(p, signal.SIGKILL)
    (state / "supervisor.pid").unlink(missing_ok=True)
    (state / "ready").unlink(missing_ok=True)
    return bool(pids)


@cluster.command()
@state_option
@click.option("--timeout", default=60.0, show_default=True, help="Seconds before SIGKILL.")
def down(state_dir: str | None, timeout: float) -> None:
    """Stop every process of the cluster."""
    state = _state(state_dir)
    click.echo("stopped" if _stop(state, timeout) else f"not running (state: {state})")

"""The background supervisor behind ``etj cluster up``:
``python -m etj_testcluster STATE [NODE [locked-down]]``.

Starts the cluster under ``STATE/cluster`` (``locked-down``: ``LocalCluster(locked_down=True)``)
and its node (``process``, the default: the process-backed node of ``etj_testcluster.process_node``,
which runs pods as local processes; ``none``: pods stay Pending-bound and never run), writes
``STATE/ready`` (the kubeconfig path) once every component is healthy, waits for SIGTERM or
SIGINT, and stops the node and the cluster. Its components die with it if it is killed
(PR_SET_PDEATHSIG). It does nothing else.
"""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path

from etj.local.launch import Proc, start
from etj_testcluster.cluster import LocalCluster

NODE_KINDS = ("process", "none")


class _StopRequested(Exception):
    pass


def _request_stop(signum: int, _frame: object) -> None:
    raise _StopRequested(signal.Signals(signum).name)


def _start_process_node(cluster: LocalCluster, state: Path) -> Proc:
    """The process-backed node as a child of this supervisor (it dies with it)."""
    node_state = state / "node"
    node_state.mkdir(parents=True, exist_ok=True)
    return start(
        "etj-node",
        [
            sys.executable,
            "-m",
            "etj_testcluster.process_node",
            f"--kubeconfig={cluster.kubeconfig}",
            f"--state-dir={node_state}",
        ],
        dict(os.environ),
        cluster.logs / "etj-node.log",
        node_state,
    )


def main(state_dir: str, node: str = "process", locked_down: str = "") -> int:
    if node not in NODE_KINDS:
        print(f"unknown node kind {node!r}; one of {', '.join(NODE_KINDS)}", file=sys.stderr)
        return 2
    state = Path(state_dir)
    ready = state / "ready"
    ready.unlink(missing_ok=True)
    cluster = LocalCluster(state / "cluster", locked_down=locked_down == "locked-down")
    # Handlers, not a blocked signal mask: children inherit the mask, and a component with
    # SIGTERM blocked would only stop on the SIGKILL after the grace period. A signal
    # during start() unwinds it, and start() stops what it had started.
    signal.signal(signal.SIGTERM, _request_stop)
    signal.signal(signal.SIGINT, _request_stop)
    node_proc: Proc | None = None
    try:
        cluster.start()
        if node == "process":
            node_proc = _start_process_node(cluster, state)
        ready.write_text(str(cluster.kubeconfig))
        print(f"cluster ready: {cluster.kubeconfig}", flush=True)
        while True:
            signal.pause()
    except _StopRequested as why:
        print(f"stopping ({why})", flush=True)
    finally:
        # A second signal must not interrupt the stop itself.
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        if node_proc is not None:
            node_proc.stop(grace=10)  # its pods' processes die with it
        cluster.stop()
        ready.unlink(missing_ok=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:4]))

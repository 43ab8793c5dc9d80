"""The background supervisor behind ``etj cluster up``: ``python -m etj.localcluster STATE``.

Starts the cluster under ``STATE/cluster``, writes ``STATE/ready`` (the kubeconfig path)
once every component is healthy, waits for SIGTERM or SIGINT, and stops the cluster. Its
components die with it if it is killed (PR_SET_PDEATHSIG). It does nothing else.
"""

from __future__ import annotations

import signal
import sys
from pathlib import Path

from etj.localcluster.cluster import LocalCluster


class _StopRequested(Exception):
    pass


def _request_stop(signum: int, frame: object) -> None:
    raise _StopRequested(signal.Signals(signum).name)


def main(state_dir: str) -> int:
    state = Path(state_dir)
    ready = state / "ready"
    ready.unlink(missing_ok=True)
    cluster = LocalCluster(state / "cluster")
    # Handlers, not a blocked signal mask: children inherit the mask, and a component with
    # SIGTERM blocked would only stop on the SIGKILL after the grace period. A signal
    # during start() unwinds it, and start() stops what it had started.
    signal.signal(signal.SIGTERM, _request_stop)
    signal.signal(signal.SIGINT, _request_stop)
    try:
        cluster.start()
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
        cluster.stop()
        ready.unlink(missing_ok=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))

"""The background supervisor behind ``etj cluster up``: starts the cluster, waits for
SIGTERM, stops it. Its components die with it (PR_SET_PDEATHSIG)."""

from __future__ import annotations

import signal
import sys
from pathlib import Path

from etj.localcluster.cluster import LocalCluster


def main(state_dir: str) -> int:
    state = Path(state_dir)
    ready = state / "ready"
    ready.unlink(missing_ok=True)
    cluster = LocalCluster(state / "cluster")
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM, signal.SIGINT})
    try:
        cluster.start()
        ready.write_text(str(cluster.kubeconfig))
        print(f"cluster ready: {cluster.kubeconfig}", flush=True)
        signal.sigwait({signal.SIGTERM, signal.SIGINT})
    finally:
        cluster.stop()
        ready.unlink(missing_ok=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))

"""A local Kubernetes control plane for tests and development, from the real binaries.

No mock: etcd, kube-apiserver, kube-controller-manager and kube-scheduler built from Go
modules by ``tests/cluster/build-binaries.sh`` (``make binaries``), plus one Node object.
``LocalCluster`` runs no pods itself, listens on 127.0.0.1 only and leaves no process
behind; ``etj cluster up`` adds a node that runs them, the process-backed one
(``etj_testcluster.process_node``). Real containers on real nodes: the kind cluster
(``make kind-up``, tests/e2e/test_kind.py).

Use from Python::

    from etj_testcluster import LocalCluster

    c = LocalCluster(tmp_dir / "cluster").start()  # bin_dir defaults to default_bin_dir()
    try:
        c.kubeconfig                    # Path of an admin kubeconfig
        c.kubectl("get", "nodes")       # CompletedProcess[str]; ClusterError if it fails
        c.api_client()                  # kubernetes.client.ApiClient
        c.logs / "kube-apiserver.log"   # one log file per component
    finally:
        c.stop()                        # SIGTERM, then SIGKILL after a deadline

``LocalCluster`` is also a context manager. From the shell: ``etj cluster up`` (prints the
kubeconfig path), ``etj cluster status``, ``etj cluster down``. In tests, the fixtures of
``tests/integration/conftest.py``: ``cluster``, ``crds``, ``namespace``, ``api_client``.

Public surface: ``LocalCluster``, ``ClusterError``, ``default_bin_dir``,
``missing_binaries``, ``K8S_VERSION``, ``LOCKED_DOWN_ADMISSION`` (the admission plugins
``LocalCluster(..., locked_down=True)`` and ``etj cluster up --locked-down`` add).
"""

from etj_testcluster.cluster import (
    K8S_VERSION,
    LOCKED_DOWN_ADMISSION,
    ClusterError,
    LocalCluster,
    default_bin_dir,
    missing_binaries,
)

__all__ = [
    "K8S_VERSION",
    "LOCKED_DOWN_ADMISSION",
    "ClusterError",
    "LocalCluster",
    "default_bin_dir",
    "missing_binaries",
]

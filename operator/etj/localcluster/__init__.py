"""A local Kubernetes control plane for tests and development, from the real binaries.

Public surface: ``LocalCluster`` (start/stop/kubectl/kubeconfig), ``default_bin_dir``,
``missing_binaries``, ``ClusterError``. ``etj cluster up|status|down`` runs one in the
background through a small supervisor process (``python -m etj.localcluster``).
"""

from etj.localcluster.cluster import ClusterError, LocalCluster, default_bin_dir, missing_binaries

__all__ = ["ClusterError", "LocalCluster", "default_bin_dir", "missing_binaries"]

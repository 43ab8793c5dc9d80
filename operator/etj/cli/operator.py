"""``etj operator``: run the operator (kopf) against the cluster ``--kubeconfig`` (or
KUBECONFIG) points to, else the in-cluster service account."""

from __future__ import annotations

import asyncio
import logging
import sys
from collections.abc import Coroutine
from typing import TYPE_CHECKING, Any

import click

from etj.api.constants import DEFAULT_IMAGE
from etj.api.quantity import quantity_bytes
from etj.api.spec import GangScheduler

if TYPE_CHECKING:
    from etj.core.render.settings import NetworkPolicySettings


@click.command()
@click.option(
    "--namespace",
    "-n",
    "namespaces",
    multiple=True,
    envvar="ETJ_NAMESPACES",
    help="Watch only these namespaces (repeatable). Default: cluster-wide.",
)
@click.option(
    "--default-image",
    default=DEFAULT_IMAGE,
    envvar="ETJ_DEFAULT_IMAGE",
    show_default=True,
    help="Trainer image for jobs that name none.",
)
@click.option(
    "--kubeconfig", default=None, envvar="KUBECONFIG", help="Like kubectl's; else in-cluster."
)
@click.option(
    "--liveness",
    default="http://0.0.0.0:8081/healthz",
    envvar="ETJ_LIVENESS",
    show_default=True,
    help="Liveness endpoint URL ('' to disable).",
)
@click.option(
    "--metrics-port",
    default=8080,
    type=int,
    # Not ETJ_METRICS_PORT: that is the trainer's (etj.api.constants.METRICS_PORT_ENV).
    envvar="ETJ_OPERATOR_METRICS_PORT",
    show_default=True,
    help="Port of the Prometheus metrics (0 to disable).",
)
@click.option(
    "--leader-election",
    default=None,
    envvar="ETJ_LEADER_ELECTION",
    metavar="NAMESPACE/NAME",
    help="Run only while holding this coordination.k8s.io Lease (several replicas: one "
    "active, the others on standby). The chart sets it when replicaCount > 1.",
)
@click.option(
    "--resync-seconds",
    default=30.0,
    type=float,
    envvar="ETJ_RESYNC_SECONDS",
    show_default=True,
    help="A full resync of the watch cache from the API (one LIST of jobs, one of pods) "
    "and a pass over every unfinished job at least this often.",
)
@click.option(
    "--progress-seconds",
    default=10.0,
    type=float,
    # Not ETJ_PROGRESS_SECONDS: that is the trainer's report interval (PROGRESS_SECONDS_ENV).
    envvar="ETJ_OPERATOR_PROGRESS_SECONDS",
    show_default=True,
    help="How often the chief's progress is read into status.",
)
@click.option(
    "--max-memory-on-oom",
    default="64Gi",
    envvar="ETJ_MAX_MEMORY_ON_OOM",
    show_default=True,
    help="Cap for memory limits raised after OOM kills.",
)
@click.option(
    "--gang-scheduler",
    type=click.Choice([g.value for g in GangScheduler]),
    default=GangScheduler.WORKLOAD.value,
    envvar="ETJ_GANG_SCHEDULER",
    show_default=True,
    help="Gang scheduler of jobs whose runPolicy.schedulingPolicy names none: Workload "
    "(Kubernetes' Workload API, v1.35+ with the GenericWorkload and GangScheduling feature "
    "gates), Volcano, SchedulerPlugins (coscheduling) or None.",
)
@click.option(
    "--network-policy",
    default="",
    envvar="ETJ_NETWORK_POLICY",
    metavar="NAMESPACE/KEY=VALUE,...",
    help="Create a NetworkPolicy with every job: only the job's pods reach its TensorFlow "
    "port, only the operator's pods (this namespace, these labels) its metrics port. "
    "Empty: none.",
)
@click.option(
    "--checkpoint-storage-class",
    default=None,
    envvar="ETJ_CHECKPOINT_STORAGE_CLASS",
    help="StorageClass of checkpoint.storage claims that name none (default: the cluster's "
    "default class); it must provision ReadWriteMany volumes.",
)
@click.option(
    "--node-loss-seconds",
    type=click.IntRange(0, 3600),
    default=30,
    envvar="ETJ_NODE_LOSS_SECONDS",
    show_default=True,
    help="Seconds a replica stays on a NotReady or unreachable node before it is evicted "
    "and replaced (a job's placement.nodeLossSeconds overrides it).",
)
@click.option(
    "--log-format",
    type=click.Choice(["json", "plain"]),
    default="json",
    envvar="ETJ_LOG_FORMAT",
    show_default=True,
)
@click.option("--verbose", "-v", is_flag=True)
def operator(
    namespaces: tuple[str, ...],
    default_image: str,
    kubeconfig: str | None,
    liveness: str,
    metrics_port: int,
    leader_election: str | None,
    resync_seconds: float,
    progress_seconds: float,
    max_memory_on_oom: str,
    gang_scheduler: str,
    network_policy: str,
    checkpoint_storage_class: str | None,
    node_loss_seconds: int,
    log_format: str,
    verbose: bool,
) -> None:
    """Run the etj operator."""
    import kopf
    from kubernetes.config import ConfigException
    from prometheus_client import start_http_server

    import etj.controller.handlers  # noqa: F401  (registers the handlers)
    from etj.cli.files import InputError, read_kubeconfig
    from etj.controller import metrics
    from etj.controller.cache import WatchCache
    from etj.controller.handlers import post_event
    from etj.controller.kube import Kube, load_config
    from etj.controller.leader import LeaderElector, serve_liveness
    from etj.controller.login import register_login
    from etj.controller.reconciler import Reconciler
    from etj.controller.settings import OperatorSettings

    if kubeconfig:
        read_kubeconfig(kubeconfig)
    try:
        api = load_config(kubeconfig)
    except ConfigException as exc:
        message = " ".join(str(exc).split())
        raise InputError(kubeconfig or "kubeconfig", f"cannot be used: {message}") from None

    settings = OperatorSettings(
        default_image=default_image,
        resync_seconds=resync_seconds,
        progress_seconds=progress_seconds,
        max_memory_on_oom=quantity_bytes(max_memory_on_oom),
        metrics_port=metrics_port,
        gang_scheduler=GangScheduler(gang_scheduler),
        network_policy=_network_policy(network_policy),
        checkpoint_storage_class=checkpoint_storage_class or None,
        node_loss_seconds=node_loss_seconds,
    )
    if metrics_port:
        start_http_server(metrics_port)
    if kubeconfig:
        register_login(api.configuration)  # kopf's own login would ignore the path
    cache = WatchCache()
    reconciler = Reconciler(Kube(api), settings, post_event, cache=cache)
    memo = kopf.Memo(
        reconciler=reconciler,
        settings=settings,
        wakeups={},
        last_passes=set(),
        cache=cache,
        namespaces=list(namespaces),
    )
    kopf.configure(
        verbose=verbose,
        log_format=kopf.LogFormat.JSON if log_format == "json" else kopf.LogFormat.PLAIN,
    )
    _configure_logging(verbose)

    def run_kopf(liveness_endpoint: str | None) -> Coroutine[Any, Any, None]:
        return kopf.operator(
            clusterwide=not namespaces,
            namespaces=list(namespaces),
            # One active operator is the Lease's job (controller/leader.py), not peering's.
            standalone=True,
            liveness_endpoint=liveness_endpoint,
            memo=memo,
        )

    if leader_election is None:
        metrics.LEADER.set(1)
        asyncio.run(run_kopf(liveness or None))
    else:
        lease_ns, _, lease_name = leader_election.rpartition("/")
        if not lease_ns or not lease_name:
            raise click.BadParameter("expected NAMESPACE/NAME", param_hint="--leader-election")
        elector = LeaderElector(reconciler.kube, lease_ns, lease_name)
        # A standby must answer its liveness probe too: the elector's process serves it.
        asyncio.run(serve_liveness(liveness, elector.run(lambda: run_kopf(None))))
    sys.exit(0)


def _configure_logging(verbose: bool) -> None:
    # kopf.configure installed the handler; only levels are set here. Every event
    # handler's "succeeded" line would flood the log: those stay at debug.
    if not verbose:
        logging.getLogger("kopf.objects").setLevel(logging.WARNING)


def _network_policy(text: str) -> NetworkPolicySettings | None:
    from etj.core.render.settings import NetworkPolicySettings

    if not text:
        return None
    try:
        return NetworkPolicySettings.parse(text)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--network-policy") from None

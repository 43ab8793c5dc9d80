"""``etj run``: a job's replicas as local processes, supervised by the operator's rules.

The job is planned and rendered exactly as the operator would (``etj.core.render``), with
TF_CONFIG peers mapped to free 127.0.0.1 ports and volumes to directories under the work
directory. Each pass turns the processes into ``PodState``s and calls the operator's pure
``etj.core.reconcile.decide``; its Decision is applied by starting and stopping processes. So
a killed worker is replaced alone under ParameterServer, all workers restart under
MultiWorkerMirrored, a crashing replica waits out its restart back-off, ``backoffLimit``
counts, and the ps are stopped when the chief is done — the same code path as in a cluster.

``scale_workers_at=(step, n)`` (``etj run --scale-workers STEP:N``) changes the job's worker
count once training passed ``step``, as ``kubectl scale`` does in a cluster; the same
decisions (``etj.core.reconcile.policies.scale``) restart what must take the new cluster:
the leader first, which checkpoints on SIGTERM, and training resumes from that checkpoint.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path

from etj.api.constants import (
    METRICS_PORT_ENV,
    VOLUME_CHECKPOINTS,
    VOLUME_TMP,
    VOLUME_TRAINER_CONFIG,
)
from etj.api.job import EmbeddingTrainingJob
from etj.api.plan import ShardPlan
from etj.api.progress import (
    EVENT_DELTA_EXPORTED,
    EVENT_EVALUATION,
    EVENT_EXPORTED,
    EVENT_PROGRESS,
    EVENT_WARM_STARTED,
)
from etj.api.roles import Role
from etj.api.status import (
    FINISHED_PHASES,
    EmbeddingTrainingJobStatus,
    Evaluation,
    ExportStatus,
    PodPhase,
    Progress,
)
from etj.api.warmstart import WarmStartStatus
from etj.core.reconcile import PodState, World, decide
from etj.core.reconcile.decision import Event, iso
from etj.core.reconcile.progress import (
    WarmStartReport,
    delta_record,
    evaluation_record,
    export_record,
    progress_record,
    warm_start_record,
)
from etj.core.render import RenderSettings, build_config_map, build_pod, replica_set
from etj.core.render.pod import model_code_config_map
from etj.core.tfconfig import pod_name
from etj.local.configmaps import write_files
from etj.local.launch import Proc, free_port, machine_share, start
from etj.local.pod_process import pod_process

POLL_SECONDS = 0.5
PROGRESS_SECONDS = 1.0
STOP_GRACE_SECONDS = 10.0


def last_event(path: Path, event: str) -> dict | None:
    """The last ``{"event": <event>, "step": ...}`` line the trainer wrote to its log."""
    try:
        with open(path, "rb") as fh:
            fh.seek(max(0, fh.seek(0, os.SEEK_END) - 65536))
            lines = fh.read().decode(errors="replace").splitlines()
    except OSError:
        return None
    for line in reversed(lines):
        if f'"{event}"' not in line:
            continue
        try:
            doc = json.loads(line[line.index("{") :])
        except ValueError:
            continue
        if doc.get("event") == event and "step" in doc:
            return doc
    return None


def progress_from_log(path: Path, now: str) -> Progress | None:
    """The last ``{"event": "progress", ...}`` line the trainer wrote to its log, read as the
    operator reads the same record (etj.api.progress)."""
    return progress_record(last_event(path, EVENT_PROGRESS), now)


def evaluation_from_log(path: Path, now: str) -> Evaluation | None:
    """The last held-out ``{"event": "evaluation", ...}`` line of the trainer's log."""
    return evaluation_record(last_event(path, EVENT_EVALUATION), now)


def export_from_log(path: Path, now: str) -> ExportStatus | None:
    """The last ``{"event": "exported", ...}`` line of the trainer's log: the newest serving
    version (spec.export), with the last ``deltaExported`` line as its ``lastDelta``."""
    export = export_record(last_event(path, EVENT_EXPORTED), now)
    delta = delta_record(last_event(path, EVENT_DELTA_EXPORTED))
    if export is None or delta is None:
        return export
    return export.model_copy(update={"last_delta": delta})


def warm_start_from_log(path: Path) -> WarmStartReport | None:
    """The leader's ``warmStarted`` line (its first), read as the operator reads the same
    report from the metrics page."""
    try:
        with open(path, errors="replace") as fh:
            for line in fh:
                if f'"{EVENT_WARM_STARTED}"' in line and line.lstrip().startswith("{"):
                    doc = json.loads(line)
                    return warm_start_record(doc.get("sourceStep"), doc.get("tables"))
    except (OSError, ValueError):
        return None
    return None


@dataclass
class RunResult:
    status: EmbeddingTrainingJobStatus
    seconds: float
    workdir: Path


@dataclass
class RunEvents:
    """Where the runner tells what happens (the CLI shows it; tests collect it)."""

    on_event: Callable[[str], None] = lambda msg: None
    on_status: Callable[[EmbeddingTrainingJobStatus], None] = lambda st: None
    events: list[str] = field(default_factory=list)

    def event(self, message: str) -> None:
        self.events.append(message)
        self.on_event(message)


def local_warm_start(job: EmbeddingTrainingJob, workdir: Path) -> WarmStartStatus | None:
    """``warmStart.fromJob`` under ``etj run``: the named job's checkpoints in its work
    directory beside this one (``./.etj-run/<job>`` by default), pinned; None for any other
    warm start (a location is used as it is). A claim or a selector cannot be resolved
    here (``ValueError`` saying what to write instead)."""
    ws = job.spec.warm_start
    if ws is None:
        return None
    if ws.selector is not None:
        raise ValueError(
            "warmStart.selector: etj run sees no other jobs; name the job (warmStart.fromJob) "
            "or its checkpoint directory (warmStart.checkpoint.uri)"
        )
    if ws.checkpoint is not None and ws.checkpoint.claim is not None:
        raise ValueError(
            "warmStart.checkpoint.claim: etj run mounts no claims; give the directory as "
            "warmStart.checkpoint.uri"
        )
    if ws.from_job is None:
        return None
    directory = workdir.parent / ws.from_job / "checkpoints" / ws.from_job
    if not (directory / "checkpoint").is_file():
        raise ValueError(
            f"warmStart.fromJob {ws.from_job}: no checkpoints at {directory} (etj run keeps "
            "a job's checkpoints in its work directory, beside this one: run "
            f"{ws.from_job} first, or give a directory as warmStart.checkpoint.uri)"
        )
    return WarmStartStatus(
        source=f"job {ws.from_job} (etj run's work directory)",
        source_job=ws.from_job,
        location=str(directory),
    )


class LocalRunner:
    def __init__(
        self,
        job: EmbeddingTrainingJob,
        plan: ShardPlan,
        workdir: Path,
        *,
        python: str = sys.executable,
        kill_worker_at: int | None = None,
        scale_workers_at: tuple[int, int] | None = None,
        reporter: RunEvents | None = None,
        fresh: bool = True,
        config_maps: dict[str, dict[str, bytes]] | None = None,
        pin_cores: bool = True,
    ):
        # The ConfigMaps the job file carries (etj.local.configmaps), by name: the job's
        # own tower code must be among them; others serve the template's volumes.
        self.config_maps = dict(config_maps or {})
        code = model_code_config_map(job)
        if code is not None and code not in self.config_maps:
            raise ValueError(
                f"spec.model.custom.configMap names ConfigMap {code}, which the job file does "
                f"not hold: add it as another document (---, apiVersion: v1, kind: ConfigMap, "
                f"metadata.name: {code}, data: the module's files)"
            )
        self.workdir = workdir.resolve()
        if fresh and self.workdir.exists():
            shutil.rmtree(self.workdir)
        for sub in ("config", "checkpoints", "tmp", "logs"):
            (self.workdir / sub).mkdir(parents=True, exist_ok=True)
        spec = job.spec.model_copy(deep=True)
        spec.checkpoint.mount_path = str(self.workdir / "checkpoints")
        if spec.checkpoint.uri is not None and not spec.checkpoint.uri.startswith("gs://"):
            # A path on a cluster's shared volume: here the work directory stands for it
            # (a fresh run starts afresh, --resume resumes), as for storage and volume.
            spec.checkpoint.uri = None
        meta = job.metadata.model_copy(update={"namespace": "local", "uid": None, "generation": 1})
        self.job = job.model_copy(update={"spec": spec, "metadata": meta, "status": None})
        self.plan = plan
        self.replicas = replica_set(self.job, plan)
        # The leader checkpoints on SIGTERM: it alone gets a graceful stop.
        self._leader_name = pod_name(self.job.name, *self.replicas.leader())
        self.ports: dict[tuple[Role, int], int] = {t: free_port() for t in self.replicas.tasks()}
        self.metrics_port = free_port()
        self.settings = RenderSettings(metrics_port=self.metrics_port)
        self.python = python
        self.pin_cores = pin_cores
        self.kill_worker_at = kill_worker_at
        self.scale_workers_at = scale_workers_at
        # The worker count each running process's TF_CONFIG names (a pod's annotation).
        self._cluster_workers: dict[str, int] = {}
        self.killed: str | None = None
        self.restarted_at_step: int | None = None
        self.rejoined = False
        self.reporter = reporter or RunEvents()
        self.procs: dict[tuple[Role, int], Proc] = {}
        # A warm start from another job of etj run is pinned before anything starts, as the
        # operator pins it before the first pod (a location is pinned by the first pass).
        self.status = EmbeddingTrainingJobStatus(warm_start=local_warm_start(job, self.workdir))
        if self.status.warm_start is not None:
            ws = self.status.warm_start
            self.reporter.event(f"WarmStart: from {ws.source}: {ws.location}")
        self._last_progress = 0.0
        self.evaluation: Evaluation | None = None
        self.export: ExportStatus | None = None
        self._write_trainer_config()
        # A command that cannot run locally fails now, not after some replicas started.
        for role, index in self.replicas.tasks():
            self._command(build_pod(self.job, plan, role, index, self.settings, self._address))

    # ---- rendering ---------------------------------------------------------------------

    def _address(self, role: Role, index: int) -> str:
        if (role, index) not in self.ports:  # a worker added by scaling
            self.ports[(role, index)] = free_port()
        return f"127.0.0.1:{self.ports[(role, index)]}"

    def _pinned(self) -> EmbeddingTrainingJob:
        """The job with its status: the warm start's pin reaches the config and the pods."""
        return self.job.model_copy(update={"status": self.status})

    def _write_trainer_config(self) -> None:
        cm = build_config_map(self._pinned(), self.plan, self.settings)
        for file_name, text in cm["data"].items():
            (self.workdir / "config" / file_name).write_text(text)

    def _volume_dirs(self, pod: dict) -> dict[str, str]:
        """Local directories for the pod's volumes: etj's under the work directory, a
        ConfigMap the job file carries (the custom tower's code) under ``configmaps/``, a
        template's emptyDir under ``volumes/``, a hostPath as itself (others: unmapped)."""
        dirs = {
            VOLUME_TRAINER_CONFIG: str(self.workdir / "config"),
            VOLUME_CHECKPOINTS: str(self.workdir / "checkpoints"),
            VOLUME_TMP: str(self.workdir / "tmp"),
        }
        for v in pod["spec"].get("volumes") or []:
            if v["name"] in dirs:
                continue
            if "configMap" in v and v["configMap"].get("name") in self.config_maps:
                name = v["configMap"]["name"]
                path = write_files(self.config_maps[name], self.workdir / "configmaps" / name)
                dirs[v["name"]] = str(path)
            elif "emptyDir" in v:
                path = self.workdir / "volumes" / v["name"]
                path.mkdir(parents=True, exist_ok=True)
                dirs[v["name"]] = str(path)
            elif "hostPath" in v:
                dirs[v["name"]] = str(v["hostPath"]["path"])
        return dirs

    def _command(self, pod: dict) -> list[str]:
        """The container's command, with ``python`` as this run's interpreter and a relative
        path to an existing file (``python train.py``) taken from where ``etj run`` runs:
        the replicas run in the work directory."""
        container = pod["spec"]["containers"][0]
        command = list(container.get("command") or [])
        if not command:
            raise ValueError(
                f"{pod['metadata']['name']}: the container has no command (its image's "
                "entrypoint runs it); etj run needs the command in the template"
            )
        if command[0] in ("python", "python3"):
            command[0] = self.python
        for i, arg in enumerate(command[1:], start=1):
            if not os.path.isabs(arg) and os.path.isfile(arg):
                command[i] = os.path.abspath(arg)
        return command

    def _start(self, role: Role, index: int) -> None:
        pod = build_pod(self._pinned(), self.plan, role, index, self.settings, self._address)
        spec = pod_process(pod, self._volume_dirs(pod), command=self._command(pod))
        env = {**os.environ, **spec.env, METRICS_PORT_ENV: str(self.metrics_port)}
        # Every replica runs on this machine's cores: each sizes its threads to its share
        # (TensorFlow's default assumes a process has every core to itself) and is bound
        # to cores of its own, or one core with as few others as can be (``placement``).
        extra, bound = machine_share((role, index), self.replicas.tasks(), env, self.pin_cores)
        env.update(extra)
        log = self.workdir / "logs" / f"{spec.name}.log"
        self.procs[(role, index)] = start(
            spec.name, spec.command, env, log, self.workdir, cores=bound
        )
        self._cluster_workers[spec.name] = self.replicas.worker

    # ---- observing ---------------------------------------------------------------------

    def _pod_states(self, now: datetime) -> list[PodState]:
        states = []
        for (role, index), proc in list(self.procs.items()):
            code = proc.exit_code
            if proc.stopping and code is not None:
                del self.procs[(role, index)]  # a stopped process is a deleted pod: gone
                continue
            phase = (
                PodPhase.RUNNING
                if code is None
                else PodPhase.SUCCEEDED
                if code == 0
                else PodPhase.FAILED
            )
            states.append(
                PodState(
                    name=proc.name,
                    role=role,
                    index=index,
                    phase=phase,
                    ready=code is None,
                    exit_code=code,
                    terminating=proc.stopping,
                    message=proc.termination_message() if code is not None else None,
                    # How long it ran decides its restart back-off (ended: seen now).
                    started_at=now - timedelta(seconds=time.monotonic() - proc.started),
                    finished_at=now if code is not None else None,
                    cluster_workers=self._cluster_workers.get(proc.name),
                )
            )
        return states

    def _progress(self, now: datetime) -> Progress | None:
        """The chief's last progress line (its log outlives it, for the summary)."""
        if time.monotonic() - self._last_progress < PROGRESS_SECONDS:
            return None
        self._last_progress = time.monotonic()
        log = self._leader_log()
        self.evaluation = evaluation_from_log(log, iso(now)) or self.evaluation
        self.export = export_from_log(log, iso(now)) or self.export
        return progress_from_log(log, iso(now))

    def _warm_start_report(self) -> WarmStartReport | None:
        """The leader's warm-start report while the pinned source's tables are unknown."""
        ws = self.status.warm_start
        if ws is None or ws.location is None or ws.tables:
            return None
        return warm_start_from_log(self._leader_log())

    def _leader_log(self) -> Path:
        return self.workdir / "logs" / f"{pod_name(self.job.name, *self.replicas.leader())}.log"

    # ---- applying ----------------------------------------------------------------------

    def _apply_event(self, event: Event) -> None:
        self.reporter.event(f"{event.reason}: {event.message}")

    def _pass(self) -> bool:
        """One supervision pass; True when the job has finished."""
        now = datetime.now(UTC)
        world = World(
            job=self.job.model_copy(update={"status": self.status}),
            plan=self.plan,
            plan_error=None,
            pods=self._pod_states(now),
            has_service=True,
            has_config_map=True,
            now=now,
            progress=self._progress(now),
            evaluation=self.evaluation,
            export=self.export,
            warm_start_report=self._warm_start_report(),
        )
        d = decide(world)
        for name in d.delete_pods:
            for proc in self.procs.values():
                if proc.name == name and not proc.stopping:
                    self._delete(proc)
        for role, index in d.create_pods:
            self._start(role, index)
            if self.killed == pod_name(self.job.name, role, index):
                self.restarted_at_step = self._step()
                self.reporter.event(f"{self.killed} restarted at step {self.restarted_at_step}")
        assert d.status is not None
        self.status = d.status
        for event in d.events:
            self._apply_event(event)
        self._maybe_kill_worker()
        self._maybe_scale()
        self._report_rejoin()
        self.reporter.on_status(self.status)
        return self.status.phase in FINISHED_PHASES

    def _delete(self, proc: Proc) -> None:
        if proc.name == self._leader_name:
            proc.stop(grace=STOP_GRACE_SECONDS)  # SIGTERM: the chief checkpoints first
        else:
            # ps and workers hold no state worth a graceful stop: a prompt kill frees the port.
            proc.stopping = True
            proc.kill()

    def _step(self) -> int:
        return self.status.progress.step if self.status.progress else 0

    def _report_rejoin(self) -> None:
        """Say when the replaced worker is back and training has gone on past its restart."""
        if self.killed is None or self.rejoined or self.restarted_at_step is None:
            return
        proc = self.procs.get((Role.WORKER, self.replicas.worker - 1))
        if proc is None or proc.exit_code is not None or time.monotonic() - proc.started < 5:
            return
        if self._step() > self.restarted_at_step:
            self.rejoined = True
            self.reporter.event(
                f"{self.killed} is running again and training went on to step {self._step()}"
            )

    def _maybe_kill_worker(self) -> None:
        at = self.kill_worker_at
        step = self._step()
        if at is None or self.killed is not None or step < at or self.replicas.worker == 0:
            return
        key = (Role.WORKER, self.replicas.worker - 1)
        proc = self.procs.get(key)
        if proc is None or proc.exit_code is not None:
            return
        proc.kill()
        self.killed = proc.name
        self.reporter.event(f"killed {proc.name} at step {step} (--kill-worker-at {at})")

    def _maybe_scale(self) -> None:
        """Change the worker count once, as ``kubectl scale`` would (the next pass acts)."""
        if self.scale_workers_at is None:
            return
        at, workers = self.scale_workers_at
        if self._step() < at:
            return
        self.scale_workers_at = None
        spec = self.job.spec.model_copy(deep=True)
        spec.replicas.worker.replicas = workers
        meta = self.job.metadata.model_copy(
            update={"generation": (self.job.metadata.generation or 1) + 1}
        )
        self.job = self.job.model_copy(update={"spec": spec, "metadata": meta})
        self.replicas = replica_set(self.job, self.plan)
        self.reporter.event(f"scaled to {workers} workers at step {self._step()} (--scale-workers)")

    def run(self) -> RunResult:
        started = time.monotonic()
        try:
            while not self._pass():
                time.sleep(POLL_SECONDS)  # the supervisor's poll interval
            # A last look at the chief's progress, for the summary.
            self._last_progress = 0.0
            final = self._progress(datetime.now(UTC))
            if final is not None:
                self.status.progress = final
            if self.evaluation is not None:
                self.status.evaluation = self.evaluation
            if self.export is not None:
                self.status.export = self.export
        finally:
            self.stop_all()
        return RunResult(self.status, time.monotonic() - started, self.workdir)

    def stop_all(self) -> None:
        for proc in self.procs.values():
            proc.stop(grace=STOP_GRACE_SECONDS if proc.name == self._leader_name else 1.0)
        self.procs.clear()

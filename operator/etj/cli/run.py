"""``etj run job.yaml``: train a job on this machine, no cluster needed."""

from __future__ import annotations

import signal
import sys
from pathlib import Path
from typing import Any

import click
from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from etj.api.roles import Role
from etj.api.spec import step_limit
from etj.api.status import EmbeddingTrainingJobStatus, Phase
from etj.cli.files import file_argument


@click.command()
@file_argument()
@click.option(
    "--workdir",
    type=click.Path(file_okay=False),
    default=None,
    help="Where checkpoints, config and logs go (default: ./.etj-run/<job>).",
)
@click.option(
    "--resume", is_flag=True, help="Keep the work directory: resume from its checkpoints."
)
@click.option(
    "--kill-worker-at",
    type=int,
    default=None,
    metavar="STEP",
    help="Kill one worker once at this step, to show recovery.",
)
@click.option(
    "--scale-workers",
    type=str,
    default=None,
    metavar="STEP:N",
    callback=lambda ctx, param, value: _step_and_count(value),
    help="Change the worker count to N once at this step (as kubectl scale etj/NAME does).",
)
@click.option(
    "--python", default=sys.executable, show_default=True, help="Interpreter for the replicas."
)
@click.option(
    "--no-pin-cores",
    is_flag=True,
    help="Leave the replicas unbound (default: each bound to cores of its own, or to one "
    "core with as few others as can be, as the kubelet's CPU manager would).",
)
def run(
    file: str,
    workdir: str | None,
    resume: bool,
    kill_worker_at: int | None,
    scale_workers: tuple[int, int] | None,
    python: str,
    no_pin_cores: bool,
) -> None:
    """Run every replica of a job as a local process, with the operator's restart rules.

    The file may also hold ConfigMaps (further documents, as kubectl apply -f takes them):
    the one spec.model.custom.configMap names supplies the custom tower's code."""
    from etj.cli.files import InputError, display_name, load_documents
    from etj.core.render.pod import replica_set, role_template
    from etj.core.render.podtemplate import template_command
    from etj.core.render.validate_names import with_derived_names
    from etj.core.validation import validate_manifest
    from etj.local.configmaps import JobFileError, split_job_file
    from etj.local.runner import LocalRunner, RunEvents

    console = Console()
    docs = load_documents(file)
    try:
        # The job, and the ConfigMaps it mounts (the custom tower's code), as kubectl takes them.
        manifest, config_maps = split_job_file(docs)
    except JobFileError as e:
        raise InputError(file, str(e)) from None
    # Every replica runs on this host and shares the work directory's checkpoints.
    result = with_derived_names(validate_manifest(manifest, shared_storage=False))
    if not result.ok or result.job is None or result.plan is None:
        for problem in result.problems:
            click.echo(f"{display_name(file)}: {problem}", err=True)
        raise SystemExit(2)
    job, plan = result.job, result.plan
    steps = step_limit(job.spec.training, job.spec.data)
    epochs = job.spec.training.epochs
    length = f"{epochs} epochs (steps counted by the trainer)" if epochs else f"{steps} steps"
    if steps is None:
        what = "its Kafka topic" if job.spec.data.kafka is not None else "its files"
        length = f"following {what} (until stopped or idle)"
    if any(template_command(role_template(job, role)) for role in (Role.CHIEF, Role.WORKER)):
        length = "its own program (the template's command)"
    tasks = replica_set(job, plan)
    # Without a chief, worker 0 is the chief (TFJob's rule; etj.api.roles.leader).
    roles = f"chief+{tasks.worker} workers" if tasks.chief else f"{tasks.worker} workers"
    console.print(
        f"[bold]{job.name}[/]: {plan.strategy}, {roles}"
        f"+{plan.ps_replicas} ps, {len(plan.tables)} tables in "
        f"{sum(t.shards for t in plan.tables)} shards, {length}"
    )
    with Progress(
        TextColumn("[bold]{task.fields[phase]:<10}"),
        BarColumn(),
        TextColumn("step {task.completed:>7.0f}/{task.total:.0f}"),
        TextColumn("{task.fields[rate]}"),
        TextColumn("loss {task.fields[loss]}"),
        TextColumn("restarts {task.fields[restarts]}"),
        TimeElapsedColumn(),
        console=console,
        transient=False,
    ) as bar:
        task = bar.add_task(
            "train", total=steps, phase=Phase.PENDING, rate="", loss="-", restarts=0
        )

        def on_status(st: EmbeddingTrainingJobStatus) -> None:
            p = st.progress
            bar.update(
                task,
                completed=p.step if p else 0,
                phase=str(st.phase),
                rate=f"{p.examples_per_second:,.0f} ex/s" if p and p.examples_per_second else "",
                loss=f"{p.loss:.4f}" if p and p.loss is not None else "-",
                restarts=st.restarts,
            )

        reporter = RunEvents(on_event=lambda m: bar.console.print(f"  {m}"), on_status=on_status)
        try:
            runner = LocalRunner(
                job,
                plan,
                Path(workdir or Path(".etj-run") / job.name),
                python=python,
                kill_worker_at=kill_worker_at,
                scale_workers_at=scale_workers,
                reporter=reporter,
                fresh=not resume,
                config_maps=config_maps,
                pin_cores=not no_pin_cores,
            )
        except ValueError as e:
            click.echo(f"{display_name(file)}: {e}", err=True)
            raise SystemExit(2) from None
        # SIGTERM (e.g. from a CI timeout) stops the replicas like Ctrl-C does.
        signal.signal(signal.SIGTERM, _raise_interrupt)
        try:
            outcome = runner.run()
        except KeyboardInterrupt:
            runner.stop_all()
            console.print("[yellow]interrupted: every replica stopped[/]")
            raise SystemExit(130) from None
    _summary(console, outcome.status, outcome.seconds, outcome.workdir)
    raise SystemExit(0 if outcome.status.phase == Phase.SUCCEEDED else 1)


def _step_and_count(text: str | None) -> tuple[int, int] | None:
    """``--scale-workers STEP:N`` as (STEP, N)."""
    if text is None:
        return None
    step, _, count = text.partition(":")
    if not (step.isdigit() and count.isdigit() and int(count) >= 1):
        raise click.BadParameter(
            f"{text!r}: give STEP:N, e.g. 500:4 (N workers from step 500, N >= 1)",
            param_hint="--scale-workers",
        )
    return int(step), int(count)


def _raise_interrupt(*_: Any) -> None:
    raise KeyboardInterrupt


def _evaluation_rows(st: EmbeddingTrainingJobStatus) -> list[tuple[str, str]]:
    """Held-out results (data.validation), skipped bad records, each dynamic table's rows
    and each disk table's cache and files, when there are any."""
    rows = []
    ev = st.evaluation
    if ev is not None:
        auc = f"{ev.auc:.4f}" if ev.auc is not None else "-"
        loss = f"{ev.logloss:.4f}" if ev.logloss is not None else "-"
        rows.append(
            ("held-out AUC", f"{auc} (log-loss {loss}, {ev.examples} examples, step {ev.step})")
        )
    if st.progress is not None and st.progress.bad_records:
        rows.append(("bad records skipped", str(st.progress.bad_records)))
    for t in (st.progress.dynamic_tables if st.progress else None) or []:
        rows.append(
            (
                f"dynamic table {t.name}",
                f"{t.rows_used}/{t.capacity} rows used, {t.admitted:,} admitted, "
                f"{t.evicted:,} evicted, {t.fallback_lookups:,} fallback lookups",
            )
        )
    for d in (st.progress.disk_tables if st.progress else None) or []:
        rows.append(
            (
                f"disk table {d.name}",
                f"cache hit rate {d.cache_hit_rate:.3f}, {d.cached_rows:,}/{d.cache_rows:,} rows "
                f"cached, {d.rows:,} rows ({d.disk_bytes / 2**20:,.1f} MiB) on disk, "
                f"{d.rows_read_per_second:,.0f} rows/s read, "
                f"{d.rows_written_per_second:,.0f} written",
            )
        )
    return rows


def _warm_start_rows(st: EmbeddingTrainingJobStatus) -> list[tuple[str, str]]:
    """The warm start's source and, per table, what it did (status.warmStart)."""
    ws = st.warm_start
    if ws is None:
        return []
    at = f" at step {ws.step}" if ws.step is not None else ""
    rows = [("warm start", f"{ws.source}{at}")]
    for t in ws.tables:
        rows.append((f"  table {t.name}", f"{t.action}" + (f" ({t.reason})" if t.reason else "")))
    return rows


def _export_rows(st: EmbeddingTrainingJobStatus) -> list[tuple[str, str]]:
    """The newest serving version (status.export), when spec.export wrote one."""
    ex = st.export
    if ex is None:
        return []
    return [("serving version", f"{ex.last_version} (step {ex.step}) in {ex.location or '-'}")]


def _summary(
    console: Console, st: EmbeddingTrainingJobStatus, seconds: float, workdir: Path
) -> None:
    table = Table(title="Summary", show_header=False)
    p = st.progress
    rows = [
        ("phase", str(st.phase)),
        ("message", st.message or ""),
        ("final step", str(p.step) if p else "-"),
        ("loss", f"{p.loss:.4f}" if p and p.loss is not None else "-"),
        ("AUC", f"{p.auc:.4f}" if p and p.auc is not None else "-"),
        *_evaluation_rows(st),
        ("examples/s", f"{p.examples_per_second:,.0f}" if p and p.examples_per_second else "-"),
        (
            "last checkpoint step",
            str(p.last_checkpoint_step) if p and p.last_checkpoint_step is not None else "-",
        ),
        *_warm_start_rows(st),
        *_export_rows(st),
        ("restarts", str(st.restarts)),
        ("wall time", f"{seconds:.0f} s"),
        ("work directory", str(workdir)),
    ]
    for k, v in rows:
        table.add_row(k, v)
    console.print(table)

"""The ``etj`` command line: validate, plan, render, crd, convert, run, operator, cluster.

Each subcommand imports what it needs when it runs, so that ``etj validate`` works
without kopf, the Kubernetes client or TensorFlow installed. Commands read files and
print; the logic they call lives in the pure core.
"""

from __future__ import annotations

import importlib
from typing import Any

import click

from etj.cli.files import file_argument


class LazyGroup(click.Group):
    """A click group whose subcommands live in other modules, imported on use."""

    def __init__(self, *args: object, lazy: dict[str, str] | None = None, **kwargs: object):
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        self._own = lazy or {}

    @property
    def _lazy(self) -> dict[str, str]:
        # Subcommands other distributions register (the test cluster's `etj cluster`),
        # read when asked for: the product never imports them.
        from importlib.metadata import entry_points

        extra = {ep.name: ep.value for ep in entry_points(group="etj.commands")}
        return {**extra, **self._own}

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted([*super().list_commands(ctx), *self._lazy])

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name in self._lazy:
            module_name, attr = self._lazy[cmd_name].split(":")
            command = getattr(importlib.import_module(module_name), attr)
            assert isinstance(command, click.Command)
            return command
        return super().get_command(ctx, cmd_name)


@click.group(
    cls=LazyGroup,
    lazy={
        "init": "etj.cli.init:init",
        "operator": "etj.cli.operator:operator",
        "run": "etj.cli.run:run",
    },
)
@click.version_option(package_name="etj")
def main() -> None:
    """etj: TensorFlow training jobs with very large embedding tables, on Kubernetes."""


def _validated(path: str, admission: Any = None) -> list:  # list[etj.core.validation.Validated]
    from etj.cli.files import InputError, load_documents
    from etj.core.render.validate_names import with_derived_names
    from etj.core.validation import validate_manifest
    from etj.local.configmaps import is_config_map

    docs = load_documents(path)
    if not docs:
        raise InputError(path, "no documents (an empty file?)")
    # ConfigMaps beside a job (a custom tower's code) are the user's, not etj's to check.
    return [
        with_derived_names(validate_manifest(d, admission=admission))
        for d in docs
        if not is_config_map(d)
    ]


def _pairs(items: tuple[str, ...], flag: str) -> dict[str, str]:
    bad = [i for i in items if "=" not in i]
    if bad:
        raise click.BadParameter(f"{bad[0]!r}: KEY=VALUE expected", param_hint=flag)
    return dict(i.split("=", 1) for i in items)


def _fail_on_problems(path: str, results: list) -> None:
    from etj.cli.files import display_name

    bad = [(i, r) for i, r in enumerate(results) if not r.ok]
    if not bad:
        return
    for i, r in bad:
        prefix = display_name(path) + (f"[{i}]" if len(results) > 1 else "")
        for problem in r.problems:
            click.echo(f"{prefix}: {problem}", err=True)
    raise SystemExit(2)


@main.command()
@file_argument()
@click.option(
    "--allow-privileged",
    is_flag=True,
    help=(
        "The job's namespace is labelled training.etj.dev/allow-privileged=true: host "
        "access and privilege in its templates and volumes are allowed there (the chart's "
        "admission policy refuses them elsewhere)."
    ),
)
@click.option(
    "--namespace-label",
    "labels",
    multiple=True,
    metavar="KEY=VALUE",
    help="A label of the job's namespace, as the admission policies read it (repeatable).",
)
@click.option(
    "--namespace-annotation",
    "annotations",
    multiple=True,
    metavar="KEY=VALUE",
    help="An annotation of the job's namespace, as the admission policies read it (repeatable).",
)
def validate(
    file: str, allow_privileged: bool, labels: tuple[str, ...], annotations: tuple[str, ...]
) -> None:
    """Check a job file: exit 0, or exit 2 with one line per problem naming the field.

    Besides the schema and the plan, it applies the chart's admission policies as in a
    namespace with the given labels and annotations (none by default): no host access or
    privilege (privileged, host namespaces, hostPath, added capabilities, root, mounts over
    system directories, ...) unless --allow-privileged, and no service account other than
    the namespace's default, node name, system- priority or toleration of every taint unless
    the namespace allows it."""
    from etj.api.admission import ALLOW_PRIVILEGED_LABEL, Namespace

    namespace = Namespace(
        labels={
            **_pairs(labels, "--namespace-label"),
            **({ALLOW_PRIVILEGED_LABEL: "true"} if allow_privileged else {}),
        },
        annotations=_pairs(annotations, "--namespace-annotation"),
    )
    results = _validated(file, admission=namespace)
    _fail_on_problems(file, results)
    for r in results:
        click.echo(f"{r.job.name}: valid ({r.plan.strategy}, {r.plan.ps_replicas} ps)")


@main.command()
@file_argument()
@click.option("--namespace", "-n", default=None, help="Namespace to render into.")
@click.option("--image", default=None, help="Default trainer image (the operator's setting).")
@click.option(
    "--network-policy",
    default="",
    metavar="NAMESPACE/KEY=VALUE,...",
    help="Also the job's NetworkPolicy, as `etj operator --network-policy` makes it.",
)
def render(file: str, namespace: str | None, image: str | None, network_policy: str) -> None:
    """Print every object the operator would create for a job (like `helm template`)."""
    import dataclasses

    from etj.core.crd import to_yaml
    from etj.core.render import RenderSettings, build_objects
    from etj.core.render.settings import NetworkPolicySettings

    results = _validated(file)
    _fail_on_problems(file, results)
    settings = RenderSettings(default_image=image) if image else RenderSettings()
    if network_policy:
        try:
            policy = NetworkPolicySettings.parse(network_policy)
        except ValueError as exc:
            raise click.BadParameter(str(exc), param_hint="--network-policy") from None
        settings = dataclasses.replace(settings, network_policy=policy)
    docs = []
    for r in results:
        job = r.job
        if namespace:
            job = job.model_copy(
                update={"metadata": job.metadata.model_copy(update={"namespace": namespace})}
            )
        docs += build_objects(job, r.plan, settings)
    click.echo("---\n".join(to_yaml(d) for d in docs), nl=False)


@main.command()
@file_argument()
@click.option("--json", "as_json", is_flag=True, help="Print the plan as JSON.")
def plan(file: str, as_json: bool) -> None:
    """Show the shard plan: tables, shards, and what each ps holds."""
    import json

    from etj.cli.planview import print_plan

    results = _validated(file)
    _fail_on_problems(file, results)
    for r in results:
        if as_json:
            click.echo(json.dumps(r.plan.to_wire(), indent=2))
        else:
            print_plan(r.job, r.plan)


@main.command()
def crd() -> None:
    """Print the CustomResourceDefinition generated from the API models."""
    from etj.core.crd import crd_yaml

    click.echo(crd_yaml(), nl=False)


@main.command()
@file_argument()
@click.option(
    "--model",
    "model_file",
    type=click.Path(dir_okay=False, exists=True),
    default=None,
    help="A YAML file with the job's spec.model (its embedding tables, for the shard plan); "
    "default: a one-row placeholder table.",
)
@click.option(
    "--name",
    default=None,
    help="The job's name (default: the TFJob's metadata.name, or its generateName kept).",
)
def convert(file: str, model_file: str | None, name: str | None) -> None:
    """Turn a Kubeflow TFJob (kubeflow.org/v1) into an EmbeddingTrainingJob running the same
    containers; print it, with a warning line (stderr) for each TFJob field not carried.
    Exit 2 naming the TFJob field that etj cannot express."""
    from etj.cli.convert import ConversionError, convert_tfjob
    from etj.cli.files import InputError, display_name, load_documents
    from etj.core.crd import to_yaml
    from etj.core.validation import validate_manifest

    model = None
    if model_file is not None:
        model_docs = load_documents(model_file)
        if len(model_docs) != 1 or not isinstance(model_docs[0], dict):
            raise InputError(model_file, "expected one mapping (a spec.model)")
        model = model_docs[0]
    docs = load_documents(file)
    if not docs:
        raise InputError(file, "no documents (an empty file?)")
    out = []
    for i, doc in enumerate(docs):
        prefix = display_name(file) + (f"[{i}]" if len(docs) > 1 else "")
        warnings: list[str] = []
        try:
            job = convert_tfjob(doc, model, name=name, warnings=warnings)
        except ConversionError as e:
            click.echo(f"{prefix}: {e}", err=True)
            raise SystemExit(2) from None
        for warning in warnings:
            click.echo(f"{prefix}: warning: {warning}", err=True)
        result = validate_manifest(job)
        if not result.ok:
            for problem in result.problems:
                click.echo(f"{prefix}: the converted job: {problem}", err=True)
            raise SystemExit(2)
        meta = job["metadata"]
        called = meta.get("name") or f"{meta['generateName']}(generated)"
        note = f"# Converted by `etj convert` from TFJob {called}.\n"
        note += "".join(f"# not carried: {w}\n" for w in warnings)
        if model is None:
            note += "# spec.model is a one-row placeholder table: `--model FILE` gives yours.\n"
        out.append(note + to_yaml(job))
    click.echo("---\n".join(out), nl=False)

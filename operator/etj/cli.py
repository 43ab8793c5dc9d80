"""The ``etj`` command line: validate, plan, render, crd, run, operator, cluster.

Each subcommand imports what it needs when it runs, so that ``etj validate`` works
without kopf, the Kubernetes client or TensorFlow installed. Commands read files and
print; the logic they call lives in the pure core.
"""

from __future__ import annotations

import importlib

import click


class LazyGroup(click.Group):
    """A click group whose subcommands live in other modules, imported on use."""

    def __init__(self, *args: object, lazy: dict[str, str] | None = None, **kwargs: object):
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        self._lazy = lazy or {}

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
        "cluster": "etj.localcluster.cli:cluster",
    },
)
@click.version_option(package_name="etj")
def main() -> None:
    """etj: TensorFlow training jobs with very large embedding tables, on Kubernetes."""

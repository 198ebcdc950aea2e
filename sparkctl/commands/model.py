"""sparkctl model: the model on every node."""

from __future__ import annotations

from pathlib import Path

import click

from sparkctl.commands.common import INVENTORY_ARG, checked, exit_for, extra_vars


@click.group("model")
def model_group() -> None:
    """The model on every node: fetched once, fanned out over the fabric, verified."""


@model_group.command("sync")
@INVENTORY_ARG
@click.option(
    "--full-verify",
    is_flag=True,
    help="Hash every file on every node, not only files changed since last verified.",
)
@click.option(
    "-e",
    "--extra-vars",
    "extra",
    multiple=True,
    help="Override an inventory variable, e.g. -e model_cache_source=head (repeatable).",
)
@click.option("-l", "--limit", help="Only these hosts or groups (Ansible pattern).")
@click.option("--json", "as_json", is_flag=True, help="Print the run's result as JSON on stdout.")
def model_sync(
    inventory_path: Path,
    full_verify: bool,
    extra: tuple[str, ...],
    limit: str | None,
    as_json: bool,
) -> None:
    """Put the model INVENTORY names on every node (playbooks/model_cache.yml)."""
    from sparkctl import present  # noqa: PLC0415
    from sparkctl.model_sync import sync  # noqa: PLC0415

    extravars = extra_vars(extra)
    inv = checked(inventory_path, extravars)
    result = sync(inv, full_verify=full_verify, extravars=extravars, limit=limit)
    present.provision(result, as_json=as_json)
    exit_for(result)


@model_group.command("list")
@INVENTORY_ARG
@click.option("--json", "as_json", is_flag=True, help="Print the revisions as JSON.")
def model_list(inventory_path: Path, as_json: bool) -> None:
    """The model revisions in every node's cache: size, serving, previous, verified."""
    from sparkctl import present  # noqa: PLC0415
    from sparkctl.model_store import list_revisions  # noqa: PLC0415

    present.model_revisions(list_revisions(checked(inventory_path)), as_json=as_json)


@model_group.command("prune")
@INVENTORY_ARG
@click.option("--dry-run", is_flag=True, help="Say what would be removed, remove nothing.")
@click.option(
    "-e",
    "--extra-vars",
    "extra",
    multiple=True,
    help="Override an inventory variable (the revision the inventory names is kept).",
)
@click.option("--json", "as_json", is_flag=True, help="Print what was removed and kept as JSON.")
def model_prune(inventory_path: Path, dry_run: bool, extra: tuple[str, ...], as_json: bool) -> None:
    """Remove the revisions that no longer serve, on nodes whose serving revision has
    passed a serve verify (or a serve upgrade's gate) since it was swapped in. The
    revision the inventory names stays (staged for an upgrade)."""
    from sparkctl import present  # noqa: PLC0415
    from sparkctl.model_store import prune  # noqa: PLC0415

    extravars = extra_vars(extra)
    result = prune(checked(inventory_path, extravars), dry_run=dry_run, extravars=extravars)
    present.model_revisions(result, as_json=as_json)
    exit_for(result)

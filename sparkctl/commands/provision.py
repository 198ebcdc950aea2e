"""sparkctl provision, render and up (the whole job)."""

from __future__ import annotations

from pathlib import Path

import click

from sparkctl.commands.common import (
    ACCEPT_DIGEST,
    INVENTORY_ARG,
    checked,
    exit_for,
    with_accept,
)


@click.command()
@INVENTORY_ARG
@click.option("-l", "--limit", help="Only these hosts or groups (Ansible pattern).")
@click.option(
    "-t", "--tags", multiple=True, help="Only these roles/steps, e.g. -t roce_fabric (repeatable)."
)
@click.option("--skip-tags", multiple=True, help="Skip these tags (repeatable).")
@click.option("--check", is_flag=True, help="Dry run: report what would change.")
@click.option("--diff", is_flag=True, help="Show file differences.")
@click.option(
    "-e",
    "--extra-vars",
    "extra",
    multiple=True,
    help="VAR=VALUE or a YAML mapping, e.g. the model source (repeatable).",
)
@ACCEPT_DIGEST
@click.option(
    "--json",
    "as_json",
    is_flag=True,
    help="Print the result (per-host counts, failures, artifacts) as JSON on stdout.",
)
def provision(
    inventory_path: Path,
    limit: str | None,
    tags: tuple[str, ...],
    skip_tags: tuple[str, ...],
    check: bool,
    diff: bool,
    extra: tuple[str, ...],
    accept_digest: str | None,
    as_json: bool,
) -> None:
    """Configure every node and the switch as INVENTORY describes (playbooks/site.yml)."""
    from sparkctl import present  # noqa: PLC0415
    from sparkctl.playbook import run  # noqa: PLC0415

    extravars = with_accept(extra, accept_digest)
    inv = checked(inventory_path, extravars)
    result = run(
        inv,
        limit=limit,
        tags=tags,
        skip_tags=skip_tags,
        check=check,
        diff=diff,
        extravars=extravars,
    )
    present.provision(result, as_json=as_json)
    exit_for(result)


@click.command()
@INVENTORY_ARG
@click.option(
    "-o",
    "--out",
    type=click.Path(path_type=Path, file_okay=False),
    required=True,
    help="Directory to write the files into (one subdirectory per host).",
)
def render(inventory_path: Path, out: Path) -> None:
    """Write every file provisioning would install, per host, without contacting any host."""
    from sparkctl.render import render as run  # noqa: PLC0415

    for path in run(checked(inventory_path), out):
        click.echo(str(path.relative_to(out.resolve())))


@click.command("up")
@INVENTORY_ARG
@click.option(
    "-e",
    "--extra-vars",
    "extra",
    multiple=True,
    help="VAR=VALUE or a YAML mapping, for provision and validate alike (repeatable).",
)
@ACCEPT_DIGEST
def up_command(inventory_path: Path, extra: tuple[str, ...], accept_digest: str | None) -> None:
    """The whole job: provision, validate (stop if it fails), serve up, serve verify."""
    from sparkctl import present  # noqa: PLC0415
    from sparkctl.whole_job import whole_job  # noqa: PLC0415

    extravars = with_accept(extra, accept_digest)
    whole_job(checked(inventory_path, extravars), extravars, show=present.show)

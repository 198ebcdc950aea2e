"""sparkctl inventory: check inventories without contacting any host."""

from __future__ import annotations

from pathlib import Path

import click

from sparkctl.commands.common import INVENTORY_ARG, checked, extra_vars


@click.group("inventory")
def inventory_group() -> None:
    """Inspect and check inventories without contacting any host."""


@inventory_group.command("check")
@INVENTORY_ARG
@click.option(
    "-e",
    "--extra-vars",
    "extra",
    multiple=True,
    help="VAR=VALUE or a YAML mapping, judged with the inventory as a run's -e would be.",
)
@click.option(
    "--json",
    "as_json",
    is_flag=True,
    help="Print the cluster, its hosts and the accepted risks as JSON on stdout.",
)
def inventory_check(inventory_path: Path, extra: tuple[str, ...], as_json: bool) -> None:
    """Apply every inventory rule; exit 2 naming file, host and variable on a problem.

    Every risk the inventory accepts (preflight_accepted_risks) is printed, also
    when it passes."""
    from sparkctl import present  # noqa: PLC0415
    from sparkctl.rules import accepted_risks  # noqa: PLC0415

    inv = checked(inventory_path, extra_vars(extra))
    present.inventory_checked(inv, accepted_risks(inv.hostvars), as_json=as_json)

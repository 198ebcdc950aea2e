"""sparkctl trust: SSH host keys recorded on first contact."""

from __future__ import annotations

from pathlib import Path

import click

from sparkctl.commands.common import INVENTORY_ARG, checked, exit_for


@click.command("trust")
@INVENTORY_ARG
@click.option(
    "--accept",
    "accept",
    multiple=True,
    metavar="HOST",
    help="Replace HOST's recorded key by the one it offers now (repeatable).",
)
@click.option("--json", "as_json", is_flag=True, help="Print each host's outcome as JSON.")
def trust_command(inventory_path: Path, accept: tuple[str, ...], as_json: bool) -> None:
    """Record each host's SSH host key on first contact; stop when one has changed.

    Prints every host's key fingerprint and outcome (recorded, unchanged,
    changed, replaced, unreachable). Exit 7 when a key changed (nothing is
    recorded for that host; --accept HOST replaces it), 3 when a host does not
    answer, 2 for a bad inventory.
    """
    from sparkctl import present  # noqa: PLC0415
    from sparkctl.trust import trust  # noqa: PLC0415

    result = trust(checked(inventory_path), accept)
    present.trust(result, as_json=as_json)
    exit_for(result)

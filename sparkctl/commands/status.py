"""sparkctl status: one truthful look at the cluster (also `sparkctl serve status`)."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import click

from sparkctl.commands.common import INVENTORY_ARG, checked, exit_for


def show_status(inventory_path: Path, as_json: bool, watch: float | None) -> None:
    from sparkctl import present  # noqa: PLC0415
    from sparkctl import status as status_mod  # noqa: PLC0415

    inv = checked(inventory_path)
    if watch is None:
        st = status_mod.look(inv)
        present.status(st, as_json=as_json)
        exit_for(st)
        return
    while True:  # until Ctrl-C (exit 130)
        st = status_mod.look(inv)
        present.status(st, as_json=as_json, clear=not as_json)
        time.sleep(max(0.0, watch - st.took_s))


_STATUS_OPTIONS = [
    click.option("--json", "as_json", is_flag=True, help="Print the look as JSON."),
    click.option(
        "--watch",
        "watch",
        type=click.FloatRange(min=2.0),
        default=None,
        is_flag=False,
        flag_value=5.0,
        metavar="[SECONDS]",
        help="Look again every SECONDS (5 when given alone) until Ctrl-C.",
    ),
]


def status_options(f: Any) -> Any:
    for option in reversed(_STATUS_OPTIONS):
        f = option(f)
    return f


@click.command("status")
@INVENTORY_ARG
@status_options
def status_command(inventory_path: Path, as_json: bool, watch: float | None) -> None:
    """One truthful look at the whole cluster: nodes, twins, ranks, endpoint, drift.

    Each node (reachable, GPU, MemAvailable), each fabric twin (up, MTU, speed,
    errors since the last look), each rank's unit, each group's endpoint (a
    bounded one-token generation, requests running and queued, whether
    generation progresses), the last validate and drift since last-good.
    Exit 0 healthy, 1 degraded (a hang included), 3 a node unreachable.
    """
    show_status(inventory_path, as_json, watch)

"""sparkctl serve: the TP SGLang service."""

from __future__ import annotations

from pathlib import Path

import click

from sparkctl.commands.common import INVENTORY_ARG, checked, exit_for, extra_vars
from sparkctl.commands.status import show_status, status_options


@click.group("serve")
def serve_group() -> None:
    """The TP SGLang service: start it, prove it answers, stop it."""


@serve_group.command("up")
@INVENTORY_ARG
@click.option(
    "--timeout",
    type=click.FloatRange(min=1),
    default=None,
    help="Seconds to wait for every rank (default: sglang_serve_timeout).",
)
@click.option(
    "--restart",
    is_flag=True,
    help="Start every rank again even when the service is already healthy.",
)
@click.option(
    "-e",
    "--extra-vars",
    "extra",
    multiple=True,
    help="The -e given to provision, e.g. -e sglang_port=30001 (repeatable; the API key "
    "belongs in Ansible Vault or SPARKCTL_SGLANG_API_KEY, not on a command line).",
)
def serve_up(
    inventory_path: Path, timeout: float | None, restart: bool, extra: tuple[str, ...]
) -> None:
    """Start every rank (workers, then the head), follow their logs until /health answers.

    A rank that fails or does not come up is named, with its last lines, the
    known failure it matches and the fix; every rank is then stopped again.
    """
    from sparkctl import present  # noqa: PLC0415
    from sparkctl.serve import up  # noqa: PLC0415

    extravars = extra_vars(extra)
    inv = checked(inventory_path, extravars)
    result = up.up(inv, timeout=timeout, restart=restart, extravars=extravars)
    present.serve_up(result)
    exit_for(result)


@serve_group.command("verify")
@INVENTORY_ARG
@click.option("--json", "as_json", is_flag=True, help="Print report.json on stdout.")
@click.option(
    "-e",
    "--extra-vars",
    "extra",
    multiple=True,
    help="The -e given to provision, e.g. -e sglang_port=30001 (repeatable; the API key "
    "belongs in Ansible Vault or SPARKCTL_SGLANG_API_KEY, not on a command line).",
)
def serve_verify(inventory_path: Path, as_json: bool, extra: tuple[str, ...]) -> None:
    """Health, server info (TP size, nodes), models, chat, streaming, the API key, latency."""
    from sparkctl import present  # noqa: PLC0415
    from sparkctl.serve import service  # noqa: PLC0415

    extravars = extra_vars(extra)
    inv = checked(inventory_path, extravars)
    result = service.verify_command(inv, extravars=extravars)
    present.verified(result, as_json=as_json)
    exit_for(result)


@serve_group.command("down")
@INVENTORY_ARG
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON.")
def serve_down(inventory_path: Path, as_json: bool) -> None:
    """Stop every rank (the head first), and prove the stop.

    Whatever of the service is left (its container, a process of SGLang's) is
    named and stopped; every node's memory must then be back within a tolerance
    of what serve up read before it started (exit 1 naming the node otherwise).
    """
    from sparkctl import present  # noqa: PLC0415
    from sparkctl.serve import up  # noqa: PLC0415

    result = up.down(checked(inventory_path))
    present.serve_down(result, as_json=as_json)
    exit_for(result)


@serve_group.command("upgrade")
@INVENTORY_ARG
@click.option(
    "-e",
    "--extra-vars",
    "extra",
    multiple=True,
    help="The new version, e.g. -e sglang_image_digest=sha256:... or "
    "-e model_cache_hf_revision=... (repeatable; the inventory itself is the usual place).",
)
@click.option(
    "--group",
    "groups",
    multiple=True,
    help="Upgrade only this TP group (sglang_group; repeatable). Default: every group.",
)
@click.option(
    "--stage-only",
    is_flag=True,
    help="Pull the image and copy the model revision on every node, and stop there.",
)
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON.")
def serve_upgrade(
    inventory_path: Path,
    extra: tuple[str, ...],
    groups: tuple[str, ...],
    stage_only: bool,
    as_json: bool,
) -> None:
    """Move the serving cluster to the image and model revision INVENTORY names.

    Stages them beside what serves, then swaps one TP group at a time (out of the
    gateway, drained, stopped, started through serve up's path), gates it (serve
    verify, sglang_golden_prompts, figures against the previous version, a bounded
    load) and puts it back; a group that fails is rolled back alone to what it ran,
    and the command exits 1 saying what failed (docs/upgrade.md).
    """
    from sparkctl import present  # noqa: PLC0415
    from sparkctl.serve import upgrade  # noqa: PLC0415

    extravars = extra_vars(extra)
    result = upgrade.upgrade(
        checked(inventory_path, extravars),
        extravars=extravars,
        stage_only=stage_only,
        groups=groups,
    )
    present.serve_upgrade(result, as_json=as_json)
    exit_for(result)


@serve_group.command("status")
@INVENTORY_ARG
@status_options
def serve_status(inventory_path: Path, as_json: bool, watch: float | None) -> None:
    """The same as `sparkctl status` (kept for scripts that call it here)."""
    show_status(inventory_path, as_json, watch)


@serve_group.command("watch")
@INVENTORY_ARG
@click.option(
    "--once", is_flag=True, help="One round: exit 0 healthy, 1 acted or wrong, 3 unreachable."
)
@click.option(
    "--interval",
    type=click.FloatRange(min=1),
    default=15.0,
    show_default=True,
    help="Seconds between rounds (the generation probe goes at most every 30 s).",
)
@click.option(
    "--max-restarts",
    type=click.IntRange(min=1, max=100),
    default=3,
    show_default=True,
    help="Restarts of a group within --restart-window before the watchdog gives up.",
)
@click.option(
    "--restart-window",
    type=click.FloatRange(min=60, max=7 * 86400),
    default=3600.0,
    show_default=True,
    help="Seconds over which --max-restarts counts.",
)
@click.option(
    "--backoff",
    type=click.FloatRange(min=0, max=600),
    default=30.0,
    show_default=True,
    help="Seconds before a second restart, doubled for each further one in the window.",
)
@click.option("--json", "as_json", is_flag=True, help="Print each event as one JSON line.")
@click.option(
    "-e",
    "--extra-vars",
    "extra",
    multiple=True,
    help="The -e given to provision (repeatable; the API key belongs in Ansible Vault or "
    "SPARKCTL_SGLANG_API_KEY, not on a command line).",
)
def serve_watch(
    inventory_path: Path,
    once: bool,
    interval: float,
    max_restarts: int,
    restart_window: float,
    backoff: float,
    as_json: bool,
    extra: tuple[str, ...],
) -> None:
    """Restart a hung or dead TP group, all of its ranks together; give up after repeats.

    Each round reads every rank's unit, the head's /metrics and (at most every
    30 s) a one-token generation; events go to the state dir's watch-events.jsonl.
    """
    from functools import partial  # noqa: PLC0415

    from sparkctl import present  # noqa: PLC0415
    from sparkctl.serve import watch  # noqa: PLC0415

    extravars = extra_vars(extra)
    inv = checked(inventory_path, extravars)
    result = watch.watch(
        inv,
        once=once,
        interval_s=interval,
        max_restarts=max_restarts,
        window_s=restart_window,
        backoff_s=backoff,
        extravars=extravars,
        show=partial(present.watch_event, as_json=as_json),
    )
    exit_for(result)


@serve_group.command("logs")
@INVENTORY_ARG
@click.argument("node", required=False)
@click.option("-n", "--lines", type=click.IntRange(min=1), default=100, show_default=True)
@click.option("-f", "--follow", is_flag=True, help="Follow (one node only).")
def serve_logs(inventory_path: Path, node: str | None, lines: int, follow: bool) -> None:
    """The journal of the SGLang unit on NODE (default: every node, rank order)."""
    from sparkctl import present  # noqa: PLC0415
    from sparkctl.serve import up  # noqa: PLC0415

    present.journal(up.journal(checked(inventory_path), node, lines, follow))

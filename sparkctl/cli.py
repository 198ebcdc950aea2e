"""The ``sparkctl`` command line: thin click commands over the typed core.

The root group and the error handling live here; each command group is a module of
:mod:`sparkctl.commands`, sharing its option helpers (:mod:`sparkctl.commands.common`).
Other distributions add command groups through the ``sparkctl.commands`` entry-point
group: the rehearsal lab (``sparkctl-lab``, in ``lab/`` of the checkout) plugs
``sparkctl lab`` in that way, and without it ``sparkctl lab`` says how to get it.

Each command checks its inventory once, calls the core, hands the typed result
to :mod:`sparkctl.present`, then exits with the error the result names (its
``failure()``, or validate's verdict).

Every failure is a :class:`~sparkctl.errors.SparkctlError`, caught once in
:func:`main`, printed in plain words and turned into its exit code.
"""

from __future__ import annotations

import logging
import os
import sys
from typing import Any

import click
from rich.markup import escape

from sparkctl import __version__, console
from sparkctl.commands import (
    bench,
    inventory,
    model,
    provision,
    report,
    serve,
    status,
    trust,
    validate,
)
from sparkctl.commands.common import App
from sparkctl.errors import ExitCode, SparkctlError

# Entry-point group of the command groups other distributions add.
PLUGIN_GROUP = "sparkctl.commands"
LAB_HINT = (
    "install it beside sparkctl: from a checkout, .venv/bin/pip install -e ./lab "
    "(scripts/bootstrap.sh installs both; docs/lab.md)"
)


@click.command(
    "lab",
    context_settings={"ignore_unknown_options": True, "allow_extra_args": True},
    add_help_option=False,
)
def lab_missing() -> None:
    """The rehearsal lab in local containers (needs the sparkctl-lab package)."""
    raise SparkctlError(
        "sparkctl lab needs the sparkctl-lab package, which is not installed",
        ExitCode.ENVIRONMENT,
        hint=LAB_HINT,
    )


def _entry_points() -> Any:
    """The ``sparkctl.commands`` entry points of the installed distributions (imported
    here: importlib.metadata and the scan cost every command's start-up otherwise)."""
    from importlib.metadata import entry_points  # noqa: PLC0415

    return entry_points(group=PLUGIN_GROUP)


class _Commands(click.Group):
    """The built-in command groups, and those of other distributions, each found only
    when it is named or the commands are listed (``--help``): a built-in command starts
    without scanning the installed distributions or importing the lab. A plugin never
    shadows a built-in command; ``lab`` says how to get it when nothing provides it."""

    def _plugins(self) -> dict[str, Any]:
        return {p.name: p for p in _entry_points() if p.name not in self.commands}

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*self.commands, *self._plugins(), lab_missing.name or "lab"})

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name in self.commands:
            return self.commands[cmd_name]
        point = self._plugins().get(cmd_name)
        if point is not None:
            command = point.load()
            if isinstance(command, click.Command):
                return command
            logging.getLogger(__name__).warning(
                "ignored entry point %s = %s (%s): not a click command",
                point.name,
                point.value,
                PLUGIN_GROUP,
            )
        return lab_missing if cmd_name == "lab" else None


@click.group(cls=_Commands, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="sparkctl")
@click.option(
    "--debug",
    is_flag=True,
    envvar="SPARKCTL_DEBUG",
    help="Verbose logs and tracebacks on errors (env: SPARKCTL_DEBUG).",
)
@click.pass_context
def cli(ctx: click.Context, debug: bool) -> None:
    """Provision, validate and serve a DGX Spark cluster; rehearse it in a local lab."""
    ctx.obj = App(debug=debug)
    logging.basicConfig(
        level=logging.DEBUG if debug else logging.WARNING,
        format="%(levelname)s %(name)s: %(message)s",
    )


for command in (
    provision.provision,
    provision.render,
    model.model_group,
    validate.validate,
    serve.serve_group,
    bench.bench_command,
    status.status_command,
    provision.up_command,
    report.report_group,
    inventory.inventory_group,
    trust.trust_command,
):
    cli.add_command(command)


def _debug_requested(argv: list[str]) -> bool:
    """--debug before the subcommand, or SPARKCTL_DEBUG set to a true value (as click reads it)."""
    env = os.environ.get("SPARKCTL_DEBUG", "").strip().lower()
    if env in {"1", "true", "yes", "on", "y", "t"}:
        return True
    for arg in argv:
        if arg == "--debug":
            return True
        if not arg.startswith("-"):
            return False  # the subcommand: later words belong to it (e.g. lab ssh NODE CMD)
    return False


def main() -> None:
    debug = _debug_requested(sys.argv[1:])
    try:
        rv = cli.main(standalone_mode=False)
        if isinstance(rv, int) and rv:
            sys.exit(rv)
    except SparkctlError as exc:
        if debug:
            console.err.print_exception()
        # Messages quote inventories ([sparks], [lab:children]): never markup.
        console.err.print(
            f"[bold red]error:[/bold red] {escape(exc.message)}", markup=True, highlight=False
        )
        if exc.hint:
            console.err.print(f"[yellow]hint:[/yellow] {escape(exc.hint)}", highlight=False)
        sys.exit(int(exc.code))
    except click.exceptions.Exit as exc:
        sys.exit(exc.exit_code)
    except click.ClickException as exc:
        exc.show()
        sys.exit(int(ExitCode.BAD_INPUT))
    except click.Abort:
        console.err.print("aborted")
        sys.exit(int(ExitCode.INTERRUPTED))
    except KeyboardInterrupt:
        console.err.print("interrupted")
        sys.exit(int(ExitCode.INTERRUPTED))
    except Exception as exc:  # the one place that turns bugs into a message
        if debug:
            console.err.print_exception()
        console.err.print(
            f"[bold red]internal error:[/bold red] {type(exc).__name__}: {exc}", highlight=False
        )
        console.err.print(
            "[yellow]hint:[/yellow] run again with --debug for the traceback, and report it"
        )
        sys.exit(int(ExitCode.INTERNAL))

"""The ``sparkctl`` command line: thin click commands over the typed core.

Each command checks its inventory once, calls the core, hands the typed result
to :mod:`sparkctl.present`, then exits with the error the result names (its
``failure()``, or validate's verdict).

Every failure is a :class:`~sparkctl.errors.SparkctlError`, caught once in
:func:`main`, printed in plain words and turned into its exit code.
"""

from __future__ import annotations

import logging
import os
import re
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

import click
from rich.markup import escape
from rich.table import Table

from sparkctl import __version__, console
from sparkctl.errors import ExitCode, SparkctlError
from sparkctl.paths import default_sim_inventory

if TYPE_CHECKING:
    from sparkctl.inventory import Inventory


@dataclass
class App:
    debug: bool = False


F = TypeVar("F", bound=Callable[..., Any])


def _inventory_option(default_sim: bool) -> Callable[[F], F]:
    option: Callable[[F], F] = click.option(
        "-i",
        "--inventory",
        "inventory",
        type=click.Path(path_type=Path, dir_okay=False),
        default=default_sim_inventory() if default_sim else None,
        show_default="inventory/sim.ini" if default_sim else False,
        envvar="SPARKCTL_LAB_INVENTORY" if default_sim else None,
        help="Inventory describing the lab (env: SPARKCTL_LAB_INVENTORY).",
    )
    return option


def _print_json(data: Any) -> None:
    from sparkctl import present  # noqa: PLC0415

    present.emit(data)


def _checked(inventory_path: Path, extra: Mapping[str, Any] | None = None) -> Inventory:
    """The inventory loaded and checked, once per command, with the command's ``-e``
    values judged by the same rules (exit 2 before any host)."""
    from sparkctl import inventory  # noqa: PLC0415

    return inventory.validate(inventory_path, extra)


class _Result(Protocol):
    """A command's result: :meth:`failure` is the error to exit with, or None."""

    def failure(self) -> SparkctlError | None: ...


def _exit_for(result: _Result) -> None:
    error = result.failure()
    if error is not None:
        raise error


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
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


# --------------------------------------------------------------- provision
_INVENTORY_ARG = click.argument(
    "inventory_path", metavar="INVENTORY", type=click.Path(path_type=Path, dir_okay=False)
)
_DIGEST = re.compile(r"sha256:[0-9a-f]{64}")


def _digest(_ctx: click.Context, _param: click.Parameter, value: str | None) -> str | None:
    if value is not None and not _DIGEST.fullmatch(value):
        raise click.BadParameter(f"{value!r} is not a digest sha256:<64 hex digits>")
    return value


_ACCEPT_DIGEST = click.option(
    "--accept-image-digest",
    "accept_digest",
    metavar="sha256:...",
    callback=_digest,
    help="The SGLang image's tag moved to this digest: move the cluster to it (once; "
    "pin it with sglang_image_digest to keep it).",
)


def _with_accept(extra: tuple[str, ...], accept_digest: str | None) -> dict[str, Any]:
    extravars = _extra_vars(extra)
    if accept_digest:
        extravars["sglang_image_accept_digest"] = accept_digest
    return extravars


@cli.command()
@_INVENTORY_ARG
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
@_ACCEPT_DIGEST
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
    from sparkctl.provision import provision as run  # noqa: PLC0415

    extravars = _with_accept(extra, accept_digest)
    inv = _checked(inventory_path, extravars)
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
    _exit_for(result)


@cli.command()
@_INVENTORY_ARG
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

    for path in run(_checked(inventory_path), out):
        click.echo(str(path.relative_to(out.resolve())))


def _extra_vars(values: tuple[str, ...]) -> dict[str, Any]:
    """-e KEY=VALUE (the value read as YAML, as ansible-playbook does) or -e '{...}'."""
    import yaml  # noqa: PLC0415

    out: dict[str, Any] = {}
    for text in values:
        if text.lstrip().startswith("{"):
            try:
                data = yaml.safe_load(text)
            except yaml.YAMLError as exc:
                raise SparkctlError(
                    f"-e {text!r}: not a YAML mapping ({exc})", ExitCode.BAD_INPUT
                ) from None
            if not isinstance(data, dict):
                raise SparkctlError(f"-e {text!r}: not a mapping", ExitCode.BAD_INPUT)
            out.update(data)
            continue
        key, sep, value = text.partition("=")
        if not sep or not key.strip().isidentifier():
            raise SparkctlError(f"-e {text!r}: expected KEY=VALUE", ExitCode.BAD_INPUT)
        try:
            out[key.strip()] = yaml.safe_load(value) if value else ""
        except yaml.YAMLError:
            out[key.strip()] = value
    return out


@cli.group("model")
def model_group() -> None:
    """The model on every node: fetched once, fanned out over the fabric, verified."""


@model_group.command("sync")
@_INVENTORY_ARG
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

    extravars = _extra_vars(extra)
    inv = _checked(inventory_path, extravars)
    result = sync(inv, full_verify=full_verify, extravars=extravars, limit=limit)
    present.provision(result, as_json=as_json)
    _exit_for(result)


@cli.command()
@_INVENTORY_ARG
@click.option(
    "--baseline",
    metavar="PATH|last-good",
    help="Compare with an earlier run (its directory or report.json, or last-good): "
    "a judged size more than the tolerance below it fails.",
)
@click.option("--no-nccl", is_flag=True, help="Node and fabric checks only (no nccl-tests).")
@click.option(
    "-c",
    "--collective",
    "collectives",
    multiple=True,
    type=click.Choice(["all_reduce", "all_gather", "reduce_scatter"]),
    help="Only these collectives (repeatable; default: validate_collectives).",
)
@click.option(
    "-e",
    "--extra-vars",
    "extra",
    multiple=True,
    help="VAR=VALUE or a YAML mapping, as given to provision (e.g. the model source).",
)
@click.option(
    "--stop-serving",
    is_flag=True,
    help="Stop a running TP service for the run and start it again after (a loaded model "
    "leaves too little memory for a calibrated sweep: the gate says not judged).",
)
@click.option(
    "--soak",
    metavar="DURATION",
    help="Burn-in: repeat the node checks and the NCCL sweep for DURATION (90s, 30m, 2h; "
    "at least one round), reading every node's GPU temperature, power and clock after "
    "each; exit 0 when busbw held steady with no error or throttling, 1 when not "
    "(soak.html names the round, node and figure). A soak never becomes last-good.",
)
@click.option(
    "--json", "as_json", is_flag=True, help="Print report.json (with --soak, soak.json) on stdout."
)
def validate(
    inventory_path: Path,
    baseline: str | None,
    no_nccl: bool,
    collectives: tuple[str, ...],
    extra: tuple[str, ...],
    stop_serving: bool,
    soak: str | None,
    as_json: bool,
) -> None:
    """Check every node and the fabric, gate NCCL bandwidth, write a report.

    Exit 0 when everything passes, 1 when a check, the bandwidth gate or the
    baseline comparison fails (the report says which node, interface and
    collective), 2 for bad input, 3 when a node cannot be reached, 8 when
    nothing failed but the gate could not judge (too little memory free for a
    calibrated sweep, as next to a loaded model: --stop-serving).

    With --soak DURATION (burn-in): rounds of the same checks and sweep for
    DURATION, soak.json and soak.html in the run's directory; exit 0 when stable,
    1 when a round dropped, erred or throttled, or busbw varied; 2 for a
    duration that is not Ns, Nm or Nh. A soak run never updates last-good.
    """
    from sparkctl import present  # noqa: PLC0415
    from sparkctl.validate import run  # noqa: PLC0415

    if soak is not None:
        if baseline or stop_serving:
            raise SparkctlError("--soak takes no --baseline or --stop-serving", ExitCode.BAD_INPUT)
        _validate_soak(inventory_path, soak, no_nccl, collectives, extra, as_json=as_json)
        return
    extravars = _extra_vars(extra)
    inv = _checked(inventory_path, extravars)
    options: dict[str, Any] = {
        "baseline": baseline,
        "nccl": not no_nccl,
        "collectives": collectives,
    }
    if stop_serving:
        from sparkctl import whole_job  # noqa: PLC0415

        around = whole_job.validate_stopping_service(inv, extravars, **options)
        report, run_dir = around.report, around.run_dir
        present.validate(report, run_dir, as_json=as_json)
        if around.served is not None:
            present.serve_up(around.served, to_stderr=as_json)
            if (error := around.served.failure()) is not None:
                raise error
    else:
        report, run_dir = run.validate(run.Options(inventory=inv, extra=extravars, **options))
        present.validate(report, run_dir, as_json=as_json)
    if report.verdict != "passed":
        raise SparkctlError(
            run.failure_summary(report) + f" (report: {run_dir / 'report.html'})",
            run.exit_code(report),
        )


def _validate_soak(
    inventory_path: Path,
    duration: str,
    no_nccl: bool,
    collectives: tuple[str, ...],
    extra: tuple[str, ...],
    *,
    as_json: bool,
) -> None:
    """validate --soak: the duration refused before anything else (exit 2)."""
    from sparkctl import present  # noqa: PLC0415
    from sparkctl.validate import soak as soaking  # noqa: PLC0415

    seconds = soaking.parse_duration(duration)
    extravars = _extra_vars(extra)
    inv = _checked(inventory_path, extravars)
    result, run_dir = soaking.soak(
        soaking.SoakOptions(
            inventory=inv,
            duration_s=seconds,
            nccl=not no_nccl,
            collectives=collectives,
            extra=extravars,
        )
    )
    present.soak(result, run_dir, as_json=as_json)
    error = soaking.failure(result, run_dir)
    if error is not None:
        raise error


@cli.group("serve")
def serve_group() -> None:
    """The TP SGLang service: start it, prove it answers, stop it."""


@serve_group.command("up")
@_INVENTORY_ARG
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

    extravars = _extra_vars(extra)
    inv = _checked(inventory_path, extravars)
    result = up.up(inv, timeout=timeout, restart=restart, extravars=extravars)
    present.serve_up(result)
    _exit_for(result)


@serve_group.command("verify")
@_INVENTORY_ARG
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

    extravars = _extra_vars(extra)
    inv = _checked(inventory_path, extravars)
    result = service.verify_command(inv, extravars=extravars)
    present.verified(result, as_json=as_json)
    _exit_for(result)


@serve_group.command("down")
@_INVENTORY_ARG
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON.")
def serve_down(inventory_path: Path, as_json: bool) -> None:
    """Stop every rank (the head first), and prove the stop.

    Whatever of the service is left (its container, a process of SGLang's) is
    named and stopped; every node's memory must then be back within a tolerance
    of what serve up read before it started (exit 1 naming the node otherwise).
    """
    from sparkctl import present  # noqa: PLC0415
    from sparkctl.serve import up  # noqa: PLC0415

    result = up.down(_checked(inventory_path))
    present.serve_down(result, as_json=as_json)
    _exit_for(result)


def _status(inventory_path: Path, as_json: bool, watch: float | None) -> None:
    from sparkctl import present  # noqa: PLC0415
    from sparkctl import status as status_mod  # noqa: PLC0415

    inv = _checked(inventory_path)
    if watch is None:
        st = status_mod.look(inv)
        present.status(st, as_json=as_json)
        _exit_for(st)
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


def _status_options(f: Any) -> Any:
    for option in reversed(_STATUS_OPTIONS):
        f = option(f)
    return f


@cli.command("status")
@_INVENTORY_ARG
@_status_options
def status_command(inventory_path: Path, as_json: bool, watch: float | None) -> None:
    """One truthful look at the whole cluster: nodes, twins, ranks, endpoint, drift.

    Each node (reachable, GPU, MemAvailable), each fabric twin (up, MTU, speed,
    errors since the last look), each rank's unit, each group's endpoint (a
    bounded one-token generation, requests running and queued, whether
    generation progresses), the last validate and drift since last-good.
    Exit 0 healthy, 1 degraded (a hang included), 3 a node unreachable.
    """
    _status(inventory_path, as_json, watch)


@serve_group.command("status")
@_INVENTORY_ARG
@_status_options
def serve_status(inventory_path: Path, as_json: bool, watch: float | None) -> None:
    """The same as `sparkctl status` (kept for scripts that call it here)."""
    _status(inventory_path, as_json, watch)


@serve_group.command("watch")
@_INVENTORY_ARG
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

    extravars = _extra_vars(extra)
    inv = _checked(inventory_path, extravars)
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
    _exit_for(result)


@serve_group.command("logs")
@_INVENTORY_ARG
@click.argument("node", required=False)
@click.option("-n", "--lines", type=click.IntRange(min=1), default=100, show_default=True)
@click.option("-f", "--follow", is_flag=True, help="Follow (one node only).")
def serve_logs(inventory_path: Path, node: str | None, lines: int, follow: bool) -> None:
    """The journal of the SGLang unit on NODE (default: every node, rank order)."""
    from sparkctl import present  # noqa: PLC0415
    from sparkctl.serve import up  # noqa: PLC0415

    present.journal(up.journal(_checked(inventory_path), node, lines, follow))


@cli.command("up")
@_INVENTORY_ARG
@click.option(
    "-e",
    "--extra-vars",
    "extra",
    multiple=True,
    help="VAR=VALUE or a YAML mapping, for provision and validate alike (repeatable).",
)
@_ACCEPT_DIGEST
def up_command(inventory_path: Path, extra: tuple[str, ...], accept_digest: str | None) -> None:
    """The whole job: provision, validate (stop if it fails), serve up, serve verify."""
    from sparkctl import present  # noqa: PLC0415
    from sparkctl.whole_job import whole_job  # noqa: PLC0415

    extravars = _with_accept(extra, accept_digest)
    whole_job(_checked(inventory_path, extravars), extravars, show=present.show)


@cli.group("report")
def report_group() -> None:
    """Read saved results with the same code the commands use."""


@report_group.command("nccl")
@click.argument("logfile", type=click.Path(path_type=Path, dir_okay=False))
@click.option(
    "--gate",
    is_flag=True,
    help="Judge the log with validate's bandwidth gate (the fitted busbw against the "
    "line rate); exit 1 when it fails.",
)
@click.option(
    "--line-rate",
    "line_rate",
    type=click.FloatRange(min=0, min_open=True),
    metavar="GBYTES_PER_S",
    help="Line rate of one port in GB/s for --gate (25 on a Spark); thresholds "
    "from the validate role's defaults.",
)
@click.option(
    "-i",
    "--inventory",
    "inventory_path",
    default=None,
    type=click.Path(path_type=Path, dir_okay=False),
    help="For --gate: the line rate and thresholds this inventory's profile implies "
    "(validate's plan).",
)
@click.option(
    "--collective",
    type=click.Choice(["all_gather", "all_reduce", "reduce_scatter"]),
    default=None,
    help="For --gate: the collective of a log that does not print its own "
    "('# Collective test starting: ...').",
)
@click.option(
    "--no-rdma",
    "no_rdma",
    is_flag=True,
    help="For --gate: the cluster has no RDMA (the lab), so NCCL's transport is not judged; "
    "otherwise a log that does not show it (no NCCL INFO lines) is NOT JUDGED.",
)
@click.option("--json", "as_json", is_flag=True, help="Every row and the summary as JSON.")
def report_nccl(
    logfile: Path,
    gate: bool,
    line_rate: float | None,
    inventory_path: Path | None,
    collective: str | None,
    no_rdma: bool,
    as_json: bool,
) -> None:
    """Parse a saved nccl-tests log (e.g. from a manual mpirun) into rows and the average.

    Exits 1 (FAILED) when the log has #wrong or out-of-bounds values (with or
    without --gate, before anything else), and with --gate when the bandwidth gate
    fails or cannot judge the run (NOT JUDGED: NCCL's transport not in the log where
    RDMA is expected); 2 when the log is not a complete run.
    """
    from sparkctl import nccl_parse, present  # noqa: PLC0415
    from sparkctl.validate import nccl_judge  # noqa: PLC0415

    if (line_rate is not None or inventory_path is not None or collective or no_rdma) and not gate:
        raise SparkctlError(
            "--line-rate, -i, --collective and --no-rdma are for --gate", ExitCode.BAD_INPUT
        )
    if gate and (line_rate is None) == (inventory_path is None):
        raise SparkctlError(
            "--gate needs the line rate: --line-rate GBYTES_PER_S or -i INVENTORY (one of them)",
            ExitCode.BAD_INPUT,
        )
    try:
        with logfile.open(errors="replace") as lines:  # line by line: any size, bounded memory
            report = nccl_parse.parse(lines, str(logfile))
    except OSError as exc:
        raise SparkctlError(
            f"{logfile}: cannot read: {exc.strerror or exc}", ExitCode.BAD_INPUT
        ) from None
    bad = nccl_judge.data_failures(report)
    verdict = (
        _gate_saved_log(report, str(logfile), line_rate, inventory_path, collective, no_rdma)
        if gate
        else None
    )
    if as_json:
        data = report.to_dict()
        if verdict is not None:
            data["gate"] = {
                "outcome": verdict[0].outcome,
                "message": verdict[0].message,
                "fit": _asdict(verdict[0].fit),
                "thresholds": verdict[1].to_dict(),
            }
        _print_json(data)
    else:
        present.nccl_log(report, verdict, bad)
    failed = ([f"{logfile}: FAILED: {'; '.join(bad)}"] if bad else []) + (
        [f"{logfile}: gate {verdict[0].outcome.replace('_', ' ').upper()}: {verdict[0].message}"]
        if verdict is not None and verdict[0].outcome != "passed"
        else []
    )
    if failed:
        unjudged = not bad and verdict is not None and verdict[0].outcome == "not_judged"
        raise SparkctlError(
            "; ".join(failed), ExitCode.NOT_JUDGED if unjudged else ExitCode.CHECKS_FAILED
        )


def _asdict(value: Any) -> Any:
    from dataclasses import asdict  # noqa: PLC0415

    return None if value is None else asdict(value)


def _gate_saved_log(
    report: Any,
    source: str,
    line_rate: float | None,
    inventory_path: Path | None,
    collective: str | None,
    no_rdma: bool,
) -> tuple[Any, Any]:
    """validate's judgement of a saved log: (NcclRun, Thresholds)."""
    from sparkctl.validate import nccl_judge  # noqa: PLC0415

    rdma = not no_rdma  # a Spark's NCCL runs over RoCE
    if line_rate is not None:
        th = nccl_judge.role_thresholds(line_rate)
    elif inventory_path is not None:
        th, planned = _inventory_thresholds(inventory_path)
        rdma = rdma and planned
    else:
        raise SparkctlError("--gate needs --line-rate or -i", ExitCode.BAD_INPUT)
    return nccl_judge.gate_log(report, th, source, collective, rdma_expected=rdma), th


def _inventory_thresholds(inventory_path: Path) -> tuple[Any, bool]:
    """The thresholds validate would use for this inventory (its plan, computed as
    validate computes it, on the controller only), and whether its NCCL runs over RDMA."""
    import tempfile  # noqa: PLC0415

    from sparkctl import inventory  # noqa: PLC0415
    from sparkctl.remote import load_plan  # noqa: PLC0415
    from sparkctl.validate import run  # noqa: PLC0415

    inv = inventory.validate(inventory_path)
    with tempfile.TemporaryDirectory(prefix="sparkctl-report-") as tmp:
        plan = load_plan(inv, Path(tmp))
    rate = plan.settings.line_rate_gbytes
    if rate is None:
        raise SparkctlError(
            f"{inventory_path}: its profile reads the line rate from the nodes "
            "(the lab's shaped rate): give --line-rate instead",
            ExitCode.BAD_INPUT,
        )
    return run.thresholds(plan, rate), plan.node(plan.nodes[0]).nccl.rdma_expected


@cli.group("inventory")
def inventory_group() -> None:
    """Inspect and check inventories without contacting any host."""


@inventory_group.command("check")
@_INVENTORY_ARG
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

    inv = _checked(inventory_path, _extra_vars(extra))
    present.inventory_checked(inv, accepted_risks(inv.hostvars), as_json=as_json)


@cli.command("trust")
@_INVENTORY_ARG
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

    result = trust(_checked(inventory_path), accept)
    present.trust(result, as_json=as_json)
    _exit_for(result)


# --------------------------------------------------------------------- lab
@cli.group()
def lab() -> None:
    """The rehearsal lab: four simulated Sparks and a switch in local containers."""


def _lab(inventory: Path, **overrides: Any) -> Any:
    from sparkctl.lab.lab import Lab, LabSpec, check_environment  # noqa: PLC0415

    # Bad input first: a mistyped inventory is reported before "needs root".
    spec = LabSpec.from_inventory(inventory, **overrides)
    check_environment()
    return Lab(spec, progress=console.progress)


@lab.command("up")
@_inventory_option(default_sim=True)
@click.option(
    "--rate",
    "rate_mbit",
    type=click.IntRange(min=1),
    default=None,
    help="Shape every switch port to this many Mbit/s (default: lab_link_rate_mbit).",
)
@click.option(
    "--driver-version",
    default=None,
    help="Driver version the simulated GPUs report (default: lab_gpu_driver_version).",
)
@click.option("--rebuild", is_flag=True, help="Rebuild the node image even if it is cached.")
@click.option(
    "--mirror",
    envvar="SPARKCTL_LAB_MIRROR",
    default=None,
    help="Debian mirror for the image build (default: this machine's apt mirror; "
    "env: SPARKCTL_LAB_MIRROR).",
)
@click.option("--json", "as_json", is_flag=True, help="Print the lab status as JSON.")
def lab_up(
    inventory: Path,
    rate_mbit: int | None,
    driver_version: str | None,
    rebuild: bool,
    mirror: str | None,
    as_json: bool,
) -> None:
    """Build the node image if needed and bring the lab up."""
    the_lab = _lab(inventory, rate_mbit=rate_mbit, driver_version=driver_version)
    created = the_lab.up(rebuild=rebuild, mirror=mirror)
    status = the_lab.status()
    status["created"] = created
    if as_json:
        _print_json(status)
    else:
        _show_status(status)


@lab.command("down")
@_inventory_option(default_sim=True)
def lab_down(inventory: Path) -> None:
    """Remove every container and network the lab created (the image cache stays)."""
    _lab(inventory).down()


@lab.command("status")
@_inventory_option(default_sim=True)
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
def lab_status(inventory: Path, as_json: bool) -> None:
    """Each node's state, addresses and links; exit 1 when the lab is not up."""
    status = _lab(inventory).status()
    if as_json:
        _print_json(status)
    else:
        _show_status(status)
    if not status["up"]:
        raise SparkctlError("the lab is not up", ExitCode.CHECKS_FAILED, hint="sparkctl lab up")


@lab.command("ssh", context_settings={"ignore_unknown_options": True})
@_inventory_option(default_sim=True)
@click.argument("node")
@click.argument("command", nargs=-1, type=click.UNPROCESSED)
def lab_ssh(inventory: Path, node: str, command: tuple[str, ...]) -> None:
    """Open a shell on NODE (or run COMMAND there) over the management network."""
    from sparkctl.lab.sshtrust import ssh_base_args  # noqa: PLC0415

    the_lab = _lab(inventory)
    hosts = {h.name: h for h in the_lab.spec.hosts}
    if node not in hosts:
        raise SparkctlError(f"no lab host '{node}' (hosts: {', '.join(hosts)})", ExitCode.BAD_INPUT)
    interactive = not command and sys.stdin.isatty()
    args = ssh_base_args(the_lab.dir / "ssh", batch=not interactive)
    sys.stdout.flush()
    os.execvp(args[0], [*args, f"root@{hosts[node].mgmt_ip}", *command])  # noqa: S606 - replaces sparkctl by ssh, as intended


@lab.command("port")
@_inventory_option(default_sim=True)
@click.argument("port")
@click.option("--rate", "rate_mbit", type=click.IntRange(min=1), help="New shaping rate, Mbit/s.")
@click.option("--mtu", type=click.IntRange(68, 65535), help="New MTU of the switch port.")
@click.option("--up/--down", "up", default=None, help="Set the port up or down (pull the cable).")
def lab_port(
    inventory: Path, port: str, rate_mbit: int | None, mtu: int | None, up: bool | None
) -> None:
    """Change a switch PORT live (swp3 or spark2:a): rate, MTU, up/down.

    Rehearses faults: a port left at MTU 1500, a pulled cable, a slow link.
    """
    the_lab = _lab(inventory)
    cable = the_lab.cable(port)
    the_lab.set_port(cable, rate_mbit=rate_mbit, mtu=mtu, up=up)
    console.progress(f"{cable.port} ({cable.node}:{cable.domain}) updated")


@lab.command("reboot")
@_inventory_option(default_sim=True)
@click.argument("nodes", nargs=-1, required=True)
def lab_reboot(inventory: Path, nodes: tuple[str, ...]) -> None:
    """Reboot lab Sparks: each shuts down through its systemd, then each boots again, in
    the order given, with its cables plugged in before its systemd starts."""
    _lab(inventory).reboot(list(nodes))


_SIZE_UNITS = {
    "": 1,
    "b": 1,
    "k": 1 << 10,
    "kib": 1 << 10,
    "m": 1 << 20,
    "mib": 1 << 20,
    "g": 1 << 30,
    "gib": 1 << 30,
    "t": 1 << 40,
    "tib": 1 << 40,
}


def parse_size(text: str) -> int:
    """'1GiB', '512M', '64MiB', '1048576' -> bytes (binary units)."""
    raw = text.strip().lower().replace(" ", "")
    number = raw.rstrip("abcdefghijklmnopqrstuvwxyz")
    unit = raw[len(number) :]
    try:
        value = float(number)
    except ValueError:
        raise click.BadParameter(f"{text!r} is not a size such as 1GiB or 512M") from None
    if unit not in _SIZE_UNITS or value <= 0:
        raise click.BadParameter(f"{text!r} is not a size such as 1GiB or 512M")
    return int(value * _SIZE_UNITS[unit])


@lab.command("model")
@_inventory_option(default_sim=True)
@click.option("--size", default="1GiB", show_default=True, help="Total size, e.g. 64MiB, 1GiB.")
@click.option(
    "--files",
    "shards",
    type=click.IntRange(min=1),
    default=4,
    show_default=True,
    help="Number of weight shards.",
)
@click.option("--node", help="Lab node that gets it (default: the head, node_rank 0).")
@click.option(
    "--dir",
    "directory",
    default="/srv/sparkctl-model/synthetic",
    show_default=True,
    help="Directory on the node (replaced).",
)
@click.option("--json", "as_json", is_flag=True, help="Print what was made as JSON.")
def lab_model(
    inventory: Path, size: str, shards: int, node: str | None, directory: str, as_json: bool
) -> None:
    """Make a synthetic model (random bytes) on a lab node, to rehearse `model sync`.

    Then: sparkctl model sync inventory/sim.ini -e model_cache_source=head
    -e model_cache_head_dir=/srv/sparkctl-model/synthetic
    """
    from sparkctl import inventory as inv_mod  # noqa: PLC0415

    the_lab = _lab(inventory)
    head = node or next(n.name for n in inv_mod.validate(inventory).nodes if n.rank == 0)
    made = the_lab.make_model(head, directory, parse_size(size), files=shards)
    if as_json:
        _print_json({"node": head, **made})
    else:
        console.progress(
            f"{head}:{made['directory']}: {len(made['files'])} files, "
            f"{made['size_bytes']} bytes of random weights"
        )


def _show_status(status: dict[str, Any]) -> None:
    table = Table(
        title=f"lab ({'up' if status['up'] else 'not up'}, "
        f"ports shaped to {status['rate_mbit']} Mbit/s"
        + ("" if status.get("egress_guard", True) else "; NO egress guard: run sparkctl lab up")
        + ")"
    )
    for col in ("host", "state", "management", "links"):
        table.add_column(col)
    for h in status["hosts"]:
        links = "\n".join(
            f"{ln['name']} {ln['state']} mtu {ln['mtu']}"
            + (f" {' '.join(ln['addresses'])}" if ln["addresses"] else "")
            + (f" {ln['rate_mbit']} Mbit/s" if "rate_mbit" in ln else "")
            for ln in h["links"]
        )
        table.add_row(h["name"], h["state"], h["mgmt_ip"], links)
    console.out.print(table)


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

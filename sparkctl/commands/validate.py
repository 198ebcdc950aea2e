"""sparkctl validate: node and fabric checks, the NCCL gate, the soak."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from sparkctl.commands.common import INVENTORY_ARG, checked, extra_vars
from sparkctl.errors import ExitCode, SparkctlError


@click.command()
@INVENTORY_ARG
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
    extravars = extra_vars(extra)
    inv = checked(inventory_path, extravars)
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
    extravars = extra_vars(extra)
    inv = checked(inventory_path, extravars)
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

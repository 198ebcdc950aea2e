"""sparkctl report: saved results read with the commands' own code."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from sparkctl.commands.common import print_json
from sparkctl.errors import ExitCode, SparkctlError


@click.group("report")
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
        print_json(data)
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

"""The one place command results are shown.

The core returns typed results (dataclasses with ``to_dict()`` where they have a
``--json`` form) and prints nothing; :mod:`sparkctl.cli` hands them to one of
these functions. Data goes to stdout (``console.out``: rich tables, coloured on
a terminal and plain text when piped), or as JSON with ``--json`` through
:func:`emit`; what is said about a result (failures, where the artifacts are,
what to compare) goes to stderr, so ``sparkctl ... --json | jq`` always gets
clean JSON. Progress during a run stays with the run (:func:`console.progress`).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click
from rich.console import Console
from rich.table import Table

from sparkctl import console
from sparkctl.present import summary

if TYPE_CHECKING:
    from sparkctl.provision import Provisioned
    from sparkctl.report.model import Report
    from sparkctl.runner import RunResult
    from sparkctl.serve.service import Verified
    from sparkctl.serve.up import JournalLines, Stopped, UpResult
    from sparkctl.trust import Result, TrustRun


def emit(result: Any) -> None:
    """``--json``: the result's ``to_dict()`` (or the data itself) on stdout."""
    data = result.to_dict() if hasattr(result, "to_dict") else result
    click.echo(json.dumps(data, indent=2, sort_keys=False))


def show(result: object) -> None:
    """A step of ``sparkctl up`` as the command of its own would show it."""
    from sparkctl.provision import Provisioned  # noqa: PLC0415
    from sparkctl.serve.service import Verified  # noqa: PLC0415
    from sparkctl.serve.up import UpResult  # noqa: PLC0415
    from sparkctl.whole_job import Validated  # noqa: PLC0415

    if isinstance(result, Provisioned):
        provision(result)
    elif isinstance(result, Validated):
        summary.show(result.report)
    elif isinstance(result, UpResult):
        serve_up(result)
    elif isinstance(result, Verified):
        verified(result)
    else:
        raise TypeError(f"no presentation for {type(result).__name__}")


# --------------------------------------------------------------- provision
def provision_table(result: RunResult, hosts: Sequence[str]) -> Table:
    table = Table(title=f"{result.status} in {result.duration:.0f} s")
    for col in ("host", "ok", "changed", "failed", "unreachable", "skipped"):
        table.add_column(col, justify="right" if col != "host" else "left")
    for host in hosts:
        s = result.stats.get(host)
        if s is None:
            table.add_row(host, "-", "-", "-", "-", "-")
            continue
        table.add_row(
            host,
            str(s.ok),
            str(s.changed),
            f"[red]{s.failed}[/red]" if s.failed else "0",
            f"[red]{s.unreachable}[/red]" if s.unreachable else "0",
            str(s.skipped),
        )
    return table


def provision(provisioned: Provisioned, *, as_json: bool = False) -> None:
    """provision and model sync: per-host counts, then each failure and Ansible error."""
    result = provisioned.run
    if as_json:
        emit(provisioned)
    else:
        console.out.print(provision_table(result, provisioned.hosts))
    for failure in result.failures:
        kind = "unreachable" if failure.unreachable else "failed"
        console.err.print(
            f"[red]{failure.host}[/red] {kind} at [bold]{failure.task}[/bold]: {failure.message}",
            highlight=False,
        )
    for error in result.errors:
        console.err.print(f"ansible: {error}", style="red", highlight=False, markup=False)
    console.progress(f"runner artifacts: {result.artifact_dir}")


# --------------------------------------------------------------- validate
def validate(report: Report, run_dir: Path, *, as_json: bool = False) -> None:
    if as_json:
        emit(report)
    else:
        summary.show(report)
    console.progress(f"report: {run_dir / 'report.html'} (and report.json)")


# --------------------------------------------------------------- serve
def verified(result: Verified, *, as_json: bool = False) -> None:
    if as_json:
        emit(result)
    else:
        summary.show(result.report)
    console.progress(f"report: {result.run_dir / 'report.html'}")


def serve_up(result: UpResult) -> None:
    if result.already_serving:
        console.out.print(
            f"already serving {result.model_name} at {result.endpoints}: "
            "every rank running, /health 200 (--restart starts it again)",
            highlight=False,
        )
    elif result.ok:
        console.out.print(
            f"[green]serving[/green] {result.model_name}: {result.description} at "
            f"{result.endpoints} ({result.seconds:.0f} s)",
            highlight=False,
        )
    else:
        for line in result.explanation:
            console.err.print(line, markup=False, highlight=False)


def serve_down(result: Stopped) -> None:
    console.out.print(f"stopped {result.unit} on {', '.join(result.nodes)}")


def serve_status(data: dict[str, Any], *, as_json: bool = False) -> None:
    if as_json:
        emit(data)
        return
    table = Table(box=None)
    for col in ("rank", "node", "state", "since", "restarts"):
        table.add_column(col)
    for r in data["ranks"]:
        table.add_row(
            str(r["rank"]),
            r["node"],
            f"{r['ActiveState']}/{r['SubState']}",
            r.get("ActiveEnterTimestamp", ""),
            r.get("NRestarts", ""),
        )
    console.out.print(table)
    for g in data["groups"]:
        health = g["health"]
        name = f"group {g['group']}: " if len(data["groups"]) > 1 else ""
        console.out.print(
            f"{name}{g['endpoint']}: /health {health if health is not None else 'no answer'}",
            highlight=False,
        )


def journal(chunks: Iterable[JournalLines]) -> None:
    """serve logs: each node's block under its label, or the followed lines as they come."""
    for chunk in chunks:
        if chunk.label is not None:
            console.out.print(f"[bold]== {chunk.label}[/bold]", highlight=False)
        console.out.print(chunk.text, markup=False, highlight=False)


# --------------------------------------------------------------- trust
_TRUST_STYLE = {
    "recorded": "yellow",
    "unchanged": "green",
    "changed": "bold red",
    "replaced": "yellow",
    "unreachable": "red",
}


def trust_table(results: Sequence[Result]) -> None:
    header = ("host", "address", "key type", "fingerprint", "outcome")
    rows = [
        (
            r.target.name,
            r.target.where,
            r.key.type if r.key else "-",
            r.key.fingerprint if r.key else "-",
            r.outcome,
        )
        for r in results
    ]
    table = Table(box=None)
    for col in header:
        table.add_column(col, no_wrap=True)
    for row in rows:
        table.add_row(*row[:-1], f"[{_TRUST_STYLE[row[-1]]}]{row[-1]}[/]")
    # Never shorten a fingerprint to fit a narrow (or absent) terminal.
    width = sum(max(len(c) for c in col) + 2 for col in zip(header, *rows, strict=True))
    Console(width=max(width, console.out.width), highlight=False).print(table)


def trust(result: TrustRun, *, as_json: bool = False) -> None:
    """Each host's key and outcome, then what was written and what to compare."""
    if as_json:
        emit(result)
    else:
        trust_table(result.results)
    for note in result.notes():
        console.progress(note)

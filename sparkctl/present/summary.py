"""The terminal summary of a validation run: a check x node matrix, the failures,
the bandwidth gate, localisation, the baseline and the verdict."""

from __future__ import annotations

from rich.markup import escape
from rich.table import Table

from sparkctl import console
from sparkctl.report.model import Check, Report, latency_rows
from sparkctl.units import human_bytes

_MARK = {
    "passed": "[green]ok[/green]",
    "skipped": "[dim]-[/dim]",
    "failed": "[red]FAIL[/red]",
    "error": "[red]ERROR[/red]",
    "not_judged": "[yellow]NOT JUDGED[/yellow]",
}
_RANK = {"passed": 0, "skipped": 1, "not_judged": 2, "failed": 3, "error": 4}


def _cell(checks: list[Check]) -> str:
    if not checks:
        return ""
    worst = max(checks, key=lambda c: _RANK[c.outcome])
    bad = sum(1 for c in checks if not c.ok)
    return _MARK[worst.outcome] + (f" {bad}/{len(checks)}" if bad and len(checks) > 1 else "")


def show(report: Report) -> None:
    out = console.out
    hosts = list(report.hosts) + (
        ["cluster"] if any(c.host == "cluster" for c in report.checks) else []
    )
    matrix = Table(box=None, title="node checks", title_justify="left")
    matrix.add_column("check")
    for h in hosts:
        matrix.add_column(h, justify="center")
    names = list(dict.fromkeys(c.check for c in report.checks))
    for name in names:
        matrix.add_row(
            name,
            *(_cell([c for c in report.checks if c.check == name and c.host == h]) for h in hosts),
        )
    out.print(matrix)
    for c in report.failed_checks():
        where = f"{c.host}" + (f" {c.subject}" if c.subject else "")
        out.print(
            f"  [red]{c.outcome}[/red] {escape(c.check)} on [bold]{escape(where)}[/bold]: "
            f"{escape(c.message)}",
            highlight=False,
        )
    _gate(report)
    _tail(report)


def _gate(report: Report) -> None:
    out = console.out
    th = report.thresholds
    if report.nccl:
        table = Table(
            box=None,
            title=f"bandwidth gate (line rate {th.line_rate_gbytes:g} GB/s; "
            "the alpha-beta fit over the judged sizes is judged)",
            title_justify="left",
        )
        for col in (
            "run",
            "size",
            "busbw GB/s",
            "of line",
            "fitted GB/s",
            "latency us",
            "threshold",
            "result",
        ):
            table.add_column(col, justify="right" if col != "run" else "left")
        for r in report.nccl:
            name = r.collective if r.scope == "all" else f"  pair {'-'.join(r.hosts)}"
            limit = th.threshold_for(r.collective)
            fitted = (
                [
                    f"{r.fit.busbw:.3f}"
                    + (f" ± {r.fit.busbw_se:.3f}" if r.fit.method == "fit" else " (as measured)"),
                    f"{r.fit.latency_us:.0f}" if r.fit.method == "fit" else "",
                    "not gated" if limit is None else f"{limit:.3f}",
                ]
                if r.fit
                else ["", "", ""]
            )
            if not r.judged:
                table.add_row(name, "", "", "", *fitted, _MARK[r.outcome])
            for j in r.judged:
                table.add_row(
                    name,
                    human_bytes(j.size, exact=True),
                    f"{j.busbw:.3f}",
                    f"{j.fraction:.0%}",
                    *fitted,
                    _MARK[r.outcome],
                )
                name = ""
                fitted = ["", "", ""]
        out.print(table)
        _latency(report)
        for r in report.nccl:
            if r.outcome != "passed" and r.scope == "all":
                out.print(
                    f"  [red]{r.outcome}[/red] {r.collective}: {escape(r.message)}", highlight=False
                )


# The sizes the one-line latency summary names, where the run has them.
_LATENCY_SIZES = (8, 1 << 10, 4 << 10, 16 << 10, 64 << 10, 256 << 10, 1 << 20)


def _latency(report: Report) -> None:
    """all_reduce's time at decode's message sizes, one line (report.html has them all)."""
    rows = {size: oop for size, oop, _ in latency_rows(report)}
    shown = [f"{human_bytes(s, exact=True)} {rows[s]:g}" for s in _LATENCY_SIZES if s in rows]
    if len(shown) > 1:
        console.out.print(
            "all_reduce latency (us, out-of-place): " + ", ".join(shown),
            markup=False,
            highlight=False,
        )


def _tail(report: Report) -> None:
    out = console.out
    for f in report.localisation:
        where = f.host + (f" {f.subject}" if f.subject else "")
        out.print(
            f"[yellow]localised[/yellow] [bold]{escape(where)}[/bold]: {escape(f.message)}",
            highlight=False,
        )
    if report.baseline:
        b = report.baseline
        colour = "red" if b.outcome == "failed" else "green"
        out.print(
            f"baseline {escape(b.run_id)}: [{colour}]{b.outcome}[/{colour}] {escape(b.message)}",
            highlight=False,
        )
    for note in report.notes:
        out.print(f"[dim]note: {escape(note)}[/dim]", highlight=False)
    colour = {"passed": "green", "not_judged": "yellow"}.get(report.verdict, "red")
    failed = len(report.failed_checks())
    gate = [r for r in report.nccl if r.scope == "all"]
    passing = sum(1 for r in gate if r.outcome == "passed")
    collectives = f", {passing}/{len(gate)} collectives pass" if gate else ""
    out.print(
        f"[bold {colour}]{report.verdict.replace('_', ' ').upper()}[/bold {colour}] "
        f"{report.cluster}: "
        f"{len(report.checks) - failed}/{len(report.checks)} checks ok{collectives} "
        f"({report.duration_s:.0f} s)",
        highlight=False,
    )

"""The one place command results are shown.

The core returns typed results (dataclasses with ``to_dict()`` where they have a
``--json`` form) and prints nothing; :mod:`sparkctl.cli` hands them to one of
these functions. Data goes to stdout (``console.out``): rich tables on a
terminal; piped into a log, plain aligned lines without colour or box; with
``--json``, JSON through :func:`emit`. What is said about a result (failures,
where the artifacts are, what to compare) goes to stderr, so ``sparkctl ...
--json | jq`` always gets clean JSON. Progress during a run stays with the run
(:func:`console.progress`).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click
from rich import box
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from sparkctl import console
from sparkctl.present import summary

if TYPE_CHECKING:
    from sparkctl.inventory import Inventory
    from sparkctl.model_plan import ModelPlan
    from sparkctl.model_store import Listing
    from sparkctl.playbook import PlaybookRun
    from sparkctl.report.model import Report
    from sparkctl.report.soak import Soak
    from sparkctl.runner import RunResult
    from sparkctl.serve.service import Verified
    from sparkctl.serve.up import JournalLines, Stopped, UpResult
    from sparkctl.serve.upgrade import UpgradeResult
    from sparkctl.serve.watch import Event
    from sparkctl.status import Status as StatusLook
    from sparkctl.trust import Result, TrustRun


def emit(result: Any) -> None:
    """``--json``: the result's ``to_dict()`` (or the data itself) on stdout."""
    data = result.to_dict() if hasattr(result, "to_dict") else result
    click.echo(json.dumps(data, indent=2, sort_keys=False))


def show(result: object) -> None:
    """A step of ``sparkctl up`` as the command of its own would show it."""
    from sparkctl.playbook import PlaybookRun  # noqa: PLC0415
    from sparkctl.serve.service import Verified  # noqa: PLC0415
    from sparkctl.serve.up import UpResult  # noqa: PLC0415
    from sparkctl.whole_job import Validated  # noqa: PLC0415

    if isinstance(result, PlaybookRun):
        provision(result)
    elif isinstance(result, Validated):
        summary.show(result.report)
    elif isinstance(result, UpResult):
        serve_up(result)
    elif isinstance(result, Verified):
        verified(result)
    else:
        raise TypeError(f"no presentation for {type(result).__name__}")


# --------------------------------------------------------------- inventory
def inventory_checked(inv: Inventory, risks: Sequence[str], *, as_json: bool = False) -> None:
    """``inventory check`` passed: the cluster, and every risk it accepts (on stderr with
    the OK line, so a script reading stdout sees nothing but --json)."""
    if as_json:
        emit(
            {
                "inventory": str(inv.path),
                "cluster": inv.cluster,
                "sparks": [node.name for node in inv.nodes],
                "switch": inv.switch.name if inv.switch else None,
                "accepted_risks": list(risks),
                "ok": True,
            }
        )
        return
    for line in risks:
        console.warn(line)
    console.progress(
        f"{inv.path}: cluster {inv.cluster}, {len(inv.nodes)} Sparks"
        f"{', switch ' + inv.switch.name if inv.switch else ''}: OK"
    )


# --------------------------------------------------------------- provision
def provision_table(result: RunResult, hosts: Sequence[str], *, terminal: bool = True) -> Table:
    """Per-host counts: a boxed table on a terminal, plain aligned lines in a log."""
    table = Table(
        title=f"{result.status} in {result.duration:.0f} s",
        box=box.HEAVY_HEAD if terminal else None,
        title_justify="center" if terminal else "left",
    )
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


def provision(provisioned: PlaybookRun, *, as_json: bool = False) -> None:
    """provision and model sync: per-host counts, then each failure and Ansible error."""
    result = provisioned.run
    if as_json:
        emit(provisioned)
    else:
        table = provision_table(result, provisioned.hosts, terminal=console.out.is_terminal)
        console.out.print(table)
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


def soak(result: Soak, run_dir: Path, *, as_json: bool = False) -> None:
    """validate --soak: soak.json with --json; else one line per round, the verdict."""
    if as_json:
        emit(result)
    else:
        collectives = list(result.verdict.size)
        table = Table(
            title=f"soak: {len(result.rounds)} rounds in {result.duration_s:.0f} s",
            box=box.HEAVY_HEAD if console.out.is_terminal else None,
            title_justify="center" if console.out.is_terminal else "left",
        )
        for col in ("round", "ended (s)", *(f"{c} GB/s" for c in collectives)):
            table.add_column(col, justify="right")
        for col in ("#wrong", "failed checks", "hottest"):
            table.add_column(col, justify="right" if col == "#wrong" else "left")
        for x in result.rounds:
            cells = [str(x.index), f"{x.ended_s:.0f}"]
            for name in collectives:
                run, size = x.run(name), result.verdict.size[name]
                cells.append(
                    f"{run.busbw[size]:.3f} {run.outcome}"
                    if run and size is not None and size in run.busbw
                    else "-"
                )
            temps = [(r.temperature_c, r.node) for r in x.nodes if r.temperature_c is not None]
            hottest = max(temps) if temps else None
            cells += [
                str(sum(r.wrong for r in x.nccl)),
                ", ".join(f"{c.host} {c.check}" for c in x.failed_checks[:4]) or "-",
                f"{hottest[1]} {hottest[0]:.0f} C" if hottest else "-",
            ]
            table.add_row(*(escape(c) for c in cells))
        console.out.print(table)
        v = result.verdict
        lines = [f"{v.outcome} over {len(result.rounds)} rounds"]
        lines += [f"  {p.kind}: {p.message}" for p in v.problems]
        lines += [f"  note: {n}" for n in v.notes]
        for i, line in enumerate(lines):
            style = ("green" if v.stable else "red") if i == 0 else None
            console.out.print(line, style=style, markup=False, highlight=False)
    console.progress(f"report: {run_dir / 'soak.html'} (and soak.json; not last-good)")


# --------------------------------------------------------------- serve
def verified(result: Verified, *, as_json: bool = False) -> None:
    if as_json:
        emit(result)
    else:
        summary.show(result.report)
    console.progress(f"report: {result.run_dir / 'report.html'}")


def serve_up(result: UpResult, *, to_stderr: bool = False) -> None:
    """``to_stderr``: after a report printed as JSON on stdout (validate --json
    --stop-serving), so stdout stays one JSON document."""
    out = console.err if to_stderr else console.out
    if result.already_serving:
        out.print(
            f"already serving {result.model_name} at {result.endpoints}: "
            "every rank running, /health 200 (--restart starts it again)",
            highlight=False,
        )
    elif result.ok:
        out.print(
            f"[green]serving[/green] {result.model_name}: {result.description} at "
            f"{result.endpoints} ({result.seconds:.0f} s)",
            highlight=False,
        )
    else:
        for line in result.explanation:
            console.err.print(line, markup=False, highlight=False)
    for line in result.gateway:
        out.print(line, markup=False, highlight=False)
    for note in result.nccl:
        out.print(
            f"warning: {note.text}" if note.warning else note.text,
            style="yellow" if note.warning else None,
            markup=False,
            highlight=False,
        )


def serve_down(result: Stopped, *, as_json: bool = False) -> None:
    """The units stopped; each leftover named with how it ended; each node's memory
    against serve up's reading (a node not back is also the error, on stderr)."""
    if as_json:
        emit(result)
        return
    console.out.print(f"stopped {result.unit} on {', '.join(result.nodes)}", highlight=False)
    for x in result.leftovers:
        console.out.print(f"left over: {x.name}: {x.ended}", markup=False, highlight=False)
    for b in result.memory:
        console.out.print(b.text(), style=None if b.ok else "red", markup=False, highlight=False)
    if result.not_back:
        for g in result.gpu:
            console.out.print(
                f"also holds the GPU (not the service's, left alone): {g.name}",
                markup=False,
                highlight=False,
            )


def serve_upgrade(result: UpgradeResult, *, as_json: bool = False) -> None:
    """Each group's upgrade: the versions, its downtime, each check of its gate, and
    the decision (a rollback's reason is also the error, on stderr)."""
    if as_json:
        emit(result)
        return
    say = console.out.print
    say(f"target {result.target}" + (": staged" if result.staged else ""), highlight=False)
    for g in result.groups:
        say(f"group {g.group} ({g.head}): was {g.before.describe()}", markup=False)
        if g.drained is not None:
            say(f"  drained in {g.drain_s:.1f} s" if g.drained else "  not drained", markup=False)
        if g.downtime_s is not None:
            say(f"  swapped: down {g.downtime_s:.1f} s (stop to ready)", markup=False)
        for c in g.checks:
            if c.outcome != "passed" or c.check in ("golden", "figures", "bounded_load", "latency"):
                subject = f" {c.subject}" if c.subject else ""
                say(
                    f"  {c.outcome:7} {c.check}{subject}: {c.message}",
                    style=None if c.ok else "red",
                    markup=False,
                    highlight=False,
                )
        verdict = {"keep": "upgraded", "rollback": "rolled back", "not-started": "not upgraded"}
        line = f"  {verdict.get(g.decision, g.decision)}: {g.reason}"
        if g.rolled_back:
            line += (
                f"; the previous version serves again (down {g.rollback_downtime_s or 0:.1f} s)"
                if g.rollback_ok
                else f"; rollback FAILED: {g.rollback_error}"
            )
        say(line, style=None if g.decision == "keep" else "red", markup=False, highlight=False)
    say(f"steps: {result.run_dir}/upgrade.json", markup=False, highlight=False)


def model_revisions(listing: Listing, *, as_json: bool = False) -> None:
    """Each node's revisions; after a prune, what went and what stayed, and why."""
    if as_json:
        emit(listing)
        return
    table = Table(box=box.SIMPLE if console.out.is_terminal else None)
    for col in ("node", "revision", "size", "state"):
        table.add_column(col)
    for r in listing.revisions:
        state = ", ".join(
            w
            for w, on in (
                ("serving", r.serving),
                ("previous", r.previous),
                ("verified", r.verified),
            )
            if on
        )
        table.add_row(r.node, escape(r.path), f"{r.size_bytes / 1048576:.1f} MiB", state)
    console.out.print(table)
    if listing.pruned:
        verb = "would remove" if listing.dry_run else "removed"
        for r in listing.removed:
            console.out.print(f"{verb}: {r.node} {r.path}", markup=False, highlight=False)
        for r, why in listing.kept:
            if not r.serving:
                console.out.print(f"kept: {r.node} {r.path}: {why}", markup=False, highlight=False)


def model_plan(plan: ModelPlan, *, as_json: bool = False) -> None:
    """The model, then a row per layout, the advice and what the plan cannot know."""
    if as_json:
        emit(plan)
        return
    d = plan.to_dict()
    m, mem = d["model"], d["memory"]
    params = f"{m['params'] / 1e9:.2f} B parameters, " if m["params"] else ""
    console.out.print(
        f"{m['where']}: {m.get('architecture', 'no config.json')}, {params}"
        f"{m['weight_gib']:.2f} GiB of weights (from the {m['bytes_from']}), context "
        f"{m['context'] or '?'}, KV cache {m['kv_cache_dtype']}",
        markup=False,
        highlight=False,
    )
    console.out.print(
        f"memory: {mem['mem_fraction_static']:g} of {mem['memory_gib']:g} GiB a node, at least "
        f"{mem['min_kv_cache_gib']:g} GiB of KV cache ({mem['source']})",
        markup=False,
        highlight=False,
    )
    table = Table(box=box.SIMPLE if console.out.is_terminal else None)
    for col in ("layout", "weights/rank", "KV/rank", "KV B/token", "KV tokens", "AR/token", "fits"):
        table.add_column(col)
    for x in d["layouts"]:
        mark = " (serving)" if x["name"] == plan.serving else ""
        table.add_row(
            x["name"] + mark,
            f"{x['weight_gib_per_rank']:.2f} GiB",
            f"{x['kv_pool_gib']:.2f} GiB",
            str(x["kv_bytes_per_token"] or "?"),
            str(x["kv_tokens"]),
            str(x["allreduces_per_token"]),
            "yes" if x["fits"] else "no",
        )
    console.out.print(table)
    for x in d["layouts"]:
        if not x["fits"]:
            console.out.print(
                f"{x['name']} does not fit: {'; '.join(x['problems'])}",
                markup=False,
                highlight=False,
            )
    console.out.print(f"advice: {plan.advice}", markup=False, highlight=False)
    for note in d["notes"]:
        console.out.print(f"note: {note}", markup=False, highlight=False)
    for what in d["unknowns"]:
        console.out.print(f"not known here: {what}", markup=False, highlight=False)


def _titled(title: str) -> Table:
    """A table with its title: boxed and centred on a terminal, plain otherwise."""
    return Table(
        title=title,
        box=box.SIMPLE if console.out.is_terminal else None,
        title_justify="center" if console.out.is_terminal else "left",
    )


def bench(report: dict[str, Any], run_dir: Path, *, as_json: bool = False) -> None:
    """A row per level (bench_serving's figures, the communication share), the pace-setter
    per level, the baseline's verdict; report.json with --json."""
    if as_json:
        emit(report)
    else:
        table = _titled(f"bench: {report['endpoint']['model']} via {report['endpoint']['via']}")
        cols = ("conc", "ok/sent", "tok/s", "req/s", "TTFT p50/p99 ms", "ITL p50/p99 ms")
        for col in (*cols, "E2E p50/p99 ms", "comm share"):
            table.add_column(col, justify="right")
        for x in report["levels"]:
            f = x["figures"]
            shares = list(x["comm"].values())
            table.add_row(
                str(x["concurrency"]),
                f"{f['completed']}/{f['requests']}",
                f"{f['output_tokens_per_s']:.1f}",
                f"{f['requests_per_s']:.2f}",
                f"{f['ttft_ms']['p50']:.0f}/{f['ttft_ms']['p99']:.0f}",
                f"{f['itl_ms']['p50']:.1f}/{f['itl_ms']['p99']:.1f}",
                f"{f['e2e_ms']['p50']:.0f}/{f['e2e_ms']['p99']:.0f}",
                f"{shares[0]['share']:.0%}" if shares else "-",
            )
        console.out.print(table)
        lines = []
        for x in report["levels"]:
            for name, c in x["comm"].items():
                group = f"group {name} " if len(x["comm"]) > 1 else ""
                lines.append(f"concurrency {x['concurrency']}: {group}{c['line']}")
            p = x["pace_setter"]
            if p:
                lines.append(
                    f"concurrency {x['concurrency']}: pace-setter {p['node']} ({p['subject']}): "
                    f"{p['message']}"
                )
        b = report.get("baseline")
        if b:
            worst = min(b["levels"], key=lambda r: r["change"], default=None)
            lines.append(
                f"baseline {b['run_id']}: "
                + (
                    f"tokens/s {worst['change']:+.1%} at concurrency {worst['concurrency']} "
                    f"(tolerance {b['tolerance']:.0%})"
                    if worst
                    else "no level in common"
                )
            )
        lines += [f"note: {n}" for n in report["notes"]]
        for line in lines:
            console.out.print(line, markup=False, highlight=False)
    console.progress(f"report: {run_dir / 'report.html'} (and report.json)")


def bench_layouts(report: dict[str, Any], run_dir: Path, *, as_json: bool = False) -> None:
    """A row per layout and level, side by side; the restore; report.json with --json."""
    if as_json:
        emit(report)
    else:
        table = _titled(f"bench --layouts: {report['cluster']}")
        table.add_column("layout")
        for col in ("conc", "tok/s", "req/s", "TTFT p50/p99 ms", "ITL p50 ms", "comm"):
            table.add_column(col, justify="right")
        lines = []
        for lay in report["layouts"]:
            if not lay.get("levels"):
                table.add_row(lay["name"], "-", "-", "-", "-", "-", "-")
                lines.append(f"{lay['name']}: not run: {lay.get('skipped') or 'stopped'}")
                continue
            for x in lay["levels"]:
                table.add_row(
                    lay["name"],
                    str(x["concurrency"]),
                    f"{x['output_tokens_per_s']:.1f}",
                    f"{x['requests_per_s']:.2f}",
                    f"{x['ttft_ms']['p50']:.0f}/{x['ttft_ms']['p99']:.0f}",
                    f"{x['itl_ms']['p50']:.1f}",
                    "-" if x["comm_share"] is None else f"{x['comm_share']:.0%}",
                )
                if x["errors"]:
                    lines.append(f"{lay['name']} c={x['concurrency']}: {x['errors']} errors")
                if x["pace_setter"]:
                    lines.append(
                        f"{lay['name']} c={x['concurrency']}: pace-setter {x['pace_setter']}"
                    )
        console.out.print(table)
        r = report["restored"]
        lines.append(f"model plan: {report['model']['advice']}")
        lines.append(
            f"restored: {r['layout']} ({r['seconds']:.0f} s)"
            if r["ok"]
            else f"restore FAILED: {r.get('message', '')}"
        )
        for line in lines:
            console.out.print(line, markup=False, highlight=False)
    console.progress(f"report: {run_dir / 'report.html'} (and report.json)")


_VERDICT_STYLE = {"healthy": "bold green", "degraded": "bold red", "unreachable": "bold red"}


def _num(value: float | None, fmt: str, unit: str = "") -> str:
    return "-" if value is None else f"{value:{fmt}}{unit}"


def status(st: StatusLook, *, as_json: bool = False, clear: bool = False) -> None:
    """sparkctl status: nodes, twins, service, endpoint, validate, drift, the verdict."""
    if as_json:
        emit(st)
        return
    out = console.out
    if clear:
        out.clear()
    nodes = Table(box=box.SIMPLE, title=f"{st.cluster} at {st.at}", title_justify="left")
    for col in ("node", "kernel", "GPU", "temp", "power", "SM clock", "util", "memory available"):
        nodes.add_column(col, justify="right" if col in ("temp", "power", "util") else "left")
    twins = Table(box=box.SIMPLE)
    for col in ("node", "twin", "state", "MTU", "speed", "since the last look"):
        twins.add_column(col)
    for n in st.nodes:
        if not n["reachable"]:
            nodes.add_row(n["node"], "[red]unreachable[/]", escape(n["error"][:60]))
            continue
        gpu = n.get("gpu")
        mem = n.get("mem_available")
        total = n.get("mem_total") or 0
        memory = (
            f"{mem / 2**30:.1f} of {total / 2**30:.1f} GiB"
            + (
                f" ({escape(n['mem_source'])})"
                if n.get("mem_source", "MemAvailable") != "MemAvailable"
                else ""
            )
            if mem is not None
            else "-"
        )
        nodes.add_row(
            n["node"],
            n["kernel"],
            escape(gpu["name"]) if gpu else f"[red]{escape(n['gpu_error'][:40])}[/]",
            _num(gpu and gpu["temperature_c"], ".0f", " C"),
            _num(gpu and gpu["power_w"], ".1f", " W"),
            _num(gpu and gpu["sm_clock_mhz"], ".0f", " MHz"),
            _num(gpu and gpu["utilization_pct"], ".0f", " %"),
            memory,
        )
        for link in n["links"]:
            grew = link.get("since_last_look")
            news = (
                "first look"
                if grew is None
                else ", ".join(f"{k} +{v}" for k, v in sorted(grew.items())) or "no errors"
            )
            state = link["operstate"]
            twins.add_row(
                n["node"],
                f"{link['twin']} {link['netdev']}",
                state if state == "up" else f"[red]{state}[/]",
                _num(link["mtu"], "d"),
                _num(link["speed_mbps"], "d", " Mb/s"),
                news,
            )
    out.print(nodes)
    out.print(twins)
    _status_service(st)
    _status_tail(st)


def _status_service(st: StatusLook) -> None:
    out = console.out
    ranks = Table(box=box.SIMPLE)
    for col in ("group", "rank", "node", "unit", "since", "restarts"):
        ranks.add_column(col)
    for g in st.groups:
        for r in g.ranks:
            state = r["state"]
            ranks.add_row(
                g.group,
                str(r["rank"]),
                r["node"],
                state if state == "active/running" else f"[red]{state}[/]",
                r["since"],
                "-"
                if r["restarts"] is None
                else str(r["restarts"])
                + (f" (+{r['restarts_since_last_look']})" if r["restarts_since_last_look"] else ""),
            )
    out.print(ranks)
    for g in st.groups:
        probe = (
            f"[green]answered[/] in {g.probe_s:.2f} s"
            if g.probe_ok
            else f"[red]failed[/] after {g.probe_s:.1f} s: {escape(g.probe_reason)}"
        )
        load = (
            f"{g.running:g} running, {g.queued:g} queued"
            if g.running is not None and g.queued is not None
            else "load unknown"
        )
        style = {"frozen": "bold red", "moving": "green"}.get(g.progress, "")
        progress = f"[{style}]{g.progress}[/]" if style else g.progress
        where = (
            ""
            if not g.gateway
            else "; in the gateway's rotation"
            if g.gateway == "ready"
            else f"; [red]{escape(g.gateway)}[/] in the gateway's rotation"
        )
        out.print(
            f"{g.endpoint}: one-token generation {probe}; {load}; generation {progress}{where}"
        )
    if st.gateway:
        state = f"[red]{escape(st.gateway_error)}[/]" if st.gateway_error else "answers"
        out.print(f"gateway {st.gateway}: {state}")


def _status_tail(st: StatusLook) -> None:
    out = console.out
    v = st.validate
    if v is not None:
        figures = "; ".join(
            f"{b['collective']} {b['busbw_gbytes']:.2f} GB/s"
            + (f" ({b['change']:+.0%} vs last-good)" if "change" in b else "")
            for b in v["busbw"]
        )
        age = v["age_s"]
        when = (
            f"{age // 86400} d"
            if age >= 86400
            else f"{age // 3600} h"
            if age >= 3600
            else f"{age // 60} min"
        )
        out.print(
            f"last validate {v['run_id']}: {v['verdict']}, {when} ago"
            + (f"; {figures}" if figures else ""),
            highlight=False,
        )
    for d in st.drift:
        out.print(f"[yellow]drift since last-good:[/] {escape(d)}")
    for note in st.notes:
        out.print(f"note: {escape(note)}", style="dim")
    for p in st.problems:
        out.print(f"[red]-[/] {escape(p)}")
    out.print(f"[{_VERDICT_STYLE[st.verdict]}]{st.verdict}[/] ({st.took_s:.1f} s)", highlight=False)


_WATCH_STYLE = {
    "healthy": "green",
    "suspect": "yellow",
    "restart_group": "bold red",
    "gave_up": "bold red",
    "stopped": "dim",
}


def watch_event(event: Event, *, as_json: bool = False) -> None:
    """serve watch: one line per event (its JSON line with --json), what was seen below it."""
    if as_json:
        click.echo(event.to_json())
        return
    style = _WATCH_STYLE.get(event.decision.value, "")
    head = f"{event.wall or f'{event.at:.0f}'} group {event.group}: "
    what = event.action if event.action not in ("none", "") else event.decision.value
    down = f" (down {event.downtime_s:.0f} s)" if event.downtime_s is not None else ""
    console.out.print(
        f"{escape(head)}[{style}]{escape(what)}[/{style}]{escape(down)}"
        + (f": {escape(event.reason)}" if event.reason else ""),
        highlight=False,
    )
    for line in event.seen:
        console.out.print(f"  {line}", markup=False, highlight=False)


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


# --------------------------------------------------------------- report nccl
def _exact(value: float) -> str:
    """A number as the log printed it: no exponent, no rounding (183338, 27211, 0.09)."""
    if value == int(value):
        return str(int(value))
    return f"{value:.6f}".rstrip("0").rstrip(".")


def nccl_log(report: Any, verdict: tuple[Any, Any] | None, failures: Sequence[str]) -> None:
    """report nccl: the log's rows as it printed them, its average, the gate's verdict."""
    version = f"nccl-tests {report.version}" if report.version else "version unknown"
    nccl = f", NCCL {', '.join(report.nccl_versions)}" if report.nccl_versions else ""
    table = Table(
        title=f"{report.collective or 'nccl-tests'} ({version}{nccl})",
        box=None,
        title_justify="left",
    )
    for col in (
        "bytes",
        "type",
        "op",
        "oop us",
        "oop GB/s",
        "oop wrong",
        "ip us",
        "ip GB/s",
        "ip wrong",
    ):
        table.add_column(col, justify="right", no_wrap=True)
    for r in report.rows:
        oop, ip = r.out_of_place, r.in_place
        table.add_row(
            str(r.size),
            r.type,
            r.redop,
            _exact(oop.time_us),
            _exact(oop.busbw),
            _wrong(oop),
            _exact(ip.time_us),
            _exact(ip.busbw),
            _wrong(ip),
        )
    console.out.print(table)
    console.out.print("oop/ip: out-of-place/in-place; GB/s: bus bandwidth")
    if report.ranks:
        console.out.print(
            f"{len(report.ranks)} ranks on {len(report.hosts)} host(s) "
            f"({', '.join(report.hosts)}), {len(report.devices)} GPU(s): "
            f"{', '.join(sorted({r.name for r in report.ranks}))}",
            markup=False,
            highlight=False,
        )
    oob = "not printed" if report.oob_values is None else str(report.oob_values)
    console.out.print(
        f"average bus bandwidth {_exact(report.avg_busbw)} GB/s; wrong results "
        f"{report.wrong}; out-of-bounds values {oob}",
        highlight=False,
    )
    for error in report.errors:
        console.err.print(f"failure line: {error}", markup=False, highlight=False)
    if verdict is not None:
        run, th = verdict
        threshold = th.threshold_for(run.collective)
        limit = "not gated" if threshold is None else f"threshold {threshold:.3f} GB/s"
        console.out.print(
            f"gate (line rate {th.line_rate_gbytes:g} GB/s, {limit}): "
            f"{run.outcome.replace('_', ' ').upper()}: {run.message}",
            markup=False,
            highlight=False,
        )
    if failures:
        console.out.print("FAILED: " + "; ".join(failures), markup=False, highlight=False)


def _wrong(half: Any) -> str:
    if half.wrong is not None:
        return str(half.wrong)
    return f"err {half.error:g}" if half.error is not None else "N/A"

"""One playbook run against a validated inventory, shared by every command that runs one.

provision, model sync, render, the plan and the whole job (``sparkctl up``) all run
their playbook through here: the inventory's lock, a results directory per run, the
facts cache of the cluster, live per-host progress, and the result with the one-line
failure the command exits with. The only ansible-runner caller stays
:mod:`sparkctl.runner`; the ``provision`` command itself is
:mod:`sparkctl.commands.provision`.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any

from rich.live import Live
from rich.table import Table

from sparkctl import console, inventory
from sparkctl.errors import ExitCode, SparkctlError
from sparkctl.lock import inventory_lock
from sparkctl.model_progress import transfer_progress
from sparkctl.paths import facts_dir, state_dir
from sparkctl.runner import Event, RunResult, run_playbook


def results_dir(cluster: str, command: str) -> Path:
    """A fresh directory for one run's artifacts: state/results/<cluster>/<time>-<command>."""
    stamp = time.strftime("%Y%m%d-%H%M%S")
    base = state_dir() / "results" / cluster
    path = base / f"{stamp}-{command}"
    n = 1
    while path.exists():
        n += 1
        path = base / f"{stamp}-{command}-{n}"
    return path


@dataclass
class _HostLine:
    task: str = ""
    ok: int = 0
    changed: int = 0
    failed: int = 0
    unreachable: int = 0


@dataclass
class Progress:
    """Live per-host progress on a terminal; plain lines otherwise."""

    hosts: list[str]
    live: Live | None = None
    lines: dict[str, _HostLine] = field(default_factory=dict)
    task: str = ""
    # host -> bytes and rate of a model transfer in progress (retry events).
    transfer: dict[str, str] = field(default_factory=dict)
    _printed: float = 0.0

    def __post_init__(self) -> None:
        self.lines = {h: _HostLine() for h in self.hosts}

    def __enter__(self) -> Progress:
        if console.err.is_terminal:
            self.live = Live(
                self._table(), console=console.err, refresh_per_second=8, transient=True
            )
            self.live.__enter__()
        return self

    def __exit__(
        self, et: type[BaseException] | None, ev: BaseException | None, tb: TracebackType | None
    ) -> None:
        if self.live is not None:
            self.live.__exit__(et, ev, tb)

    def _table(self) -> Table:
        table = Table(title=self.task or "starting", title_justify="left", expand=False)
        cols = ["host", "ok", "changed", "failed", "unreachable", "last task"]
        cols += ["transfer"] if self.transfer else []
        for col in cols:
            table.add_column(col)
        for host, line in self.lines.items():
            row = [
                host,
                str(line.ok),
                str(line.changed),
                str(line.failed),
                str(line.unreachable),
                line.task,
            ]
            table.add_row(*row, *([self.transfer.get(host, "")] if self.transfer else []))
        return table

    def _retry(self, event: Event) -> None:
        reading = transfer_progress(event.result)
        if not reading:
            return
        self.transfer.update(reading)
        if self.live is None and time.monotonic() - self._printed >= 5:
            self._printed = time.monotonic()
            for host, text in reading.items():
                console.progress(f"{host}: {text}")

    def __call__(self, event: Event) -> None:
        if event.kind == "task_start":
            self.task = event.task or ""
        elif event.kind == "retry":
            self._retry(event)
        elif event.host is not None:
            line = self.lines.setdefault(event.host, _HostLine())
            line.task = event.task or ""
            if event.kind in {"ok", "changed", "failed", "unreachable"}:
                setattr(line, event.kind, getattr(line, event.kind) + 1)
            if self.live is None and event.kind in {"changed", "failed", "unreachable"}:
                detail = f": {event.message}" if event.message else ""
                console.progress(f"{event.host}: {event.kind}: {event.task}{detail}")
        if self.live is not None:
            self.live.update(self._table())


def cluster_env(cluster: str) -> dict[str, str]:
    """Environment for Ansible runs against one cluster.

    Facts are cached per cluster: the lab and a real cluster both name their
    hosts spark1..4, and one must never be handed the other's facts.
    """
    return {"ANSIBLE_CACHE_PLUGIN_CONNECTION": str(facts_dir(cluster))}


def failure_message(result: RunResult, what: str) -> str:
    """One line: which hosts failed or could not be reached, and what was changed anyway."""
    unreachable = sorted(
        {f.host for f in result.failures if f.unreachable}
        | {h for h, s in result.stats.items() if s.unreachable}
    )
    failed = sorted({f.host for f in result.failures if not f.unreachable})
    changed = sorted(h for h, s in result.stats.items() if s.changed)
    if unreachable:
        # any_errors_fatal: the run stopped for every host at that task.
        done = (
            f"changed before it stopped: {', '.join(changed)}" if changed else "no host was changed"
        )
        return (
            f"{what} stopped for the whole cluster: {', '.join(unreachable)} did not "
            f"answer over SSH; {done} (artifacts in {result.artifact_dir})"
        )
    where = f" on {', '.join(failed)}" if failed else ""
    if not failed and result.errors:
        where = f": {result.errors[0][:300]}"
    return f"{what} failed{where} (artifacts in {result.artifact_dir})"


@dataclass
class PlaybookRun:
    """One playbook run through the runner: its result, the hosts it was for, the command.

    Returned, never printed: :mod:`sparkctl.present` shows it, :meth:`failure` is the
    error the command exits with (None when the run succeeded)."""

    run: RunResult
    hosts: list[str]
    command: str = "provision"

    @property
    def ok(self) -> bool:
        return self.run.ok

    def exit_code(self) -> ExitCode:
        return self.run.exit_code()

    def to_dict(self) -> dict[str, Any]:
        return self.run.to_dict()

    def failure(self) -> SparkctlError | None:
        if self.run.ok:
            return None
        return SparkctlError(
            failure_message(self.run, self.command.replace("-", " ")), self.run.exit_code()
        )


def run(
    inv: inventory.Inventory,
    *,
    limit: str | None = None,
    tags: Sequence[str] = (),
    skip_tags: Sequence[str] = (),
    check: bool = False,
    diff: bool = False,
    playbook: str = "site.yml",
    extravars: Mapping[str, Any] | None = None,
    command: str = "provision",
) -> PlaybookRun:
    """Lock the validated inventory's hosts, run ``playbook``, return its result."""
    hosts = [n.name for n in inv.nodes] + ([inv.switch.name] if inv.switch else [])
    out_dir = results_dir(inv.cluster, command)
    with inventory_lock(inv, command):
        console.progress(
            f"{command.replace('-', ' ')}: {inv.cluster} ({len(hosts)} hosts) with "
            f"{playbook}; artifacts: {out_dir}"
        )
        with Progress(hosts) as progress:
            result = run_playbook(
                playbook,
                inv.sources,
                results_dir=out_dir,
                hosts=len(inv.hostvars),
                limit=limit,
                tags=tags,
                skip_tags=skip_tags,
                check=check,
                diff=diff,
                extravars=extravars,
                on_event=progress,
                envvars=cluster_env(inv.cluster),
            )
    return PlaybookRun(result, hosts, command)

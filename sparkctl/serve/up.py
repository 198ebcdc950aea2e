"""`sparkctl serve up|down|status|logs`: start the TP group and watch it come up.

Workers start first, then the head (the unit files say so too): the head
serves the dist-init rendezvous, and workers retry until it answers. Every
rank's journal is followed over SSH while it starts; its lines move the rank
through the start-up phases (sparkctl.serve.startup) and are matched against the
known failure signatures. The wait ends when the head answers /health, when a
rank fails (its unit exits or a fatal signature appears), or at
``sglang_serve_timeout``; a failure names the rank, shows its last lines and
the fix, and stops every rank again, so that the restart policy does not
hammer a cluster that cannot start.

A cluster whose ranks all run is never restarted or stopped because the
controller does not get an answer: when a head's journal says it is ready (or
every rank already runs before serve up starts anything) and /health still
does not answer, serve up says the controller cannot reach the API, why it
likely cannot (sparkctl.serve.probe.reach_hints), and exits 3 (unreachable).
"""

from __future__ import annotations

import queue
import shlex
import subprocess
import threading
import time
from collections import deque
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from rich.live import Live
from rich.markup import escape
from rich.table import Table

from sparkctl import console, inventory, model_plan, nccl_parse, nccl_versions
from sparkctl.collection import tool_output
from sparkctl.errors import ExitCode, SparkctlError
from sparkctl.lock import inventory_lock
from sparkctl.serve import gateway, intent, memory, probe
from sparkctl.serve.cluster import Cluster, Group, open_cluster
from sparkctl.serve.memory import Back, Leftover
from sparkctl.serve.startup import reader as logs

POLL_S = 3.0
# Seconds the controller keeps asking /health after a head's journal said it is ready
# (and every rank's unit runs) before it says it cannot reach the API, instead of
# waiting out sglang_serve_timeout and blaming the ranks.
READY_GRACE_S = 30.0
UNREACHABLE = "unreachable"
# SGLang's ready line (sglang 0.5.17 srt/entrypoints/http_server.py, after the warm-up
# request; the start-up catalogue's Phase.READY marker, which tests/unit/test_serve_up.py
# holds it to).
READY_LINE = "The server is fired up and ready to roll!"
# Seconds a stopped unit's last journal lines get to arrive before it is explained.
SETTLE_S = 2.0
TAIL = 15


@dataclass
class Rank:
    """One rank as its journal shows it: phase, last lines, signatures."""

    node: str
    rank: int
    label: str = ""
    log: logs.RankLog = field(default_factory=logs.RankLog)
    since: float = field(default_factory=time.monotonic)  # when the phase last advanced
    lines: deque[str] = field(default_factory=lambda: deque(maxlen=TAIL))
    state: str = "starting"
    # RDMA expected (cluster_hw.rdma): NCCL's INFO lines must not show the Socket transport.
    rdma_expected: bool = False

    def __post_init__(self) -> None:
        self.log.rank = self.rank
        self.label = self.label or f"rank {self.rank} ({self.node})"

    @property
    def phase(self) -> logs.Phase:
        return self.log.progress

    @property
    def signatures(self) -> list[logs.Signature]:
        return self.log.signatures

    def feed(self, line: str) -> None:
        self.lines.append(line)
        before = self.log.progress
        self.log.feed(line)
        if self.log.progress != before:
            self.since = time.monotonic()
        # NCCL falling back to sockets starts and serves, at a fraction of the fabric's
        # speed: where RDMA is expected that is a failed start-up, said as such.
        sig = nccl_parse.transport_signature(
            self.log.transport if self.rdma_expected else None, rank=self.rank, line=line
        )
        if sig is not None and all(s.id != sig.id for s in self.log.signatures):
            self.log.signatures.append(sig)

    def ready(self) -> None:
        """The head answered /health: every rank is up, whatever its last line said."""
        self.log.progress = max(self.log.progress, logs.Phase.HTTP_READY)


class Followers:
    """``journalctl -f`` of the unit on every node, lines into one queue."""

    def __init__(self, cluster: Cluster) -> None:
        self.cluster = cluster
        self.lines: queue.Queue[tuple[str, str]] = queue.Queue()
        self.procs: list[subprocess.Popen[str]] = []

    def start(self) -> None:
        for node in self.cluster.nodes:
            cmd = (
                f"{self.cluster.sudo(node)}journalctl -u {shlex.quote(self.cluster.unit)} "
                "-o cat -f -n 0 --no-pager"
            )
            proc = subprocess.Popen(
                ["ssh", "-F", str(self.cluster.ssh_config), "--", node, cmd],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.DEVNULL,
                text=True,
            )
            self.procs.append(proc)
            threading.Thread(target=self._pump, args=(node, proc), daemon=True).start()
        time.sleep(1.0)  # journalctl is following before anything starts

    def _pump(self, node: str, proc: subprocess.Popen[str]) -> None:
        assert proc.stdout is not None  # noqa: S101 - Popen with stdout=PIPE
        for line in proc.stdout:
            self.lines.put((node, self.cluster.redact(line.rstrip("\n"))))

    def stop(self) -> None:
        for proc in self.procs:
            proc.terminate()
        for proc in self.procs:
            try:
                proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                proc.kill()


def _table(ranks: dict[str, Rank], started: float) -> Table:
    table = Table(
        box=None, title=f"serve up ({time.monotonic() - started:.0f} s)", title_justify="left"
    )
    for col in ("rank", "phase", "unit", "last line"):
        table.add_column(col, no_wrap=col != "last line", overflow="ellipsis")
    for r in ranks.values():
        last = r.lines[-1] if r.lines else ""
        table.add_row(r.label, r.phase.value, r.state, escape(last[-90:]))
    return table


@dataclass
class UpResult:
    """A start-up as it ended; what the CLI shows, and the error it exits with."""

    ok: bool
    seconds: float
    ranks: dict[str, Rank]
    message: str
    failed: list[str] = field(default_factory=list)
    # Filled in by :func:`up` for the presentation: what serves where, or why not.
    model_name: str = ""
    description: str = ""
    endpoints: str = ""
    explanation: list[str] = field(default_factory=list)
    run_dir: Path | None = None
    inventory_path: Path | None = None
    # The image's NCCL beside the host build validate measures (record_image_nccl).
    nccl: list[nccl_versions.Note] = field(default_factory=list)
    # Each group in the gateway's rotation (rotate_in), when there is a gateway.
    gateway: list[str] = field(default_factory=list)

    @property
    def already_serving(self) -> bool:
        return self.ok and self.message == "already serving"

    def failure(self) -> SparkctlError | None:
        if self.ok:
            return None
        if self.message == UNREACHABLE:
            return SparkctlError(
                f"serve up: every rank's unit is running, but this controller cannot reach "
                f"{self.endpoints or 'the API'}; nothing was restarted or stopped "
                f"(logs in {self.run_dir})",
                ExitCode.UNREACHABLE,
                hint=f"the reasons above; sparkctl serve status {self.inventory_path}",
            )
        names = ", ".join(self.ranks[n].label for n in self.failed)
        return SparkctlError(
            f"serve up failed: {names} {self.message}; every rank was "
            f"stopped again (logs in {self.run_dir})",
            ExitCode.CHECKS_FAILED,
            hint=f"sparkctl serve logs {self.inventory_path} NODE",
        )


@dataclass(frozen=True)
class Stopped:
    """serve down: the unit stopped on every node, each node's state after, its memory
    against serve up's reading, and what of the service was left and stopped
    (sparkctl.serve.memory)."""

    unit: str
    nodes: list[str]
    states: dict[str, str]
    memory: list[Back] = field(default_factory=list)
    leftovers: list[Leftover] = field(default_factory=list)
    gpu: list[Leftover] = field(default_factory=list)  # other holders, left alone

    @property
    def not_back(self) -> list[Back]:
        return [b for b in self.memory if not b.ok]

    def failure(self) -> SparkctlError | None:
        """Exit 1 naming each node whose memory is not back (with the numbers) and each
        leftover that would not stop."""
        stuck = [x for x in self.leftovers if not x.gone]
        if not self.not_back and not stuck:
            return None
        what = [b.text() for b in self.not_back] + [f"{x.name} {x.ended}" for x in stuck]
        others = "; ".join(g.name for g in self.gpu)
        return SparkctlError(
            "serve down: " + "; ".join(what),
            ExitCode.CHECKS_FAILED,
            hint=f"other processes holding the GPU: {others}"
            if others
            else "what holds the memory: ps -eo pid,rss,args --sort -rss on the node",
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "unit": self.unit,
            "nodes": list(self.nodes),
            "states": dict(self.states),
            "memory": [b.to_dict() for b in self.memory],
            "leftovers": [x.to_dict() for x in self.leftovers],
            "gpu_holders": [g.to_dict() for g in self.gpu],
            "ok": self.failure() is None,
        }


@dataclass(frozen=True)
class JournalLines:
    """Lines of one node's journal (``label`` heads a node's block; None when following)."""

    label: str | None
    text: str


def start_units(cluster: Cluster) -> None:
    """Every group's workers first, then the heads; a unit left failed is reset."""
    unit = shlex.quote(cluster.unit)
    for group in (cluster.workers, cluster.heads):
        if not group:
            continue
        results = cluster.each(
            group,
            f"{{sudo}}systemctl reset-failed {unit} 2>/dev/null; {{sudo}}systemctl restart {unit}",
            60,
        )
        bad = {n: out for n, (rc, out) in results.items() if rc != 0}
        if bad:
            node, out = next(iter(bad.items()))
            raise SparkctlError(
                f"{node}: systemctl restart {cluster.unit} failed: {out.strip()[-300:]}",
                ExitCode.CHECKS_FAILED,
                hint="provision installs the unit (role sglang)",
            )


# How long a rank of a group the watchdog judged broken gets to stop on SIGTERM before
# it is killed (stop_units' ``grace_s``). The unit's own stop grants 60 s (docker stop
# --time 60, TimeoutStopSec=90) for a clean shutdown; a hung rank never answers it (a
# rank stopped or stuck in a collective keeps SIGTERM pending), and each second of it
# is a second the group does not serve.
BROKEN_GRACE_S = 10


def stop_command(cluster: Cluster, node: str, grace_s: int | None = None) -> str:
    """``node``'s stop: ``systemctl stop`` (the unit's own grace), or with ``grace_s``
    SIGTERM for that long, then SIGKILL: ``docker stop --time`` on the container (the
    unit's process is the docker CLI, the rank lives under the engine), ``systemctl
    kill`` on a venv unit, whose processes are its own. The unit's stop then finds
    nothing left to wait for."""
    unit = shlex.quote(cluster.unit)
    stop = f"{{sudo}}systemctl stop {unit}"
    if grace_s is None:
        return stop
    s = cluster.sglang(node)
    if s.install_method == "container":
        engine, name = shlex.quote(s.engine), shlex.quote(s.container_name)
        return f"{{sudo}}{engine} stop --time {int(grace_s)} {name} >/dev/null 2>&1; {stop}"
    return (
        f"{{sudo}}timeout {int(grace_s)} systemctl stop {unit} || "
        f"{{sudo}}systemctl kill --signal=SIGKILL {unit}; {stop}"
    )


def stop_units(cluster: Cluster, grace_s: int | None = None) -> dict[str, tuple[int, str]]:
    """The heads first (no new requests), then the workers; with ``grace_s``, each rank
    killed after that long on SIGTERM (:func:`stop_command`)."""
    out = cluster.each_own({n: stop_command(cluster, n, grace_s) for n in cluster.heads}, 120)
    if cluster.workers:
        out |= cluster.each_own(
            {n: stop_command(cluster, n, grace_s) for n in cluster.workers}, 120
        )
    return out


class Waiter:
    """One start-up being watched: journal lines, unit states, the head's /health."""

    def __init__(self, cluster: Cluster, followers: Followers, timeout: float) -> None:
        self.cluster, self.followers, self.timeout = cluster, followers, timeout
        rdma = cluster.sglang().rdma_expected
        self.ranks = {
            n: Rank(n, cluster.rank(n), cluster.label(n), rdma_expected=rdma) for n in cluster.nodes
        }
        self.started = time.monotonic()
        self.next_poll = 0.0
        self.shown: dict[str, logs.Phase] = {}
        self.states: dict[str, dict[str, str]] = {}
        self.answers: dict[str, probe.Health] = {}
        self.ready_since = 0.0  # when the heads' journals said ready and /health did not

    def drain(self) -> None:
        try:
            while True:
                node, line = self.followers.lines.get(timeout=0.2)
                self.ranks[node].feed(line)
        except queue.Empty:
            pass

    def report_phases(self) -> None:
        """Without a terminal: one line per phase change."""
        for r in self.ranks.values():
            if self.shown.get(r.node) != r.phase:
                console.progress(f"{r.label}: {r.phase.value}")
                self.shown[r.node] = r.phase

    def poll(self) -> UpResult | None:
        states = self.cluster.unit_states()
        self.states = states
        for node, st in states.items():
            self.ranks[node].state = f"{st.get('ActiveState')}/{st.get('SubState')}"
        dead = [
            n
            for n, st in states.items()
            if st.get("ActiveState") in ("failed", "inactive")
            or st.get("SubState") == "auto-restart"
        ]
        if dead:
            # The unit's state can be read before its last lines (the reason it stopped)
            # have come through journalctl -f and ssh: give them a moment.
            settle = time.monotonic() + SETTLE_S
            while time.monotonic() < settle:
                self.drain()
            return self.result(False, "a rank's unit stopped", dead)
        answers = {g.head: probe.health(g.base_url, g.tls_ca_file) for g in self.cluster.groups()}
        if all(h.ok for h in answers.values()):
            for r in self.ranks.values():
                r.ready()
            return self.result(True, "ready", [])
        self.answers = answers
        if self.heads_said_ready():
            self.ready_since = self.ready_since or time.monotonic()
            if time.monotonic() - self.ready_since >= READY_GRACE_S:
                return self.unreachable()
        return None

    def heads_said_ready(self) -> bool:
        """Every rank's unit running, and every head that does not answer said in its
        journal that it is ready: the server serves, the controller does not reach it."""
        running = all(
            st.get("ActiveState") == "active" and st.get("SubState") == "running"
            for st in self.states.values()
        )
        silent = [n for n, h in self.answers.items() if not h.ok]
        return (
            running
            and bool(silent)
            and all(self.ranks[n].phase >= logs.Phase.READY for n in silent)
        )

    def unreachable(self) -> UpResult:
        groups = [g for g in self.cluster.groups() if not self.answers[g.head].ok]
        lines = unreachable_explanation(
            groups, self.answers, {g.head: logs.Phase.READY for g in groups}
        )
        result = self.result(False, UNREACHABLE, [g.head for g in groups])
        return replace(result, explanation=lines)

    def step(self) -> UpResult | None:
        self.drain()
        fatal = [r.node for r in self.ranks.values() if any(s.fatal for s in r.signatures)]
        if fatal:
            return self.result(False, "a rank failed", fatal)
        now = time.monotonic()
        if now >= self.next_poll:
            self.next_poll = now + POLL_S
            done = self.poll()
            if done is not None:
                return done
        if now - self.started > self.timeout:
            if self.heads_said_ready():
                return self.unreachable()
            return self.result(False, "timed out", self.laggards())
        return None

    def laggards(self) -> list[str]:
        """The ranks that got least far; SGLANG_HOST_IP read from the processes themselves
        where every rank waits after NCCL init (the message-queue hang shows in no log)."""
        wrong = wrong_host_ip(self.cluster)
        if wrong:
            for node, text in wrong.items():
                self.ranks[node].lines.append(f"sparkctl: {text}")
            return list(wrong)
        low = min(r.phase for r in self.ranks.values())
        return [r.node for r in self.ranks.values() if r.phase == low]

    def result(self, ok: bool, message: str, failed: list[str]) -> UpResult:
        return UpResult(ok, time.monotonic() - self.started, self.ranks, message, failed)


def server_env_command(cluster: Cluster) -> str:
    """How to read the server's own environment on a node: the container's (docker hands it
    only -e/--env-file variables; the unit's MainPID is the docker CLI), or the venv unit's
    process. ``{sudo}`` is each node's prefix for root (:meth:`Cluster.each`)."""
    s = cluster.sglang()
    if s.install_method == "container":
        fmt = shlex.quote("{{json .Config.Env}}")
        return (
            f"{{sudo}}{shlex.quote(s.engine)} inspect --format {fmt} "
            f"{shlex.quote(s.container_name)}"
        )
    unit = shlex.quote(cluster.unit)
    return f"pid=$(systemctl show -p MainPID --value {unit}); {{sudo}}cat /proc/$pid/environ"


def wrong_host_ip(cluster: Cluster) -> dict[str, str]:
    """Ranks whose running server has an SGLANG_HOST_IP other than their fabric address."""
    out = {}
    for node, (rc, text) in cluster.each(cluster.nodes, server_env_command(cluster), 30).items():
        want = cluster.plan.node(node).fabric_a_ip
        try:
            seen = tool_output.environ(text).get("SGLANG_HOST_IP", "") if rc == 0 else ""
        except ValueError:
            continue
        if rc == 0 and seen != want:
            out[node] = (
                f"its process runs with SGLANG_HOST_IP={seen or '(empty)'}, not its "
                f"fabric address {want}"
            )
    return out


def wait_up(cluster: Cluster, followers: Followers, timeout: float) -> UpResult:
    waiter = Waiter(cluster, followers, timeout)
    if not console.err.is_terminal:
        while (done := waiter.step()) is None:
            waiter.report_phases()
        waiter.report_phases()
        return done
    with Live(
        _table(waiter.ranks, waiter.started),
        console=console.err,
        transient=True,
        refresh_per_second=4,
    ) as live:
        while (done := waiter.step()) is None:
            live.update(_table(waiter.ranks, waiter.started))
    return done


def explain(result: UpResult, timeout: float) -> list[str]:
    """What to tell the user about a failed start-up: rank, last lines, signature and fix."""
    out = []
    for node in result.failed:
        r = result.ranks[node]
        # Fatal signatures; passing warnings ("still retrying") only when nothing else fits.
        sigs = [s for s in r.signatures if s.fatal]
        if result.message == "timed out":
            if any(
                ln.startswith("sparkctl: its process runs with SGLANG_HOST_IP") for ln in r.lines
            ):
                # Seen in the process itself, whatever the log: the message-queue hang.
                hang: logs.Signature | None = replace(logs.SIGNATURES["host_ip_hang"], rank=r.rank)
            else:
                hang = logs.hang_signature(r.phase, time.monotonic() - r.since, rank=r.rank)
            if hang is not None and hang.id not in {s.id for s in sigs}:
                sigs.append(hang)
        sigs = sigs or list(r.signatures)
        out.append(
            f"{r.label} {result.message} in phase {r.phase.value} (unit {r.state}); its last lines:"
        )
        out += [f"    {line}" for line in list(r.lines)[-8:]] or ["    (no log lines)"]
        for s in sigs:
            out.append(f"  {s.title}: {s.explanation}")
            out.append(f"  fix: {s.fix}")
    return out


def _describe(cluster: Cluster) -> str:
    groups = cluster.groups()
    parts = [
        f"TP={g.sglang().tp_size} over {len(g.members)} node(s), head {g.head}"
        + (f" (group {g.name})" if len(groups) > 1 else "")
        for g in groups
    ]
    return "; ".join(parts)


def _endpoints(cluster: Cluster) -> str:
    return ", ".join(f"{g.base_url}/v1" for g in cluster.groups())


def head_journal_phase(cluster: Cluster, heads: list[str]) -> dict[str, logs.Phase]:
    """How far each head's running server got, by its journal since its unit started
    (this invocation's lines only, _SYSTEMD_INVOCATION_ID, systemd.journal-fields(7)):
    READY when it printed SGLang's ready line, else the furthest phase of its last lines."""
    unit = shlex.quote(cluster.unit)
    cmd = (
        f"id=$(systemctl show -p InvocationID --value {unit}); "
        '[ -n "$id" ] || exit 3; '
        f'{{sudo}}journalctl _SYSTEMD_INVOCATION_ID="$id" -o cat --no-pager -n 400; '
        f'{{sudo}}journalctl _SYSTEMD_INVOCATION_ID="$id" -o cat --no-pager '
        f"| grep -m 1 -F {shlex.quote(READY_LINE)}; true"
    )
    out = {}
    for node, (rc, text) in cluster.each(heads, cmd, 60).items():
        out[node] = logs.furthest_phase(text.splitlines()) if rc == 0 else logs.Phase.STARTING
    return out


def unreachable_explanation(
    groups: list[Group], answers: Mapping[str, probe.Health], phases: Mapping[str, logs.Phase]
) -> list[str]:
    """Why the controller does not reach the API of ``groups`` although their ranks run:
    what /health answered, how far the head's journal got, and what on the controller's
    side likely stands in the way (:func:`sparkctl.serve.probe.reach_hints`)."""
    lines = []
    for g in groups:
        head = g.cluster.label(g.head)
        phase = phases.get(g.head, logs.Phase.STARTING)
        said = (
            "its journal says the server is fired up and ready"
            if phase >= logs.Phase.READY
            else f"its journal shows phase {phase.value} since the unit started, not ready yet"
        )
        lines.append(f"{head}: every rank's unit is running and {said}; {answers[g.head]}")
        if phase < logs.Phase.READY:
            lines.append(
                "  if it is still starting, run serve up again later (--restart starts it anew)"
            )
        hints = probe.reach_hints(g.base_url, g.sglang().api_allowed_cidrs)
        lines += [f"  likely: {h}" for h in hints] or [
            "  likely: a firewall or NAT between this controller and the head"
        ]
    return lines


def serving_now(cluster: Cluster) -> UpResult | None:
    """What already runs, before anything is started. None: not every rank's unit runs
    (start them). "already serving": they run and every head answers /health. When they
    all run but a head does not answer, nothing is (re)started: a start-up in progress
    or a controller that cannot reach the API is no reason to stop a serving cluster;
    the result says which, and why the controller may not reach it."""
    states = cluster.unit_states()
    running = all(
        st.get("ActiveState") == "active" and st.get("SubState") == "running"
        for st in states.values()
    )
    if not running:
        return None
    answers = {g.head: probe.health(g.base_url, g.tls_ca_file) for g in cluster.groups()}
    if all(h.ok for h in answers.values()):
        return UpResult(True, 0.0, {}, "already serving")
    groups = [g for g in cluster.groups() if not answers[g.head].ok]
    phases = head_journal_phase(cluster, [g.head for g in groups])
    ranks = {g.head: Rank(g.head, cluster.rank(g.head), cluster.label(g.head)) for g in groups}
    for node, rank in ranks.items():
        rank.log.progress = phases[node]
        rank.state = f"{states[node].get('ActiveState')}/{states[node].get('SubState')}"
    return UpResult(
        False,
        0.0,
        ranks,
        UNREACHABLE,
        list(ranks),
        explanation=unreachable_explanation(groups, answers, phases),
    )


def up(
    inv: inventory.Inventory,
    *,
    timeout: float | None = None,
    restart: bool = False,
    extravars: Mapping[str, Any] | None = None,
) -> UpResult:
    """Start every rank and wait; a failed start-up is explained and every rank stopped."""
    with inventory_lock(inv, "serve up"):
        cluster = open_cluster(inv, "serve-up", extravars)
        intent.record(inv.cluster, serving=True, by="serve up")
        limit = float(timeout or cluster.sglang().serve_timeout)
        if not restart and (now := serving_now(cluster)) is not None:
            if now.ok:  # serving: the gateway may have restarted since and lost them
                now = replace(now, gateway=rotate_in(cluster, limit))
            return _about(now, cluster)
        # A model that cannot fit its groups is refused before anything stops or starts,
        # with model plan's figures (module_utils/model_memory.py), not after SGLang has
        # loaded the weights (or the OOM killer has ended a rank).
        model_plan.refusal(cluster)
        # (Re)started groups leave the gateway first: no request goes to a rank going down.
        rotate_out(cluster, cluster.groups())
        # Every rank that still runs stops first, heads first: a worker restarted while
        # its old head lives joins that head's rendezvous, which the head's own restart
        # then closes under it ("Failed to recv, got 0 bytes": torch's TCPStore client
        # does not retry that). Seen in the lab after the firewall's restart had
        # restarted the head alone (BindsTo=).
        running = running_nodes(cluster)
        if running:
            stop_units(cluster)
            running = running_nodes(cluster)
        # Before any rank starts: no leftover of an earlier run holds a node's memory,
        # and each idle node's memory is kept for serve down to compare with.
        memory.before_start(cluster, running)
        check_model_visible(cluster)
        console.progress(f"serve up: {_describe(cluster)}, waiting up to {limit:.0f} s")
        followers = Followers(cluster)
        followers.start()
        try:
            start_units(cluster)
            result = wait_up(cluster, followers, limit)
        finally:
            followers.stop()
        _save_logs(cluster, result)
        result = record_image_nccl(cluster, result)
        if result.message == UNREACHABLE:
            return _about(result, cluster)  # the ranks serve: nothing to stop
        if not result.ok:
            lines = explain(result, limit)
            stop_units(cluster, BROKEN_GRACE_S)  # ranks that never served: no clean stop due
            return replace(_about(result, cluster), explanation=lines)
        result = replace(result, gateway=rotate_in(cluster, limit))
    return replace(_about(result, cluster), description=_describe(cluster))


def rotate_in(cluster: Cluster, timeout: float) -> list[str]:
    """Every group's head in the gateway's rotation, registered again unless it is ready
    there (the gateway keeps its workers in memory: a restart of it, or a group that
    was failed there, needs it). A line a group for the presentation; SparkctlError
    when the gateway does not take a serving group (its ranks keep serving)."""
    gw = cluster.gateway()
    if gw is None:
        return []
    lines = []
    for g in cluster.groups():
        try:
            _, took = gateway.join(gw, g.base_url, timeout)
        except SparkctlError as exc:
            raise SparkctlError(
                f"serve up: group {g.name} serves at {g.base_url}, but the gateway does not "
                f"route to it: {exc.message}",
                exc.code,
                hint=exc.hint,
            ) from None
        when = "already" if took == 0 else f"in {took:.0f} s"
        lines.append(f"group {g.name} ({g.head}) in the gateway's rotation {when}")
    return lines


def rotate_out(cluster: Cluster, groups: list[Group], timeout: float = 60.0) -> list[str]:
    """``groups`` out of the gateway's rotation before their ranks stop: no new request
    goes to them. The gateway unreachable is said, not raised: a stop must not wait
    for it."""
    gw = cluster.gateway()
    if gw is None:
        return []
    out = []
    for g in groups:
        try:
            if gateway.leave(gw, g.base_url, timeout):
                out.append(f"group {g.name} ({g.head}) out of the gateway's rotation")
        except SparkctlError as exc:
            console.warn(f"gateway: group {g.name} not taken out: {exc.message}")
    return out


def _about(result: UpResult, cluster: Cluster) -> UpResult:
    """The result with what its presentation names: model, endpoints, logs, inventory."""
    return replace(
        result,
        model_name=cluster.model_name,
        endpoints=_endpoints(cluster),
        run_dir=cluster.run_dir,
        inventory_path=cluster.inv.path,
    )


def _inside(path: str, mounts: list[str]) -> bool:
    return any(path == m.rstrip("/") or path.startswith(m.rstrip("/") + "/") for m in mounts)


def check_model_visible(cluster: Cluster) -> None:
    """Every node's model path resolves inside what its server's container mounts.

    A container sees nothing of the host but its mounts: a model link that points out of
    them (e.g. at the head's own copy, read in place with model_cache_source head, after a
    provision that did not know that source) fails every rank with "Repo id must be in the
    form ..." only once SGLang starts. The mounts are the unit's own, as systemd has loaded
    it on the node (a venv unit runs on the host and sees everything)."""
    path = cluster.sglang().model_path
    cmd = (
        f"systemctl show -p ExecStart --value {shlex.quote(cluster.unit)}; echo @@; "
        f"readlink -f -- {shlex.quote(path)}"
    )
    outside = {}
    for node, (rc, out) in cluster.each(cluster.nodes, cmd, 30).items():
        execstart, _, target = out.partition("@@")
        try:
            argv = tool_output.execstart_argv(execstart)
        except tool_output.ToolOutputError:
            argv = []  # the unit is not loaded: nothing to compare
        target = target.strip()
        if rc != 0 or not target or "run" not in argv[:3]:
            continue  # no model yet, or not a container
        # same-path binds only: the link's target is an absolute host path
        mounts = [src for src, dst in tool_output.docker_run_mounts(argv) if src == dst]
        if not _inside(target, mounts):
            outside[node] = (target, mounts)
    if outside:
        where = "; ".join(
            f"{node}: {path} -> {target} (mounted: {', '.join(mounts)})"
            for node, (target, mounts) in outside.items()
        )
        raise SparkctlError(
            f"the model is outside what the server's container sees: {where}",
            ExitCode.CHECKS_FAILED,
            hint="provision with the same model source as model sync (e.g. -e "
            "model_cache_source=head -e model_cache_head_dir=DIR), or add the directory "
            "to sglang_model_mounts, then sparkctl provision",
        )


def record_image_nccl(cluster: Cluster, result: UpResult) -> UpResult:
    """The NCCL each rank's process loaded (the image's own, from NCCL's INFO banner in its
    journal), kept with the cluster's serve state and set beside the host build validate
    measures (the nccl role's record on the head, as validate reads it)."""
    seen = {node: r.log.nccl for node, r in result.ranks.items() if r.log.nccl}
    if not seen:
        return result
    head = cluster.nodes[0]
    record = shlex.quote(cluster.plan.node(head).nccl.version_file)
    rc, text = cluster.each([head], f"cat {record}", 30).get(head, (1, ""))
    try:
        host = tool_output.env_file(text).get("NCCL_VERSION") if rc == 0 else None
    except tool_output.ToolOutputError:
        host = None
    saved = nccl_versions.save(cluster.inv.cluster, seen, cluster.run_dir)
    host = None if host in (None, "", "none") else host
    return replace(result, nccl=nccl_versions.compare(saved.versions, host))


def _save_logs(cluster: Cluster, result: UpResult) -> None:
    for node, r in result.ranks.items():
        (cluster.run_dir / f"rank{r.rank}-{node}.log").write_text("\n".join(r.lines) + "\n")


def running_nodes(cluster: Cluster) -> list[str]:
    """The nodes whose unit runs (or starts or stops): their processes are the unit's."""
    return [
        n
        for n, st in cluster.unit_states().items()
        if st.get("ActiveState") in ("active", "activating", "deactivating", "reloading")
    ]


def down(inv: inventory.Inventory) -> Stopped:
    """Stop every rank, then prove the stop: nothing of the service left on any node
    (leftovers named and stopped) and every node's memory back (sparkctl.serve.memory)."""
    with inventory_lock(inv, "serve down"):
        cluster = open_cluster(inv, "serve-down")
        # Before the stop: a watchdog round in between must not start the group again.
        intent.record(inv.cluster, serving=False, by="serve down")
        rotate_out(cluster, cluster.groups())
        stop_units(cluster)
        states = cluster.unit_states()
        still = {
            n: st["ActiveState"]
            for n, st in states.items()
            if st["ActiveState"] not in ("inactive", "failed")
        }
        if still:
            raise SparkctlError(
                "still running after stop: " + ", ".join(f"{n} ({s})" for n, s in still.items()),
                ExitCode.CHECKS_FAILED,
            )
        freed = memory.free(cluster)
    return Stopped(
        cluster.unit,
        list(cluster.nodes),
        {n: st["ActiveState"] for n, st in states.items()},
        freed.memory,
        freed.leftovers,
        freed.gpu,
    )


def journal(
    inv: inventory.Inventory, node: str | None, lines: int, follow: bool
) -> Iterator[JournalLines]:
    """The unit's journal on NODE (default: every node, rank order), redacted; ``follow``
    (one node only) yields each line as it comes."""
    cluster = open_cluster(inv, "serve-logs")
    nodes = [cluster.inv.node(node).name] if node else cluster.nodes
    for n in nodes:
        cmd = (
            f"{cluster.sudo(n)}journalctl -u {shlex.quote(cluster.unit)} -n {int(lines)} "
            f"--no-pager -o short-iso" + (" -f" if follow and len(nodes) == 1 else "")
        )
        if follow and len(nodes) == 1:
            with subprocess.Popen(
                ["ssh", "-F", str(cluster.ssh_config), "--", n, cmd],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                text=True,
            ) as proc:
                assert proc.stdout is not None  # noqa: S101 - Popen with stdout=PIPE
                for line in proc.stdout:
                    yield JournalLines(None, cluster.redact(line.rstrip("\n")))
            return
        rc, out = cluster.run(n, cmd, 60)
        yield JournalLines(
            cluster.label(n),
            cluster.redact(out.rstrip() if rc == 0 else f"(journalctl rc {rc}: {out.strip()})"),
        )

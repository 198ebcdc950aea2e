"""serve up and down: each node's memory before the start, and proof that a stop gave it back.

A stop that leaves the memory taken keeps the next model from starting
(spark-arena/sparkrun #223). On a GB10 the GPU's memory is the machine's RAM,
so "the memory came back" is read from the kernel, per node:

- **The reading is MemAvailable** (``/proc/meminfo``), not MemFree and not what
  CUDA calls free: on GB10 ``cudaMemGetInfo``'s free figure tracks MemFree, which
  counts the page cache as used; writing a 60 GB file dropped it from 103 to
  41 GiB while MemAvailable stayed at 115.8 GiB (unslothai/unsloth PR #10705).
  A stopped server leaves its weights in the page cache, which the kernel hands
  back on demand: MemFree would call that held, MemAvailable does not. Where a
  memory cgroup of the session leaves less (a lab node is a container with a
  limit of its own, its /proc/meminfo the host's), its headroom is the reading, as
  validate reads it (:func:`sparkctl.tool_output.memory_cgroup`).
- **serve up** keeps each node's reading before it starts any rank
  (``serve-memory.json`` beside validate's ``last-good``). A node whose unit
  already runs (``--restart``) keeps the reading it had before that start.
- **serve down**, after the units stopped, looks for what of the service is
  left (:func:`survey`): the container by its name (``docker ps -a``), and any
  process whose command line is the service's: Python running the unit's launcher
  (roles/sglang/vars/main.yml ``_sglang_launcher_path``; not when it runs the gateway,
  ``--module smg.launch_router``, which holds no model) or ``-m
  sglang.launch_server`` (what the launcher runs, ``MODULE`` in
  roles/sglang/files/sglang_launcher.py), or SGLang's own process titles
  ``sglang::scheduler...``/``sglang::detokenizer`` (setproctitle in sglang's
  ``srt/managers/scheduler.py`` and ``detokenizer_manager.py``: the processes that
  hold the weights and the KV cache). Each is named (node, pid, command) and
  stopped: SIGTERM, then SIGKILL after :data:`TERM_GRACE_S`; a container is
  stopped and removed by its engine. Then every node's memory must be back
  within :func:`tolerance` of the reading serve up kept.
- **The tolerance** is max(2 GiB, 5 % of the node's memory): other processes
  come and go between a start and a stop (and the kernel's estimate of
  reclaimable cache moves), while a leftover rank holds its share of the
  weights plus the KV cache (``--mem-fraction-static`` of the node), tens of GiB
  on a Spark.
- **Other holders of the GPU** (a process with ``/dev/nvidia*`` open, found by
  reading the links in ``/proc/PID/fd`` as root: ``find`` is on every node, where
  ``fuser`` needs psmisc) are named but never stopped: on DGX OS the display
  server and the desktop hold the GPU too, and they are not the service's.
- **serve up** refuses to start on a node where a leftover of the service
  still runs (before any rank starts): ``sparkctl serve down`` clears it.
"""

from __future__ import annotations

import json
import shlex
import time
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sparkctl.collection import tool_output
from sparkctl.errors import ExitCode, SparkctlError
from sparkctl.paths import state_dir, write_atomic

if TYPE_CHECKING:
    from sparkctl.serve.cluster import Cluster

GiB = 1 << 30
TOLERANCE_FLOOR = 2 * GiB
TOLERANCE_FRACTION = 0.05
# Seconds a leftover gets after SIGTERM before SIGKILL (a container: docker stop --time).
TERM_GRACE_S = 20
# Seconds serve down keeps reading a node whose memory is not back yet after its
# leftovers are gone (the driver frees a large allocation as the process exits).
SETTLE_S = 20.0
SETTLE_POLL_S = 2.0

# What the unit runs (roles/sglang/vars/main.yml _sglang_launcher_path, and the module
# the launcher runs, roles/sglang/files/sglang_launcher.py MODULE), and SGLang's own
# process titles; tests/unit/test_serve_memory.py holds these to the role's files.
LAUNCHER = "/usr/local/lib/sparkctl/sglang-launcher.py"
MODULE = "sglang.launch_server"
TITLE = "sglang::"
MEMINFO = "/proc/meminfo"

_MARK = "@@sparkctl-memory@@"
_RUNNING = ("running", "paused", "restarting")


# ------------------------------------------------------------------ readings
@dataclass(frozen=True)
class Memory:
    """One node's memory: what is available and of how much (bytes), and from where."""

    available: int
    total: int
    source: str  # "MemAvailable", or "cgroup DIR" where its limit leaves less

    def to_dict(self) -> dict[str, Any]:
        return {"available": self.available, "total": self.total, "source": self.source}


@dataclass(frozen=True)
class Leftover:
    """A process or container of the service left on a node, and what became of it."""

    node: str
    pid: int  # 0: a container
    command: str  # the process's command line, or "container NAME (STATE)"
    holds: bool = True  # runs (an exited container holds nothing)
    ended: str = ""  # after serve down: "stopped (SIGTERM)", "killed (SIGKILL ...)", ...

    @property
    def gone(self) -> bool:
        """Holds nothing now: it never ran, or serve down ended it."""
        return not self.holds or self.ended.startswith(("stopped", "killed", "removed"))

    @property
    def name(self) -> str:
        what = f"pid {self.pid}" if self.pid else "container"
        return f"{self.node}: {what} {self.command}"

    def to_dict(self) -> dict[str, Any]:
        return {
            "node": self.node,
            "pid": self.pid,
            "command": self.command,
            "holds_memory": self.holds,
            "ended": self.ended,
        }


@dataclass(frozen=True)
class Survey:
    """What one node shows: its memory, what of the service is left, who holds the GPU."""

    node: str
    memory: Memory | None
    leftovers: list[Leftover] = field(default_factory=list)
    gpu: list[Leftover] = field(default_factory=list)  # other holders of /dev/nvidia*
    error: str = ""


def ps_pid_args(text: str) -> dict[int, str]:
    """``ps -ww -eo pid,args`` (procps: a ``PID COMMAND`` header, the pid right-aligned, the
    whole command line after it) -> {pid: command line}."""
    out = {}
    for line in text.splitlines():
        pid, _, args = line.strip().partition(" ")
        if pid.isdigit():
            out[int(pid)] = args.strip()
    return out


def fd_pids(text: str) -> set[int]:
    """``find /proc/[0-9]*/fd -lname '/dev/nvidia*'`` lines (``/proc/PID/fd/N``) -> PIDs."""
    out = set()
    for line in text.splitlines():
        parts = line.strip().split("/")
        if len(parts) == 5 and parts[1] == "proc" and parts[2].isdigit() and parts[3] == "fd":
            out.add(int(parts[2]))
    return out


def is_service(command: str) -> bool:
    """A command line the service runs (module docstring): Python running the launcher
    (the rank, its server child, the container method's docker client) or SGLang's
    module, or one of SGLang's process titles. A file named on another command line
    (an editor, ``less``) is not the service."""
    words = command.split()
    after = dict(zip(words[1:], words, strict=False))  # word -> the word before it
    launcher = LAUNCHER in after and Path(after[LAUNCHER]).name.startswith("python")
    if launcher:
        # the same launcher runs the gateway (--module smg.launch_router): not a rank
        own = words[words.index(LAUNCHER) + 1 :]
        own = own[: own.index("--")] if "--" in own else own
        module = own[own.index("--module") + 1] if "--module" in own[:-1] else MODULE
        launcher = module == MODULE
    return launcher or after.get(MODULE) == "-m" or command.startswith(TITLE)


def _survey_command(cluster: Cluster) -> str:
    s = cluster.sglang()
    parts = [
        f"cat {MEMINFO}",
        "cat /proc/self/cgroup",
        "cat /proc/self/mountinfo",
        "ps -ww -eo pid,args",
    ]
    if s.install_method == "container":
        fmt = shlex.quote("{{.ID}} {{.State}} {{.Names}}")
        parts.append(
            f"{{sudo}}{shlex.quote(s.engine)} ps -a --no-trunc --filter "
            f"name={shlex.quote(s.container_name)} --format {fmt} 2>&1"
        )
    else:
        parts.append("true")
    parts.append("{sudo}find /proc/[0-9]*/fd -maxdepth 1 -lname '/dev/nvidia*' 2>/dev/null")
    return f"; echo {_MARK}; ".join(parts) + "; true"


def cgroup_memory(cluster: Cluster, texts: Mapping[str, tuple[str, str]]) -> dict[str, Any]:
    """Each node's memory cgroup as validate reads it, from its ``/proc/self/cgroup`` and
    ``/proc/self/mountinfo`` (``texts``: node -> both): one ``grep`` a node, in parallel."""
    places = {}
    for node, (proc_cgroup, mountinfo) in texts.items():
        place = tool_output.memory_cgroup_dirs(proc_cgroup, mountinfo)
        if place is not None:
            places[node] = place

    def read(node: str) -> dict[str, Any]:
        files = tool_output.memory_cgroup_files(places[node])
        _, out = cluster.run(node, "grep -H -s . " + " ".join(shlex.quote(f) for f in files), 30)
        return tool_output.memory_cgroup(places[node], out)

    with ThreadPoolExecutor(max_workers=max(1, len(places))) as pool:
        futures = {n: pool.submit(read, n) for n in places}
        return {n: f.result() for n, f in futures.items()}


def prefer_cgroup(reading: Memory, cgroup: Mapping[str, Any] | None) -> Memory:
    """``reading``, or the cgroup's headroom where its limit leaves less."""
    if cgroup and cgroup.get("headroom") is not None and cgroup["headroom"] < reading.available:
        return Memory(int(cgroup["headroom"]), int(cgroup["limit"]), f"cgroup {cgroup['bound']}")
    return reading


def memory_of(meminfo_text: str, cgroup: Mapping[str, Any] | None) -> Memory:
    """MemAvailable of a node, or the headroom of its session's cgroup where that is less."""
    mem = tool_output.meminfo(meminfo_text)
    return prefer_cgroup(
        Memory(mem["MemAvailable"], mem.get("MemTotal", 0), "MemAvailable"), cgroup
    )


def survey(cluster: Cluster, nodes: Sequence[str] | None = None) -> dict[str, Survey]:
    """Every node's memory, the service's leftovers and the GPU's other holders (one
    command a node, in parallel, and the cgroup's files where one is mounted)."""
    nodes = list(cluster.nodes if nodes is None else nodes)
    if not nodes:
        return {}
    s = cluster.sglang()
    raw = cluster.each(nodes, _survey_command(cluster), 60)
    sections = {n: text.split(_MARK + "\n") for n, (_, text) in raw.items()}
    bad = {n for n, sec in sections.items() if len(sec) != 6}
    cgroups = cgroup_memory(
        cluster, {n: (sec[1], sec[2]) for n, sec in sections.items() if n not in bad}
    )
    out = {}
    for node in nodes:
        rc, text = raw[node]
        if node in bad:
            out[node] = Survey(node, None, error=f"rc {rc}: {text.strip()[-300:]}")
            continue
        sec = sections[node]
        try:
            mem: Memory | None = memory_of(sec[0], cgroups.get(node))
            error = ""
        except tool_output.ToolOutputError as exc:
            mem, error = None, str(exc)
        procs = ps_pid_args(sec[3])
        left = [Leftover(node, pid, cmd) for pid, cmd in sorted(procs.items()) if is_service(cmd)]
        for line in sec[4].splitlines():
            words = line.split()
            if len(words) == 3 and words[2] == s.container_name:
                state = words[1]
                left.insert(
                    0,
                    Leftover(node, 0, f"{s.container_name} ({state})", holds=state in _RUNNING),
                )
        ours = {x.pid for x in left}
        gpu = [
            Leftover(node, pid, procs.get(pid, "?"), holds=True, ended="left alone")
            for pid in sorted(fd_pids(sec[5]))
            if pid not in ours
        ]
        out[node] = Survey(node, mem, left, gpu, error)
    return out


# ------------------------------------------------------------------ stopping
def _stop_command(cluster: Cluster, left: Sequence[Leftover], grace: int) -> str:
    s = cluster.sglang()
    cmd = []
    if any(x.pid == 0 for x in left):
        engine, name = shlex.quote(s.engine), shlex.quote(s.container_name)
        cmd.append(
            f"{{sudo}}{engine} stop --time {grace} {name} >/dev/null 2>&1; "
            f"{{sudo}}{engine} rm --force {name} >/dev/null 2>&1"
        )
    pids = " ".join(str(x.pid) for x in left if x.pid)
    if pids:
        # Gone: no such process, or a zombie (it holds no memory; its parent reaps it).
        alive = (
            'alive() { out=; for p in $1; do s=$(ps -o stat= -p "$p"); '
            'case "$s" in ""|Z*) ;; *) out="$out $p";; esac; done; echo $out; }'
        )
        cmd += [
            alive,
            f"pids='{pids}'",
            "{sudo}kill -TERM $pids 2>/dev/null",
            "i=0",
            f'while left=$(alive "$pids"); [ -n "$left" ] && [ $i -lt {grace} ]; '
            "do i=$((i+1)); sleep 1; done",
            'if [ -n "$left" ]; then {sudo}kill -KILL $left 2>/dev/null; sleep 1; fi',
            'echo "killed: $left"',
            'echo "alive: $(alive "$left")"',
        ]
    return "; ".join(cmd) + "; true"


def _ended(text: str, what: str) -> set[int]:
    for line in text.splitlines():
        if line.startswith(what + ":"):
            return {int(w) for w in line.split(":", 1)[1].split() if w.isdigit()}
    return set()


def stop_leftovers(cluster: Cluster, surveys: Mapping[str, Survey]) -> list[Leftover]:
    """Stop every leftover (per node in parallel): what each was, and how it ended."""
    nodes = [n for n, sv in surveys.items() if sv.leftovers]

    def stop(node: str) -> tuple[int, str]:
        left = surveys[node].leftovers
        cmd = _stop_command(cluster, left, TERM_GRACE_S).replace("{sudo}", cluster.sudo(node))
        return cluster.run(node, cmd, TERM_GRACE_S * 2 + 60)

    with ThreadPoolExecutor(max_workers=max(1, len(nodes))) as pool:
        results = {n: pool.submit(stop, n) for n in nodes}
        done = {n: f.result() for n, f in results.items()}
    out = []
    for node in nodes:
        rc, text = done[node]
        killed, alive = _ended(text, "killed"), _ended(text, "alive")
        for x in surveys[node].leftovers:
            if x.pid == 0:
                how = "stopped and removed" if x.holds else "removed"
            elif rc != 0 and "killed:" not in text:
                how = f"not stopped: {text.strip()[-200:] or f'rc {rc}'}"
            elif x.pid in alive:
                how = "still running"
            elif x.pid in killed:
                how = f"killed (SIGKILL after {TERM_GRACE_S} s)"
            else:
                how = "stopped (SIGTERM)"
            out.append(Leftover(x.node, x.pid, x.command, x.holds, how))
    return out


# ------------------------------------------------------------------ the record
def state_file(cluster: str) -> Path:
    """Where serve up keeps each node's memory before the start: beside ``last-good``."""
    return state_dir() / "results" / cluster / "serve-memory.json"


def load(cluster: str) -> dict[str, dict[str, Any]]:
    """node -> {"available", "total", "source", "recorded"} (empty: no usable record)."""
    try:
        data = json.loads(state_file(cluster).read_text())
        nodes = data["nodes"]
        return {
            str(n): {
                "available": int(v["available"]),
                "total": int(v["total"]),
                "source": str(v["source"]),
                "recorded": str(v["recorded"]),
            }
            for n, v in nodes.items()
        }
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return {}


def record(
    cluster: str, readings: Mapping[str, Memory], keep: Sequence[str], run_dir: Path
) -> dict[str, dict[str, Any]]:
    """Keep ``readings`` as each node's memory before the start; a node in ``keep``
    (its unit runs: a restart) keeps what the last record had for it."""
    stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    old = load(cluster)
    nodes = {n: old[n] for n in keep if n in old}
    nodes |= {n: {**m.to_dict(), "recorded": stamp} for n, m in readings.items()}
    data = {"nodes": nodes, "recorded": stamp, "run_dir": str(run_dir)}
    write_atomic(state_file(cluster), json.dumps(data, indent=1, sort_keys=True) + "\n")
    return nodes


# ------------------------------------------------------------------ memory back
def tolerance(total: int) -> int:
    """How far under serve up's reading a node may stay and still have its memory back."""
    return max(TOLERANCE_FLOOR, int(total * TOLERANCE_FRACTION))


@dataclass(frozen=True)
class Back:
    """One node after serve down: its reading before the start and now."""

    node: str
    before: int | None  # None: no record from serve up
    after: int | None  # None: not read (``error``)
    total: int
    source: str
    recorded: str = ""
    error: str = ""

    @property
    def tolerance(self) -> int:
        return tolerance(self.total)

    @property
    def ok(self) -> bool:
        if self.after is None:
            return False
        return self.before is None or self.after >= self.before - self.tolerance

    def text(self) -> str:
        if self.after is None:
            return f"{self.node}: memory not read ({self.error})"
        now = f"{self.after / GiB:.1f} GiB available ({self.source})"
        if self.before is None:
            return f"{self.node}: {now}; no reading from serve up to compare with"
        short = self.before - self.after
        verdict = "back" if self.ok else "NOT back"
        return (
            f"{self.node}: memory {verdict}: {now}, {self.before / GiB:.1f} GiB before serve up "
            f"({self.recorded}); {max(0, short) / GiB:.1f} GiB short, tolerance "
            f"{self.tolerance / GiB:.1f} GiB"
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "node": self.node,
            "back": self.ok,
            "available_before": self.before,
            "available_after": self.after,
            "total": self.total,
            "tolerance": self.tolerance,
            "source": self.source,
            "recorded": self.recorded,
            "error": self.error,
        }


def compare(
    surveys: Mapping[str, Survey], before: Mapping[str, Mapping[str, Any]]
) -> dict[str, Back]:
    out = {}
    for node, sv in surveys.items():
        rec = before.get(node)
        mem = sv.memory
        out[node] = Back(
            node,
            int(rec["available"]) if rec else None,
            mem.available if mem else None,
            mem.total if mem else 0,
            mem.source if mem else "",
            str(rec["recorded"]) if rec else "",
            sv.error if mem is None else "",
        )
    return out


@dataclass(frozen=True)
class Freed:
    """serve down's proof: each node's memory, and the leftovers named and stopped."""

    memory: list[Back]
    leftovers: list[Leftover]
    gpu: list[Leftover]


def free(cluster: Cluster) -> Freed:
    """After the units stopped: stop what is left of the service, then wait (at most
    :data:`SETTLE_S`) for every node's memory to be back within the tolerance."""
    before = load(cluster.inv.cluster)
    surveys = survey(cluster)
    stopped = stop_leftovers(cluster, surveys)
    if stopped:
        surveys |= survey(cluster, [n for n, sv in surveys.items() if sv.leftovers])
        # Whatever is still there now was not ended by the stop (or took its place).
        ended = {(x.node, x.pid): i for i, x in enumerate(stopped)}
        for sv in surveys.values():
            for x in sv.leftovers:
                if not x.holds:
                    continue
                if (x.node, x.pid) in ended:
                    i = ended[(x.node, x.pid)]
                    stopped[i] = Leftover(x.node, x.pid, x.command, True, "still running")
                else:
                    stopped.append(Leftover(x.node, x.pid, x.command, True, "appeared since"))
    backs = compare(surveys, before)
    deadline = time.monotonic() + SETTLE_S
    while (late := [n for n, b in backs.items() if not b.ok]) and time.monotonic() < deadline:
        time.sleep(SETTLE_POLL_S)
        backs |= compare(survey(cluster, late), before)
    gpu = [g for sv in surveys.values() for g in sv.gpu]
    return Freed([backs[n] for n in cluster.nodes if n in backs], stopped, gpu)


# ------------------------------------------------------------------ serve up
def before_start(cluster: Cluster, running: Sequence[str]) -> None:
    """serve up, before any rank starts: refuse a node where a leftover of the service
    still runs, else keep every idle node's memory (``running``: nodes whose unit runs,
    their processes the unit's own)."""
    idle = [n for n in cluster.nodes if n not in running]
    surveys = survey(cluster, idle)
    held = [x for sv in surveys.values() for x in sv.leftovers if x.holds]
    if held:
        names = "; ".join(x.name for x in held)
        raise SparkctlError(
            f"serve up: the service's memory is still held by what a stop left: {names}; "
            "no rank was started",
            ExitCode.CHECKS_FAILED,
            hint=f"sparkctl serve down {cluster.inv.path} stops it, then serve up",
        )
    readings = {n: sv.memory for n, sv in surveys.items() if sv.memory is not None}
    record(cluster.inv.cluster, readings, running, cluster.run_dir)

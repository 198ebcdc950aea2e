"""The NCCL bandwidth gate: launch nccl-tests from the head, judge, localise.

One rank per node, launched by Open MPI's ``mpirun`` on the head over SSH as
the cluster user, with every variable of the node's NCCL environment file
exported to every rank (``-x``), as NVIDIA's Spark switch guide runs it
(dgx-spark.md, "nccl-tests"). The largest size of the sweep is derived from
the memory actually available on the nodes: a fixed ``-e 16G`` used about
32 GB per node and froze a Spark (dgx-spark-playbooks #102).

Judging: busbw at the largest sizes against the line rate of one port, with
the threshold from the inventory; any ``#wrong`` or out-of-bounds value is a
failure. When the all-node run fails, pairwise runs (two ranks) over disjoint
pairs, round by round, point at the node every slow pair shares.
"""

from __future__ import annotations

import math
import re
import shlex
import subprocess
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from sparkctl import nccl_report
from sparkctl.errors import SparkctlError
from sparkctl.validate.model import Finding, Judged, NcclRun, Outcome, Thresholds

PROGRAMS = {"all_reduce": "all_reduce_perf", "all_gather": "all_gather_perf",
            "reduce_scatter": "reduce_scatter_perf"}
BUFFERS = 3  # send, receive and (with -c 1) the expected result


def busbw_factor(collective: str, nranks: int) -> float:
    """nccl-tests' bus bandwidth factor (doc/PERFORMANCE.md): 2(n-1)/n for all_reduce,
    (n-1)/n for all_gather and reduce_scatter."""
    if nranks < 2:
        return 1.0
    return (2.0 if collective == "all_reduce" else 1.0) * (nranks - 1) / nranks


def sweep_max(mem_available: Sequence[int], fraction: float, cap: int, floor: int) -> int:
    """The largest buffer: a power of two within ``fraction`` of the tightest node's
    available memory over the test's three buffers, at most ``cap``, at least ``floor``."""
    if not mem_available:
        return max(floor, 1)
    room = min(mem_available) * fraction / BUFFERS
    size = 1 << math.floor(math.log2(max(room, 1.0)))
    return max(floor, min(cap, size))


@dataclass(frozen=True)
class Launch:
    """How to start nccl-tests on a set of nodes (the first one runs mpirun)."""

    collective: str
    hosts: tuple[str, ...]  # node names, the launcher first
    addresses: tuple[str, ...]  # their socket-interface (fabric a) addresses, same order
    tests_dir: str
    env_file: str
    env_keys: tuple[str, ...]
    min_bytes: int
    max_bytes: int
    iters: int
    warmup: int
    timeout: int
    as_root: bool
    nccl_home: str | None = None  # a real build's NCCL (LD_LIBRARY_PATH); None in the lab

    def program_argv(self) -> list[str]:
        return [f"{self.tests_dir}/{PROGRAMS[self.collective]}", "-b", str(self.min_bytes),
                "-e", str(self.max_bytes), "-f", "2", "-g", "1", "-c", "1",
                "-n", str(self.iters), "-w", str(self.warmup)]

    def mpirun_argv(self) -> list[str]:
        argv = ["mpirun", "-np", str(len(self.hosts)),
                "-H", ",".join(f"{a}:1" for a in self.addresses),
                # mpirun reaches the other nodes with the cluster key; never a new host key.
                "--mca", "plm_rsh_args", "-o BatchMode=yes -o StrictHostKeyChecking=yes"]
        if self.as_root:
            argv.append("--allow-run-as-root")
        for key in self.env_keys:
            argv += ["-x", key]
        if self.nccl_home:
            # nccl-tests is linked against the pinned NCCL build, not DGX OS's libnccl2
            # (dgx-spark.md, "NCCL": two 2.28.9 builds behaved differently).
            argv += ["-x", "LD_LIBRARY_PATH"]
        return argv + self.program_argv()

    def remote_command(self) -> str:
        """What the launcher runs: the env file exported, mpirun bounded by a timeout."""
        lib = (f"LD_LIBRARY_PATH={shlex.quote(self.nccl_home)}/lib"
               "${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}; export LD_LIBRARY_PATH; "
               if self.nccl_home else "")
        inner = (f"set -a; . {shlex.quote(self.env_file)}; set +a; {lib}"
                 f"exec timeout --kill-after=10 {self.timeout} {shlex.join(self.mpirun_argv())}")
        return f"sh -c {shlex.quote(inner)}"


Runner = Callable[[str, str, int], tuple[int, str]]


def ssh_runner(ssh_config: Path) -> Runner:
    """Run a command on a node through the validate ssh_config (its ControlMaster)."""
    def run(host: str, command: str, timeout: int) -> tuple[int, str]:
        try:
            proc = subprocess.run(["ssh", "-F", str(ssh_config), host, command],
                                  capture_output=True, text=True, timeout=timeout + 30,
                                  check=False)
        except subprocess.TimeoutExpired as exc:
            out = exc.stdout.decode() if isinstance(exc.stdout, bytes) else (exc.stdout or "")
            return 124, out + f"\nsparkctl: no answer from {host} within {timeout + 30} s\n"
        return proc.returncode, proc.stdout + proc.stderr
    return run


def _precise(row: nccl_report.Row, collective: str, nranks: int) -> float:
    """busbw from size and time (nccl-tests prints two decimals: 0.11 in the lab)."""
    factor = busbw_factor(collective, nranks)
    values = []
    for half in (row.out_of_place, row.in_place):
        printed = half.busbw
        exact = row.size / (half.time_us * 1e-6) / 1e9 * factor if half.time_us > 0 else printed
        # Where the two disagree beyond rounding, the printed figure is the truth.
        values.append(exact if abs(exact - printed) <= 0.006 + 0.02 * printed else printed)
    return min(values)


def judge(rep: nccl_report.NcclReport, collective: str, nranks: int,
          th: Thresholds) -> tuple[Outcome, str, list[Judged]]:
    judged = []
    for row in rep.largest(th.judged_sizes):
        busbw = _precise(row, collective, nranks)
        wrong = sum((h.wrong or 0) for h in (row.out_of_place, row.in_place))
        judged.append(Judged(size=row.size, busbw=round(busbw, 6),
                             fraction=round(busbw / th.line_rate_gbytes, 4), wrong=wrong))
    if rep.wrong:
        return "failed", f"{rep.wrong} wrong result(s) (#wrong): the data did not arrive intact", \
            judged
    if rep.oob_values:
        return "failed", f"{rep.oob_values} out-of-bounds value(s)", judged
    low = [j for j in judged if j.fraction < th.min_fraction]
    best = max(judged, key=lambda j: j.size)
    if low:
        worst = min(low, key=lambda j: j.busbw)
        return "failed", (f"busbw {worst.busbw:.3f} GB/s at {human(worst.size)} is "
                          f"{worst.fraction:.0%} of the line rate {th.line_rate_gbytes:g} GB/s "
                          f"(threshold {th.min_fraction:.0%} = {th.min_busbw_gbytes:.3f} GB/s)"), \
            judged
    return "passed", (f"busbw {best.busbw:.3f} GB/s at {human(best.size)} = {best.fraction:.0%} "
                      f"of the line rate (threshold {th.min_fraction:.0%})"), judged


def human(size: int) -> str:
    for unit, shift in (("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if size >= 1 << shift and size % (1 << shift) == 0:
            return f"{size >> shift} {unit}"
    return f"{size} B"


def transport_problem(output: str, rdma_expected: bool) -> str | None:
    """Why a run's transport fails the gate: NCCL on sockets where RDMA is expected.

    NCCL falls back to TCP silently (no usable RoCE device, no /dev/infiniband in a
    container) and still completes, about 2.5x slower; its INFO lines (NCCL_DEBUG=INFO,
    NCCL_DEBUG_SUBSYS INIT,NET, set by the nccl role) say which network it chose."""
    from sparkctl.serve.logs import nccl_transport  # noqa: PLC0415 - NCCL's lines, one parser

    if rdma_expected and nccl_transport(output.splitlines()) == "socket":
        return ("NCCL used the Socket transport, not RDMA (its INFO lines: 'Using network "
                "Socket' / 'via NET/Socket' / 'NET/IB : No device found.'): the RoCE devices "
                "in NCCL_IB_HCA were not usable; check ibv_devinfo and the roce_device checks")
    return None


def run(launch: Launch, runner: Runner, th: Thresholds, log_path: Path,
        scope: str = "all", *, rdma_expected: bool = False) -> NcclRun:
    """Start one nccl-tests run, keep its log, parse and judge it."""
    start = time.monotonic()
    rc, output = runner(launch.hosts[0], launch.remote_command(), launch.timeout)
    log_path.write_text(output)
    common = {"collective": launch.collective, "scope": scope, "hosts": list(launch.hosts),
              "command": launch.mpirun_argv(), "log": log_path.name}
    try:
        rep = nccl_report.parse(output, str(log_path))
    except SparkctlError as exc:
        reason = _failure_reason(output, rc)
        message = reason or (f"exit status {rc}: {exc.message}" if rc else exc.message)
        return NcclRun(outcome="failed", duration_s=time.monotonic() - start,
                       message=message, **common)  # type: ignore[arg-type]
    outcome, message, judged = judge(rep, launch.collective, len(launch.hosts), th)
    problem = transport_problem(output, rdma_expected)
    if problem:
        outcome, message = "failed", f"{problem} ({message})"
    if rc != 0 and outcome == "passed":
        outcome, message = "failed", f"exit status {rc} after a complete log: {message}"
    return NcclRun(outcome=outcome, message=message, report=rep.to_dict(), judged=judged,
                   duration_s=time.monotonic() - start, **common)  # type: ignore[arg-type]


_REASONS = (
    (re.compile(r"no answer from|timeout|timed out", re.I), "no result within the time limit "
     "(a hang: a link or interface that drops traffic?)"),
    (re.compile(r"No route to host|Connection refused|unreachable", re.I), None),
    (re.compile(r"Host key verification failed|Permission denied", re.I), None),
)


def _failure_reason(output: str, rc: int) -> str | None:
    """The line that says why a run produced no complete log; None leaves it to the parser,
    whose message names the first failure line of the log."""
    for pattern, text in _REASONS:
        for line in output.splitlines():
            if pattern.search(line):
                return text or line.strip()[:300]
    if rc == 124:
        return _REASONS[0][1]
    if rc == 137:
        return ("killed (exit 137): the time limit ran out, or the kernel's out-of-memory killer "
                "stopped a rank (see the node's journal)")
    return None


# ------------------------------------------------------------------ localisation
def pair_rounds(nodes: Sequence[str]) -> list[list[tuple[str, str]]]:
    """Every pair once, grouped in rounds of disjoint pairs (circle method)."""
    items: list[str | None] = list(nodes)
    if len(items) % 2:
        items.append(None)
    n = len(items)
    rounds = []
    for _ in range(n - 1):
        pairs = [(items[i], items[n - 1 - i]) for i in range(n // 2)]
        rounds.append([(a, b) for a, b in pairs if a is not None and b is not None])
        items = [items[0], items[-1], *items[1:-1]]
    return rounds


def run_pairs(make: Callable[[tuple[str, str]], Launch], runner: Runner, th: Thresholds,
              run_dir: Path, nodes: Sequence[str]) -> list[NcclRun]:
    """Each round's pairs at once (disjoint pairs share no port), rounds one after another."""
    results: list[NcclRun] = []
    for round_ in pair_rounds(nodes):
        with ThreadPoolExecutor(max_workers=max(1, len(round_))) as pool:
            launches = [make(pair) for pair in round_]
            futures = [pool.submit(run, launch, runner, th, run_dir / (
                f"nccl-{launch.collective}-{'-'.join(launch.hosts)}.log"), "pair")
                for launch in launches]
            results += [f.result() for f in futures]
    return results


# A pair this far below the best pair is slow even above the threshold: the
# culprit is relative (one node's port), the threshold is absolute.
RELATIVE_SLOW = 0.7


def implicated(ok: Mapping[frozenset[str], bool], nodes: Sequence[str]) -> list[str]:
    """Nodes whose every pair failed while some pair without them passed."""
    out = []
    for node in nodes:
        mine = [good for pair, good in ok.items() if node in pair]
        others = [good for pair, good in ok.items() if node not in pair]
        if mine and not any(mine) and any(others):
            out.append(node)
    return out


def localise(pairs: Sequence[NcclRun], nodes: Sequence[str],
             where: Callable[[str], str | None]) -> list[Finding]:
    """The node(s) every failing or slow pair shares, or the pairs themselves, or the fabric."""
    def busbw(r: NcclRun) -> float:
        return min((j.busbw for j in r.judged), default=0.0)

    best = max((busbw(r) for r in pairs if r.outcome == "passed"), default=0.0)
    ok = {frozenset(r.hosts): r.outcome == "passed" and busbw(r) >= RELATIVE_SLOW * best
          for r in pairs}
    if all(ok.values()):
        return [Finding("cluster", None, "every pair passes on its own: the all-node run fails "
                        "only with all ranks (switch capacity, or a collective-specific problem)")]
    if not any(ok.values()):
        return [Finding("cluster", None, f"all {len(pairs)} pairs fail or are slow: a cause common "
                        "to every node (switch, MTU, NCCL environment), not one node")]
    findings = []
    for node in implicated(ok, nodes):
        mine = [r for r in pairs if node in r.hosts]
        detail = (f"{min(busbw(r) for r in mine):.3f} GB/s" if all(r.judged for r in mine)
                  else mine[0].message)
        place = where(node)
        findings.append(Finding(node, place, (
            f"every pair with {node} fails or is slow ({detail}) while pairs without it "
            f"reach {best:.3f} GB/s: look at {node}'s fabric link"
            + (f", {place}" if place else ""))))
    if not findings:
        findings = [Finding(r.hosts[0], "-".join(r.hosts), f"pair {' - '.join(r.hosts)}: "
                            f"{r.message}") for r in pairs if not ok[frozenset(r.hosts)]]
    return findings


# ------------------------------------------------------------------ perftest
_PERFTEST_ROW = re.compile(r"^\s*(\d+)\s+(\d+)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)\s*$")


def ib_write_bw_average(text: str) -> float:
    """BW average [Gb/sec] of ``ib_write_bw --report_gbits`` (the last result row)."""
    rows = [m for m in (_PERFTEST_ROW.match(ln) for ln in text.splitlines()) if m]
    if not rows:
        raise ValueError("no ib_write_bw result row (#bytes #iterations BW peak BW average ...)")
    return float(rows[-1].group(4))

"""The NCCL bandwidth gate: launch nccl-tests from the head, judge, localise.

One rank per node, launched by Open MPI's ``mpirun`` on the head over SSH as
the cluster user, with every variable of the node's NCCL environment file
exported to every rank (``-x``), as NVIDIA's Spark switch guide runs it
(dgx-spark.md, "nccl-tests"). The largest size of the sweep is derived from
the memory actually available on the nodes: a fixed ``-e 16G`` used about
32 GB per node and froze a Spark (dgx-spark-playbooks #102).

Judging: the alpha-beta model (time = latency + bytes / bandwidth) fitted
over the largest sizes of the sweep, out-of-place and in-place together, gives
the bus bandwidth the link tends to; that fitted busbw must reach the
collective's fraction of the line rate, and the largest size actually measured
must reach a floor below it (``floor_ratio`` of the threshold), so that a fit
cannot pass what was never measured. Real GB10 logs (tests/fixtures/nccl):
healthy pairs measure 19.7-19.9 GB/s at 1 GiB and 23.7 GB/s at 16 GiB, and
their fit is 22.3-24.2 GB/s whatever the top of the sweep; the degraded one is
2.8 GB/s everywhere. Any ``#wrong`` or out-of-bounds value is a failure; so is a
run whose NCCL is not the pinned build, or with fewer distinct hosts and GPUs
than ranks launched. When the all-node run fails, pairwise runs (two ranks)
over disjoint pairs, round by round, judged with the same fit, point at the
node whose pairs fall below the others'.
"""

from __future__ import annotations

import math
import os
import re
import shlex
import subprocess
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sparkctl import nccl_report, tool_output
from sparkctl.errors import ExitCode, SparkctlError
from sparkctl.validate.report.model import Finding, Fit, Judged, NcclRun, Outcome, Thresholds

PROGRAMS = {
    "all_reduce": "all_reduce_perf",
    "all_gather": "all_gather_perf",
    "reduce_scatter": "reduce_scatter_perf",
}
BUFFERS = 3  # send, receive and (with -c 1) the expected result


def busbw_factor(collective: str, nranks: int) -> float:
    """nccl-tests' bus bandwidth factor (doc/PERFORMANCE.md): 2(n-1)/n for all_reduce,
    (n-1)/n for all_gather and reduce_scatter."""
    if nranks < 2:
        return 1.0
    return (2.0 if collective == "all_reduce" else 1.0) * (nranks - 1) / nranks


def thresholds_from(v: Mapping[str, Any], line_rate: float) -> Thresholds:
    """The gate's thresholds from the validate role's plan (``validate_*`` as the plan
    play wrote them): one fraction for every collective, or a mapping per collective
    whose null entries are not gated on bandwidth."""
    raw = v["busbw_min_fraction"]
    fractions: dict[str, float | None] = {}
    if isinstance(raw, Mapping):
        fractions = {str(k): None if x in (None, "", "None") else float(x) for k, x in raw.items()}
        gated = [x for x in fractions.values() if x is not None]
        headline = fractions.get("all_gather") or (max(gated) if gated else 0.0)
    else:
        headline = float(raw)
    return Thresholds(
        line_rate_gbytes=line_rate,
        min_fraction=float(headline),
        judged_sizes=int(v["judged_sizes"]),
        baseline_tolerance=float(v["baseline_tolerance"]),
        fractions=fractions,
        floor_ratio=float(v.get("busbw_floor_ratio", 0.0)),
    )


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
        return [
            f"{self.tests_dir}/{PROGRAMS[self.collective]}",
            "-b",
            str(self.min_bytes),
            "-e",
            str(self.max_bytes),
            "-f",
            "2",
            "-g",
            "1",
            "-c",
            "1",
            "-n",
            str(self.iters),
            "-w",
            str(self.warmup),
        ]

    def mpirun_argv(self) -> list[str]:
        argv = [
            "mpirun",
            "-np",
            str(len(self.hosts)),
            "-H",
            ",".join(f"{a}:1" for a in self.addresses),
            # mpirun reaches the other nodes with the cluster key; never a new host key.
            "--mca",
            "plm_rsh_args",
            "-o BatchMode=yes -o StrictHostKeyChecking=yes",
        ]
        if self.as_root:
            argv.append("--allow-run-as-root")
        for key in self.env_keys:
            argv += ["-x", key]
        if self.nccl_home:
            # nccl-tests is linked against the pinned NCCL build, not DGX OS's libnccl2
            # (dgx-spark.md, "NCCL": two 2.28.9 builds behaved differently).
            argv += ["-x", "LD_LIBRARY_PATH"]
        return argv + self.program_argv()

    def read_env_command(self) -> str:
        """Prints the env file the nccl role wrote; the controller reads it with the one
        parser (tool_output.env_file). No shell ever sources it: a line in it is data."""
        return f"cat -- {shlex.quote(self.env_file)}"

    def remote_command(self, env: Mapping[str, str]) -> str:
        """What the launcher runs: mpirun bounded by a timeout, the env file's variables
        given to ``env`` by name, each one quoted word."""
        lib = (
            f"LD_LIBRARY_PATH={shlex.quote(self.nccl_home)}/lib"
            "${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}; export LD_LIBRARY_PATH; "
            if self.nccl_home
            else ""
        )
        assigns = shlex.join(f"{key}={value}" for key, value in env.items())
        inner = (
            f"{lib}exec env {assigns}{' ' if assigns else ''}"
            f"timeout --kill-after=10 {self.timeout} {shlex.join(self.mpirun_argv())}"
        )
        return f"sh -c {shlex.quote(inner)}"


Runner = Callable[[str, str, int], tuple[int, str]]


# What validate keeps of one command's output: an nccl-tests log is tens of kilobytes; a
# node that prints without end must not fill the controller's memory.
OUTPUT_LIMIT = 64 << 20


def ssh_runner(ssh_config: Path, limit: int = OUTPUT_LIMIT) -> Runner:
    """Run a command on a node through the validate ssh_config (its ControlMaster); its
    stdout then its stderr, together cut at ``limit`` bytes."""

    def run(host: str, command: str, timeout: int) -> tuple[int, str]:
        deadline = time.monotonic() + timeout + 30
        with subprocess.Popen(
            ["ssh", "-F", str(ssh_config), "--", host, command],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            stdin=subprocess.DEVNULL,
        ) as proc:
            out, note = _bounded_read(proc, deadline, limit)
            if note:
                proc.kill()
            code = proc.wait()
        if note == "timeout":
            return 124, out + f"\nsparkctl: no answer from {host} within {timeout + 30} s\n"
        if note == "limit":
            return 125, out + (
                f"\nsparkctl: {host} printed more than {limit >> 20} MiB; the rest was not read\n"
            )
        return code, out

    return run


def _bounded_read(
    proc: subprocess.Popen[bytes], deadline: float, limit: int
) -> tuple[str, str | None]:
    """``proc``'s stdout and stderr (stdout first) until both close, the deadline passes
    ("timeout") or together more than ``limit`` bytes came ("limit")."""
    import selectors  # noqa: PLC0415

    streams = {proc.stdout: bytearray(), proc.stderr: bytearray()}
    note: str | None = None
    with selectors.DefaultSelector() as sel:
        for stream in streams:
            if stream is not None:
                sel.register(stream, selectors.EVENT_READ)
        while sel.get_map() and note is None:
            left = deadline - time.monotonic()
            if left <= 0:
                note = "timeout"
                break
            for key, _ in sel.select(timeout=min(left, 1.0)):
                chunk = os.read(key.fd, 1 << 16)
                if not chunk:
                    sel.unregister(key.fileobj)
                    continue
                streams[key.fileobj].extend(chunk)  # type: ignore[index]
                if sum(len(b) for b in streams.values()) > limit:
                    note = "limit"
    out = bytes(streams[proc.stdout])[:limit]
    err = bytes(streams[proc.stderr])[: max(0, limit - len(out))]
    return (out + err).decode(errors="replace"), note


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


def _exact(size: int, time_us: float, printed: float, factor: float) -> float:
    """busbw of one half from size and time; the printed figure where they disagree
    beyond its two-decimal rounding (a time that does not belong to the row)."""
    exact = size / (time_us * 1e-6) / 1e9 * factor if time_us > 0 else printed
    return exact if abs(exact - printed) <= 0.006 + 0.02 * printed else printed


def fit(rep: nccl_report.NcclReport, collective: str, nranks: int, judged_sizes: int) -> Fit:
    """The alpha-beta model over the ``judged_sizes`` largest sizes of ``rep``.

    Ordinary least squares of time (us) against bytes over every out-of-place and
    in-place time of those sizes: slope = 1 / algbw, intercept = latency. busbw is
    algbw times the busbw factor (doc/PERFORMANCE.md of nccl-tests), the same
    conversion nccl-tests prints. With fewer than two sizes, or a slope that is
    not positive (times that do not grow with size), there is no line: the fit is
    the largest size's own measurement (method "measured").
    """
    factor = busbw_factor(collective, nranks)
    sizes = sorted({r.size for r in rep.rows if r.size > 0})[-max(1, judged_sizes) :]
    points = [
        (r.size, h.time_us, h.busbw)
        for r in rep.rows
        if r.size in sizes
        for h in (r.out_of_place, r.in_place)
    ]
    largest = max(sizes) if sizes else 0
    top = [_exact(s, t, b, factor) for s, t, b in points if s == largest]
    largest_busbw = sum(top) / len(top) if top else 0.0
    measured = Fit(
        "measured",
        sizes,
        round(largest_busbw, 6),
        round(largest_busbw / factor, 6),
        0.0,
        0.0,
        factor,
        largest,
        round(largest_busbw, 6),
    )
    timed = [(float(s), t) for s, t, _ in points if t > 0]
    if len(sizes) < 2 or len({s for s, _ in timed}) < 2:
        return measured
    n = len(timed)
    mean_s = sum(s for s, _ in timed) / n
    mean_t = sum(t for _, t in timed) / n
    sxx = sum((s - mean_s) ** 2 for s, _ in timed)
    slope = sum((s - mean_s) * (t - mean_t) for s, t in timed) / sxx  # us per byte
    if not slope > 0:
        return measured
    latency = mean_t - slope * mean_s
    algbw = 1.0 / slope / 1e3  # bytes per us -> GB/s
    residual = math.sqrt(sum(((t - (latency + slope * s)) / t) ** 2 for s, t in timed) / n)
    return Fit(
        "fit",
        sizes,
        round(algbw * factor, 6),
        round(algbw, 6),
        round(latency, 3),
        round(residual, 6),
        factor,
        largest,
        round(largest_busbw, 6),
    )


def consistency(rep: nccl_report.NcclReport, nranks: int, pinned_nccl: str | None) -> str | None:
    """Why the run is not the run validate launched: another NCCL than the pinned build,
    or fewer distinct hosts and GPUs than ranks (two ranks on one node measure no link).

    ``pinned_nccl`` is the version the nccl role built ("v2.28.9-1" or "2.28.9"); None
    where nothing is pinned (the lab's stand-ins, which have no NCCL)."""
    if pinned_nccl:
        want = re.sub(r"^v|-\d+$", "", pinned_nccl.strip())
        seen = rep.nccl_versions
        if not seen:
            return (
                f"the log does not say which NCCL ran (no nccl-library= on the version "
                f"line, no 'NCCL version' line): the pinned build is {want}"
            )
        other = [v for v in seen if v != want]
        if other:
            return (
                f"NCCL {', '.join(other)} ran, not the pinned {want} (LD_LIBRARY_PATH "
                "found another libnccl, such as DGX OS's libnccl2 or a pip wheel)"
            )
    if rep.ranks:
        problems = []
        if len(rep.ranks) != nranks:
            problems.append(f"{len(rep.ranks)} ranks")
        if len(rep.hosts) < nranks:
            problems.append(f"{len(rep.hosts)} distinct host(s) ({', '.join(rep.hosts)})")
        if len(rep.devices) < nranks:
            problems.append(f"{len(rep.devices)} distinct GPU(s)")
        if problems:
            return (
                f"{' and '.join(problems)} took part where {nranks} nodes were launched, "
                "one rank and one GPU each"
            )
    return None


def judge(
    rep: nccl_report.NcclReport, collective: str, nranks: int, th: Thresholds
) -> tuple[Outcome, str, list[Judged], Fit]:
    """The gate on one parsed run: wrong results, then the fitted busbw against the
    collective's threshold, then the largest measured size against the floor."""
    judged = []
    for row in rep.largest(th.judged_sizes):
        busbw = _precise(row, collective, nranks)
        wrong = sum((h.wrong or 0) for h in (row.out_of_place, row.in_place))
        judged.append(
            Judged(
                size=row.size,
                busbw=round(busbw, 6),
                fraction=round(busbw / th.line_rate_gbytes, 4),
                wrong=wrong,
            )
        )
    model = fit(rep, collective, nranks, th.judged_sizes)
    if rep.wrong:
        return (
            "failed",
            f"{rep.wrong} wrong result(s) (#wrong): the data did not arrive intact",
            judged,
            model,
        )
    if rep.oob_values:
        return "failed", f"{rep.oob_values} out-of-bounds value(s)", judged, model
    rate = th.line_rate_gbytes
    fitted = describe_fit(model, rate)
    threshold, floor = th.threshold_for(collective), th.floor_for(collective)
    if threshold is None:
        return (
            "passed",
            (f"{fitted}; {collective} is not gated on bandwidth here (measured and reported only)"),
            judged,
            model,
        )
    fraction = th.fraction_for(collective) or 0.0
    limit = f"threshold {fraction:.1%} = {threshold:.3f} GB/s"
    if model.busbw < threshold:
        return "failed", f"{fitted}: below the {limit}", judged, model
    if floor is not None and model.largest_busbw < floor:
        return (
            "failed",
            (
                f"{fitted}, but {human(model.largest_size)} measured only "
                f"{model.largest_busbw:.3f} GB/s, below the floor {floor:.3f} GB/s "
                f"({th.floor_ratio:.0%} of the threshold): the fit extrapolates "
                "beyond what was measured"
            ),
            judged,
            model,
        )
    return "passed", f"{fitted} (passes the {limit})", judged, model


def describe_fit(model: Fit, line_rate: float) -> str:
    """One phrase: the fitted busbw, its share of the line rate, the rows behind it."""
    share = (
        f"{model.busbw / line_rate:.1%} of the line rate {line_rate:g} GB/s"
        if line_rate > 0
        else "line rate unknown"
    )
    largest = f"{model.largest_busbw:.3f} GB/s measured at {human(model.largest_size)}"
    if model.method == "measured":
        return (
            f"busbw {model.busbw:.3f} GB/s at {human(model.largest_size)} as measured "
            f"({share}; one size or times that do not grow with size: no fit)"
        )
    span = f"{human(model.sizes[0])}..{human(model.sizes[-1])}"
    return (
        f"fitted busbw {model.busbw:.3f} GB/s = {share} (alpha-beta fit over {span}: "
        f"latency {model.latency_us:.0f} us, residual {model.residual:.1%}; {largest})"
    )


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
        return (
            "NCCL used the Socket transport, not RDMA (its INFO lines: 'Using network "
            "Socket' / 'via NET/Socket' / 'NET/IB : No device found.'): the RoCE devices "
            "in NCCL_IB_HCA were not usable; check ibv_devinfo and the roce_device checks"
        )
    return None


def run(
    launch: Launch,
    runner: Runner,
    th: Thresholds,
    log_path: Path,
    scope: str = "all",
    *,
    rdma_expected: bool = False,
    pinned_nccl: str | None = None,
) -> NcclRun:
    """Start one nccl-tests run, keep its log, parse and judge it."""
    start = time.monotonic()
    common: dict[str, Any] = {
        "collective": launch.collective,
        "scope": scope,
        "hosts": list(launch.hosts),
        "command": launch.mpirun_argv(),
        "log": log_path.name,
    }
    rc, text = runner(launch.hosts[0], launch.read_env_command(), 30)
    why = f"exit status {rc}: {text.strip()[-200:]}"
    try:
        env = tool_output.env_file(text) if rc == 0 else None
    except tool_output.ToolOutputError as exc:
        env, why = None, str(exc)
    if env is None:
        log_path.write_text(text)
        return NcclRun(
            outcome="failed",
            duration_s=time.monotonic() - start,
            message=f"{launch.env_file} on {launch.hosts[0]} could not be read "
            f"({why}): provision writes it (the nccl role)",
            **common,
        )
    rc, output = runner(launch.hosts[0], launch.remote_command(env), launch.timeout)
    log_path.write_text(output)
    try:
        rep = nccl_report.parse(output, str(log_path))
    except SparkctlError as exc:
        reason = _failure_reason(output, rc)
        message = reason or (f"exit status {rc}: {exc.message}" if rc else exc.message)
        return NcclRun(
            outcome="failed", duration_s=time.monotonic() - start, message=message, **common
        )
    outcome, message, judged, model = judge(rep, launch.collective, len(launch.hosts), th)
    problem = transport_problem(output, rdma_expected) or consistency(
        rep, len(launch.hosts), pinned_nccl
    )
    if problem:
        outcome, message = "failed", f"{problem} ({message})"
    if rc != 0 and outcome == "passed":
        outcome, message = "failed", f"exit status {rc} after a complete log: {message}"
    return NcclRun(
        outcome=outcome,
        message=message,
        report=rep.to_dict(),
        judged=judged,
        fit=model,
        duration_s=time.monotonic() - start,
        **common,
    )


_REASONS = (
    (
        re.compile(r"no answer from|timeout|timed out", re.I),
        "no result within the time limit (a hang: a link or interface that drops traffic?)",
    ),
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
        return (
            "killed (exit 137): the time limit ran out, or the kernel's out-of-memory killer "
            "stopped a rank (see the node's journal)"
        )
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


def run_pairs(
    make: Callable[[tuple[str, str]], Launch],
    runner: Runner,
    th: Thresholds,
    run_dir: Path,
    nodes: Sequence[str],
    *,
    rdma_expected: bool = False,
    pinned_nccl: str | None = None,
) -> list[NcclRun]:
    """Each round's pairs at once (disjoint pairs share no port), rounds one after another."""
    results: list[NcclRun] = []
    for round_ in pair_rounds(nodes):
        with ThreadPoolExecutor(max_workers=max(1, len(round_))) as pool:
            launches = [make(pair) for pair in round_]
            futures = [
                pool.submit(
                    run,
                    launch,
                    runner,
                    th,
                    run_dir / (f"nccl-{launch.collective}-{'-'.join(launch.hosts)}.log"),
                    "pair",
                    rdma_expected=rdma_expected,
                    pinned_nccl=pinned_nccl,
                )
                for launch in launches
            ]
            results += [f.result() for f in futures]
    return results


# A pair this far below the best pair is slow, whatever the threshold: the
# culprit is relative (one node's port), the threshold absolute. One twin of a
# port carries about half of it (dgx-spark.md, "Per twin"), so a node that lost
# a twin measures about 0.5 of the best pair; 0.7 keeps run-to-run noise of
# healthy pairs (19.7 vs 19.9 GB/s at 1 GiB in real logs) far from it.
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


def pair_busbw(r: NcclRun) -> float | None:
    """What a pair is compared by: its fitted busbw (the same fit as the gate), or the
    lowest judged size of a run without one; None when it measured nothing usable."""
    if r.fit is not None:
        return r.fit.busbw
    return min((j.busbw for j in r.judged), default=None)


def _measured(r: NcclRun) -> bool:
    """A pair whose bandwidth says something: a complete log without wrong data."""
    rep = r.report or {}
    return pair_busbw(r) is not None and not rep.get("wrong") and not rep.get("oob_values")


def localise(
    pairs: Sequence[NcclRun],
    nodes: Sequence[str],
    where: Callable[[str], str | None],
    threshold: float | None = None,
) -> list[Finding]:
    """The node(s) whose pairs all fall below the others', or the pairs, or the fabric.

    A pair is good when it measured a bandwidth within RELATIVE_SLOW of the best
    pair's (failing the absolute threshold does not make it bad: on a cluster
    whose every pair misses it, the pairs still say which node is slower); a
    pair with no result, wrong data or another failure that is not bandwidth is
    bad. ``threshold`` (GB/s) only words the findings.
    """
    values = {frozenset(r.hosts): pair_busbw(r) for r in pairs if _measured(r)}
    best = max((v for v in values.values() if v is not None), default=0.0)
    ok = {
        frozenset(r.hosts): frozenset(r.hosts) in values
        and (values[frozenset(r.hosts)] or 0.0) >= RELATIVE_SLOW * best
        and best > 0
        for r in pairs
    }
    under = threshold is not None and best < threshold
    if all(ok.values()):
        if under:
            return [
                Finding(
                    "cluster",
                    None,
                    (
                        f"every pair is alike (best {best:.3f} GB/s) and all miss the threshold "
                        f"{threshold:.3f} GB/s: a cause common to every node (switch, MTU, NCCL "
                        "environment), not one node"
                    ),
                )
            ]
        return [
            Finding(
                "cluster",
                None,
                "every pair passes on its own: the all-node run fails "
                "only with all ranks (switch capacity, or a collective-specific problem)",
            )
        ]
    if not any(ok.values()):
        return [
            Finding(
                "cluster",
                None,
                f"all {len(pairs)} pairs fail or are slow: a cause common "
                "to every node (switch, MTU, NCCL environment), not one node",
            )
        ]
    findings = []
    for node in implicated(ok, nodes):
        mine = [r for r in pairs if node in r.hosts]
        numbers = [v for r in mine if (v := values.get(frozenset(r.hosts))) is not None]
        detail = (
            f"{min(numbers):.3f} GB/s"
            if len(numbers) == len(mine)
            else next(r.message for r in mine if frozenset(r.hosts) not in values)
        )
        place = where(node)
        findings.append(
            Finding(
                node,
                place,
                (
                    f"every pair with {node} fails or is slow ({detail}) while pairs without it "
                    f"reach {best:.3f} GB/s: look at {node}'s fabric link"
                    + (f", {place}" if place else "")
                ),
            )
        )
    if not findings:
        findings = [
            Finding(r.hosts[0], "-".join(r.hosts), f"pair {' - '.join(r.hosts)}: {r.message}")
            for r in pairs
            if not ok[frozenset(r.hosts)]
        ]
    return findings


# ------------------------------------------------------------------ a saved log
def collective_of(rep: nccl_report.NcclReport, source: str) -> str:
    """The gate's name for the log's collective (``all_gather_perf`` -> all_gather)."""
    name = (rep.collective or "").removesuffix("_perf")
    if name not in PROGRAMS:
        raise SparkctlError(
            f"{source}: the gate judges {', '.join(PROGRAMS)}; this log is "
            f"{rep.collective or 'of no named collective'}",
            ExitCode.BAD_INPUT,
        )
    return name


def ranks_of(rep: nccl_report.NcclReport, collective: str, source: str) -> int:
    """How many ranks ran: the Rank lines, else busbw / algbw of a row (the factor)."""
    if rep.ranks:
        return len(rep.ranks)
    for row in rep.rows:
        half = row.out_of_place
        if half.algbw > 0 and half.busbw > 0:
            ratio = half.busbw / half.algbw
            scale = 2.0 if collective == "all_reduce" else 1.0
            if ratio < scale:
                return max(2, round(scale / (scale - ratio)))
    raise SparkctlError(
        f"{source}: no Rank lines and no row to tell the number of ranks from (busbw / algbw)",
        ExitCode.BAD_INPUT,
    )


def role_thresholds(line_rate: float) -> Thresholds:
    """The validate role's own defaults (roles/validate/defaults/main.yml, the one place
    they are written) at ``line_rate``: what a profile's inventory gets unless it
    overrides them."""
    import yaml  # noqa: PLC0415

    from sparkctl.paths import roles_dir  # noqa: PLC0415

    defaults = yaml.safe_load((roles_dir() / "validate" / "defaults" / "main.yml").read_text())
    plan = {key.removeprefix("validate_"): value for key, value in defaults.items()}
    return thresholds_from(plan, line_rate)


def gate_log(rep: nccl_report.NcclReport, th: Thresholds, source: str) -> NcclRun:
    """A saved log judged exactly as ``validate`` judges a run it launched (the ranks
    the log names, no pinned NCCL to compare with: that is the node's record)."""
    collective = collective_of(rep, source)
    nranks = ranks_of(rep, collective, source)
    outcome, message, judged, model = judge(rep, collective, nranks, th)
    problem = consistency(rep, nranks, None)
    if problem:
        outcome, message = "failed", f"{problem} ({message})"
    return NcclRun(
        collective=collective,
        scope="all",
        hosts=rep.hosts,
        outcome=outcome,
        message=message,
        log=Path(source).name,
        report=rep.to_dict(),
        judged=judged,
        fit=model,
    )

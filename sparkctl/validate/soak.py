"""``sparkctl validate --soak DURATION``: burn-in on demand.

The node checks and the NCCL sweep of ``sparkctl validate`` (its own pieces, from
:mod:`sparkctl.validate.run`) repeat in rounds until DURATION has passed (a
soak shorter than one round runs exactly one). After each round's sweep every
node's GPU is read with nvidia-smi (temperature, power, SM clock, clock event
reasons: what the driver reports). :func:`judge` turns the recorded rounds into
a verdict:

- drops: a round whose sweep the gate failed, or whose busbw at the largest size
  is more than :data:`DROP_TOLERANCE` under the soak's median;
- variance: busbw's coefficient of variation at the largest size across rounds
  above :data:`CV_MAX`;
- errors: ``#wrong``, an nccl-tests failure line, a failed check in any round;
- throttling: a hardware clock event reason (:data:`THROTTLE_HW`) on a node, or
  its SM clock more than :data:`CLOCK_TOLERANCE` under its first round's while
  not idle.

soak.json and soak.html go into the run's directory (each round's report.json
and logs under ``round-NNN/``). A soak never becomes ``last-good``: a run that
stressed the cluster for an hour is not the reference a quick validate compares with.
"""

from __future__ import annotations

import json
import re
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from sparkctl import __version__, console, remote
from sparkctl.collection import tool_output
from sparkctl.errors import ExitCode, SparkctlError
from sparkctl.inventory import Inventory
from sparkctl.lock import inventory_lock
from sparkctl.playbook import results_dir
from sparkctl.remote import Runner
from sparkctl.report import soak as soak_report
from sparkctl.report.model import Report, Thresholds
from sparkctl.report.numbers import gbs, human_size
from sparkctl.report.soak import NodeReading, Problem, Round, RoundNccl, Soak, Verdict
from sparkctl.validate import run

# A round's busbw at the largest size more than this fraction under the soak's median
# is a drop (the gate's own baseline tolerance is about comparing runs days apart; a
# soak compares a run with itself minutes later).
DROP_TOLERANCE = 0.10
# busbw's coefficient of variation (population standard deviation / mean) at the
# largest size across rounds above this is unstable.
CV_MAX = 0.05
# A node's SM clock more than this fraction under its first round's reading, while
# the driver does not say the GPU is idle, is throttling.
CLOCK_TOLERANCE = 0.10

# NVML's clocks event reasons (nvml.h, nvmlClocksEventReasons): the bits that slow the
# GPU down for hardware reasons fail the soak; the software caps are noted.
GPU_IDLE = 0x1
SW_POWER_CAP = 0x4
HW_SLOWDOWN = 0x8
SW_THERMAL_SLOWDOWN = 0x20
HW_THERMAL_SLOWDOWN = 0x40
HW_POWER_BRAKE_SLOWDOWN = 0x80
THROTTLE_HW = HW_SLOWDOWN | HW_THERMAL_SLOWDOWN | HW_POWER_BRAKE_SLOWDOWN
THROTTLE_SW = SW_POWER_CAP | SW_THERMAL_SLOWDOWN
_REASON_NAMES = {
    GPU_IDLE: "gpu_idle",
    SW_POWER_CAP: "sw_power_cap",
    HW_SLOWDOWN: "hw_slowdown",
    SW_THERMAL_SLOWDOWN: "sw_thermal_slowdown",
    HW_THERMAL_SLOWDOWN: "hw_thermal_slowdown",
    HW_POWER_BRAKE_SLOWDOWN: "hw_power_brake_slowdown",
}

# What a soak reads from each node's nvidia-smi after a round; a field the driver
# refuses is left out of the node's later queries.
GPU_FIELDS = ("temperature.gpu", "power.draw", "clocks.sm", "clocks_event_reasons.active")

_DURATION = re.compile(r"([1-9][0-9]{0,6})([smh])")
_UNIT_S = {"s": 1, "m": 60, "h": 3600}
DURATION_HINT = (
    "give a whole number of seconds, minutes or hours: --soak 90s, --soak 30m, --soak 2h"
)


def parse_duration(text: str) -> float:
    """``Ns``, ``Nm`` or ``Nh`` (N a positive whole number) in seconds; anything else
    is refused with exit 2."""
    m = _DURATION.fullmatch(text)
    if m is None:
        raise SparkctlError(
            f"--soak {text!r} is not a duration", ExitCode.BAD_INPUT, hint=DURATION_HINT
        )
    return float(int(m.group(1)) * _UNIT_S[m.group(2)])


# ------------------------------------------------------------------ the verdict
def reasons_named(mask: int) -> str:
    names = [name for bit, name in _REASON_NAMES.items() if mask & bit]
    return f"{mask:#x}" + (f" ({', '.join(names)})" if names else "")


def _reading(r: NodeReading) -> str:
    parts = []
    if r.clock_sm_mhz is not None:
        parts.append(f"SM clock {r.clock_sm_mhz:.0f} MHz")
    if r.temperature_c is not None:
        parts.append(f"{r.temperature_c:.0f} C")
    if r.power_w is not None:
        parts.append(f"{r.power_w:.1f} W")
    return ", ".join(parts)


def common_size(rounds: Sequence[Round], collective: str) -> int | None:
    """The largest size every round that ran ``collective`` swept (a node's free memory
    sets each round's top)."""
    sweeps = [set(r.busbw) for x in rounds if (r := x.run(collective)) and r.busbw]
    common = set.intersection(*sweeps) if sweeps else set()
    return max(common) if common else None


def _round_problems(x: Round) -> list[Problem]:
    """One round's failed checks, #wrong, failure lines and a sweep the gate failed."""
    k = x.index
    problems = [
        Problem(
            "errors",
            k,
            c.host,
            f"round {k}: {c.host} {c.check}{' ' + c.subject if c.subject else ''} "
            f"{c.outcome}: {c.message}",
        )
        for c in x.failed_checks
    ]
    for r in x.nccl:
        name = r.collective
        if r.wrong:
            problems.append(Problem("errors", k, name, f"round {k}: {name} #wrong {r.wrong}"))
        problems += [Problem("errors", k, name, f"round {k}: {name}: {e}") for e in r.errors[:3]]
        if r.outcome == "failed":
            problems.append(
                Problem("drop", k, name, f"round {k}: {name} below the gate: {r.message}")
            )
        elif r.outcome == "error" and not r.errors:
            problems.append(Problem("errors", k, name, f"round {k}: {name}: {r.message}"))
    return problems


def _spread(
    rounds: Sequence[Round], name: str, size: int | None
) -> tuple[float | None, float | None, list[Problem]]:
    """``name``'s median and coefficient of variation at ``size`` across rounds, and
    the rounds that dropped under the median or the variation too wide."""
    figures = [
        (x.index, run.busbw[size])
        for x in rounds
        if size is not None and (run := x.run(name)) and size in run.busbw
    ]
    if size is None or not figures:
        return None, None, []
    values = [v for _, v in figures]
    med = statistics.median(values)
    mean = statistics.fmean(values)
    cv = statistics.pstdev(values) / mean if len(values) > 1 and mean > 0 else None
    problems = [
        Problem(
            "drop",
            k,
            name,
            f"round {k}: {name} busbw {gbs(v)} GB/s at {human_size(size)}, "
            f"{(1 - v / med) * 100:.0f}% under the soak's median {gbs(med)} GB/s "
            f"(tolerance {DROP_TOLERANCE:.0%})",
        )
        for k, v in figures
        if v < med * (1 - DROP_TOLERANCE)
    ]
    if cv is not None and cv > CV_MAX:
        low_k, low_v = min(figures, key=lambda f: f[1])
        problems.append(
            Problem(
                "variance",
                None,
                name,
                f"{name} busbw at {human_size(size)} varies {cv:.1%} across "
                f"{len(values)} rounds (coefficient of variation, at most {CV_MAX:.0%}); "
                f"lowest round {low_k}: {gbs(low_v)} GB/s",
            )
        )
    return med, cv, problems


def judge(rounds: Sequence[Round]) -> Verdict:
    """The soak's verdict from its recorded rounds alone."""
    problems = [p for x in rounds for p in _round_problems(x)]
    notes: list[str] = []
    cv: dict[str, float | None] = {}
    median: dict[str, float | None] = {}
    size_of: dict[str, int | None] = {}
    for name in dict.fromkeys(r.collective for x in rounds for r in x.nccl):
        size_of[name] = size = common_size(rounds, name)
        median[name], cv[name], spread = _spread(rounds, name, size)
        problems += spread
    problems += _throttling(rounds, notes)
    if not rounds:  # interrupted before a round finished: nothing says it is stable
        problems.append(Problem("errors", None, "soak", "no round finished"))
    order = {"errors": 0, "drop": 1, "throttling": 2, "variance": 3}
    problems.sort(key=lambda p: (p.round if p.round is not None else 1 << 30, order[p.kind]))
    return Verdict(
        problems=problems,
        cv=cv,
        median=median,
        size=size_of,
        tolerances={"drop": DROP_TOLERANCE, "cv_max": CV_MAX, "clock": CLOCK_TOLERANCE},
        notes=notes,
    )


def _throttling(rounds: Sequence[Round], notes: list[str]) -> list[Problem]:
    problems: list[Problem] = []
    first_clock: dict[str, tuple[int, float]] = {}
    for x in rounds:
        k = x.index
        for r in x.nodes:
            mask = r.clock_event_reasons
            if mask is not None and mask & THROTTLE_HW:
                problems.append(
                    Problem(
                        "throttling",
                        k,
                        r.node,
                        f"round {k}: {r.node} clock event reasons {reasons_named(mask)}"
                        + (f" at {_reading(r)}" if _reading(r) else ""),
                    )
                )
            elif mask is not None and mask & THROTTLE_SW:
                notes.append(
                    f"round {k}: {r.node} clock event reasons {reasons_named(mask)} "
                    f"(a software cap; {_reading(r) or 'no other reading'})"
                )
            if r.clock_sm_mhz is None:
                continue
            if r.node not in first_clock:
                first_clock[r.node] = (k, r.clock_sm_mhz)
                continue
            k0, base = first_clock[r.node]
            idle = mask is not None and bool(mask & GPU_IDLE)
            if not idle and r.clock_sm_mhz < base * (1 - CLOCK_TOLERANCE):
                problems.append(
                    Problem(
                        "throttling",
                        k,
                        r.node,
                        f"round {k}: {r.node} SM clock {r.clock_sm_mhz:.0f} MHz, "
                        f"{(1 - r.clock_sm_mhz / base) * 100:.0f}% under round {k0}'s "
                        f"{base:.0f} MHz (tolerance {CLOCK_TOLERANCE:.0%})"
                        + (f", {reasons_named(mask)}" if mask is not None else ""),
                    )
                )
    return problems


# ------------------------------------------------------------------ readings
def _number(value: str | None) -> float | None:
    try:
        return float(value) if value is not None else None
    except ValueError:
        return None


def _mask(value: str | None) -> int | None:
    try:
        return int(value, 16) if value is not None else None
    except ValueError:
        return None


def reading_from(node: str, text: str, fields: Sequence[str]) -> NodeReading:
    """A node's reading from ``nvidia-smi --query-gpu=<fields> --format=csv`` (the first
    GPU: a Spark has one)."""
    rows = tool_output.nvidia_smi_csv(text, list(fields))
    if not rows:
        return NodeReading(node, note="nvidia-smi listed no GPU")
    row = rows[0]
    return NodeReading(
        node,
        temperature_c=_number(row.get("temperature.gpu")),
        power_w=_number(row.get("power.draw")),
        clock_sm_mhz=_number(row.get("clocks.sm")),
        clock_event_reasons=_mask(row.get("clocks_event_reasons.active")),
    )


def read_node(runner: Runner, node: str, refused: set[str]) -> NodeReading:
    """The node's GPU now; a field its nvidia-smi refuses is added to ``refused`` and
    the query asked again without it."""
    while fields := [f for f in GPU_FIELDS if f not in refused]:
        rc, out = runner(node, f"nvidia-smi --query-gpu={','.join(fields)} --format=csv", 30)
        if rc == 0:
            try:
                reading = reading_from(node, out, fields)
            except tool_output.ToolOutputError as e:
                return NodeReading(node, note=f"nvidia-smi: {e}")
            gone = [f for f in GPU_FIELDS if f in refused]
            note = f"not reported: {', '.join(gone)}" if gone else ""
            return NodeReading(
                reading.node,
                reading.temperature_c,
                reading.power_w,
                reading.clock_sm_mhz,
                reading.clock_event_reasons,
                note or reading.note,
            )
        field_ = tool_output.nvidia_smi_refused_field(out)
        if field_ not in fields:
            first = next((ln for ln in out.splitlines() if ln.strip()), "")
            return NodeReading(node, note=f"nvidia-smi rc {rc}: {first[:200]}")
        refused.add(field_)
    return NodeReading(node, note="nvidia-smi reports none of " + ", ".join(GPU_FIELDS))


# ------------------------------------------------------------------ the loop
@dataclass
class SoakOptions:
    inventory: Inventory
    duration_s: float
    nccl: bool = True
    collectives: Sequence[str] = ()
    extra: dict[str, object] = field(default_factory=dict)


def _round_figures(report: Report) -> tuple[list[RoundNccl], int]:
    out = []
    for r in report.nccl:
        if r.scope != "all":
            continue
        rep = r.report or {}
        out.append(
            RoundNccl(
                collective=r.collective,
                outcome=r.outcome,
                message=r.message,
                busbw=r.busbw_by_size(),
                fitted_busbw=r.fit.busbw if r.fit else None,
                wrong=int(rep.get("wrong", 0) or 0),
                errors=[str(e) for e in rep.get("errors", [])],
            )
        )
    return out, len(report.checks)


def rounds_expected(done: int, elapsed: float, duration: float) -> int:
    """How many rounds the soak will have run, after ``done`` rounds in ``elapsed``
    seconds: ``done`` once DURATION has passed (a soak shorter than a round runs one),
    else at least one more, as many as the rounds so far took on average fit in the
    time left."""
    left = duration - elapsed
    if left <= 0:
        return done
    return done + max(1, round(left / (elapsed / done))) if elapsed > 0 else done + 1


def progress_line(x: Round, expected: int, readings: Sequence[NodeReading]) -> str:
    """round k/n, elapsed, busbw at the largest size per collective, the hottest node."""
    parts = [f"round {x.index}/{expected}", f"{x.ended_s:.0f} s elapsed"]
    for r in x.nccl:
        size = r.largest_size
        figure = (
            f"{gbs(r.busbw[size])} GB/s at {human_size(size)}" if size is not None else "no rows"
        )
        parts.append(f"{r.collective} {figure} ({r.outcome})")
    temps = [(r.temperature_c, r.node) for r in readings if r.temperature_c is not None]
    if temps:
        t, node = max(temps)
        parts.append(f"hottest {node} {t:.0f} C")
    if x.failed_checks:
        parts.append(f"{len(x.failed_checks)} failed checks")
    return ", ".join(parts)


@dataclass
class _Soaking:
    """What every round of one soak shares."""

    opts: SoakOptions
    run_dir: Path
    nodes: list[str]
    stamp: str
    start: float
    clock: Callable[[], float]
    rounds: list[Round] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    th: Thresholds | None = None
    refused: dict[str, set[str]] = field(default_factory=dict)

    def finish(self) -> Soak:
        inv = self.opts.inventory
        result = Soak(
            run_id=self.run_dir.name,
            cluster=inv.cluster,
            inventory=str(inv.path),
            started=self.stamp,
            sparkctl_version=__version__,
            hosts=self.nodes,
            thresholds=self.th or Thresholds(0.0, 0.0, 0, 0.0),
            requested_s=self.opts.duration_s,
            rounds=self.rounds,
            verdict=judge(self.rounds),
            duration_s=self.clock() - self.start,
            notes=[*self.notes, "a soak never becomes last-good"],
        )
        from sparkctl.report import soak_html  # noqa: PLC0415 -- matplotlib on use

        soak_html.write(result, self.run_dir)
        return result


def _one_round(s: _Soaking, session: remote.Remote, collectives: Sequence[str]) -> Round:
    """The node checks, the NCCL sweep and the nodes' GPU readings once, into round-NNN/."""
    inv, nodes, clock = s.opts.inventory, s.nodes, s.clock
    plan, runner = session.plan, session.runner
    k = len(s.rounds) + 1
    began = clock()
    round_dir = s.run_dir / f"round-{k:03d}"
    round_dir.mkdir()
    console.progress(f"round {k}: node checks and the NCCL sweep")
    checks, facts, down, mesh = run.node_round(
        inv,
        plan,
        session.ssh_config,
        nodes,
        plan_file=s.run_dir / "plan.json",
        out_dir=round_dir,
    )
    if s.th is None or s.th.line_rate_gbytes == 0:
        rate = run.line_rate(plan) if nodes[0] not in down else 0.0
        s.th = run.thresholds(plan, rate)
    report = Report(
        run_id=f"{s.run_dir.name}/{round_dir.name}",
        cluster=inv.cluster,
        inventory=str(inv.path),
        started=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        sparkctl_version=__version__,
        hosts=nodes,
        thresholds=s.th,
        checks=checks,
        localisation=mesh,
    )
    cut_off = run.nodes_without_socket_twin(plan, checks)
    if not s.opts.nccl:
        report.notes.append("nccl-tests: skipped (--no-nccl)")
    elif cut_off:
        report.notes.append(f"nccl-tests: not started: {', '.join(cut_off)} cannot carry it")
    else:
        runs, findings, gate_notes = run.nccl_gate(
            inv,
            plan,
            facts,
            runner,
            th=s.th,
            run_dir=round_dir,
            collectives=collectives,
            checks=checks,
        )
        report.nccl, report.localisation = runs, report.localisation + findings
        report.notes += gate_notes
    readings = [
        NodeReading(n, note="the node did not answer")
        if n in down
        else read_node(runner, n, s.refused.setdefault(n, set()))
        for n in nodes
    ]
    report.duration_s = clock() - began
    (round_dir / "report.json").write_text(json.dumps(report.to_dict(), indent=2) + "\n")
    figures, count = _round_figures(report)
    return Round(
        index=k,
        started_s=began - s.start,
        duration_s=clock() - began,
        nccl=figures,
        failed_checks=report.failed_checks(),
        checks=count,
        nodes=readings,
        notes=list(report.notes),
    )


def soak(opts: SoakOptions, *, clock: Callable[[], float] = time.monotonic) -> tuple[Soak, Path]:
    """Rounds of node checks and NCCL sweeps for ``opts.duration_s``; soak.json and
    soak.html in the run's directory. Never touches last-good."""
    inv = opts.inventory
    run_dir = results_dir(inv.cluster, "soak")
    run_dir.mkdir(parents=True)
    s = _Soaking(
        opts=opts,
        run_dir=run_dir,
        nodes=remote.node_names(inv),
        stamp=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        start=clock(),
        clock=clock,
    )
    with inventory_lock(inv, "validate"):
        session = remote.connect(inv, run_dir, opts.extra)
        collectives = list(opts.collectives) or list(
            session.plan.node(s.nodes[0]).validate.collectives
        )
        try:
            while True:
                x = _one_round(s, session, collectives)
                s.rounds.append(x)
                elapsed = clock() - s.start
                expected = rounds_expected(x.index, elapsed, opts.duration_s)
                console.progress(progress_line(x, expected, x.nodes))
                if expected == x.index:
                    break
        except KeyboardInterrupt:
            s.notes.append(
                f"interrupted during round {len(s.rounds) + 1}: judged on the rounds before"
            )
            s.finish()
            raise
        result = s.finish()
    return result, run_dir


def failure(result: Soak, run_dir: Path) -> SparkctlError | None:
    """The error to exit with (1, naming round, node and figure), or None when stable."""
    if result.verdict.stable:
        return None
    return SparkctlError(
        f"soak {result.verdict.reason()} (report: {run_dir / soak_report.SOAK_HTML})",
        ExitCode.CHECKS_FAILED,
    )

"""The NCCL bandwidth gate's judgement: one parsed nccl-tests run, pairs, a saved log.

The alpha-beta model (time = latency + bytes / bandwidth) fitted over at least
three of the largest sizes of the sweep, out-of-place and in-place together,
the latency held at 0 or above, gives the bus bandwidth the link tends to and
its standard error; that fitted busbw must reach the collective's fraction of
the line rate (a fit below it by less than two standard errors is not told
apart from it), and the largest size actually measured must reach a floor
below it (``floor_ratio`` of the threshold), so that a fit cannot pass what
was never measured; a fit above the line rate is flagged. Real GB10 logs
(tests/fixtures/nccl): healthy pairs measure 19.7-19.9 GB/s at 1 GiB and 23.7
GB/s at 16 GiB, and their fit is 22.3-24.4 GB/s whatever the top of the sweep,
a verdict no +-3 % timing change per size flips; the degraded one is 2.8 GB/s
everywhere. Any ``#wrong`` or out-of-bounds value is a failure; so is a run
whose NCCL is not the pinned build, or with fewer distinct hosts and GPUs than
ranks launched, or on sockets where RDMA is expected; a run whose log does not
show its transport is not judged (:func:`settle`). Pairwise runs, judged with
the same fit, each get a verdict against the best pair and point at the node
whose pairs are all slow (:func:`pair_verdicts`, :func:`localise`).

Parsing is :mod:`sparkctl.nccl_parse`'s; launching is
:mod:`sparkctl.validate.nccl_run`'s. Nothing here starts a process.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from sparkctl import nccl_parse
from sparkctl.errors import ExitCode, SparkctlError
from sparkctl.report.model import Finding, Fit, Judged, NcclRun, Outcome, Thresholds
from sparkctl.units import human_bytes

PROGRAMS = {
    "all_reduce": "all_reduce_perf",
    "all_gather": "all_gather_perf",
    "reduce_scatter": "reduce_scatter_perf",
}


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
        calibrated_bytes=int(v.get("nccl_calibrated_bytes", 0)),
    )


def _precise(row: nccl_parse.Row, collective: str, nranks: int) -> float:
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


# A line through two sizes moves with every timing change of either: on the real GB10
# logs (tests/fixtures/nccl) a 2 % change at the top of a 512 MiB..1 GiB sweep moves the
# fit by 4 % (22.25 to 21.33 GB/s, across the 21.875 threshold). Three sizes or more
# wherever the sweep has them, whatever validate_judged_sizes asks for.
MIN_FIT_SIZES = 3
# The verdict's margin, in standard errors of the fitted busbw: a fit below the threshold
# by less than this is not told apart from it (and passes, the floor still applying).
# Two standard errors keep every real healthy GB10 log passing with any +-3 % timing
# change per size, and the degraded one failing (tests/unit/test_validate_nccl.py).
UNCERTAINTY_SE = 2.0


# The first words of a run's message when its sweep topped below the calibrated size
# (validate names the node with the least memory after them).
NOT_CALIBRATED = "not judged on bandwidth"


def fitted_sizes(judged_sizes: int) -> int:
    """How many of the largest sizes the gate fits: ``judged_sizes``, at least three."""
    return max(MIN_FIT_SIZES, judged_sizes)


def _line(points: Sequence[tuple[float, float]]) -> tuple[float, float, float, bool] | None:
    """Least squares of time against bytes with a latency that is not below 0.

    (latency, slope, standard error of the slope, whether the latency was constrained);
    None where times do not grow with size. The free fit first; where its intercept is
    below 0 (a latency no link has: noise in the rows) the line through the origin,
    which is the least-squares line under latency >= 0 (the constrained optimum of a
    convex problem sits on the boundary when the free one is outside it)."""
    n = len(points)
    mean_s = sum(s for s, _ in points) / n
    mean_t = sum(t for _, t in points) / n
    sxx = sum((s - mean_s) ** 2 for s, _ in points)
    slope = sum((s - mean_s) * (t - mean_t) for s, t in points) / sxx
    if not slope > 0:
        return None
    latency = mean_t - slope * mean_s
    if latency >= 0:
        squares = sum((t - latency - slope * s) ** 2 for s, t in points)
        se = math.sqrt(squares / (n - 2) / sxx) if n > 2 else 0.0
        return latency, slope, se, False
    sss = sum(s * s for s, _ in points)
    slope = sum(s * t for s, t in points) / sss
    squares = sum((t - slope * s) ** 2 for s, t in points)
    se = math.sqrt(squares / (n - 1) / sss) if n > 1 else 0.0
    return 0.0, slope, se, True


def fit(rep: nccl_parse.NcclReport, collective: str, nranks: int, judged_sizes: int) -> Fit:
    """The alpha-beta model over the largest sizes of ``rep`` (:func:`fitted_sizes`).

    Least squares of time (us) against bytes over every out-of-place and in-place
    time of those sizes, the latency held at 0 or above (:func:`_line`): slope =
    1 / algbw, intercept = latency. busbw is algbw times the busbw factor
    (doc/PERFORMANCE.md of nccl-tests), the same conversion nccl-tests prints; its
    standard error comes from the slope's (the delta method: a relative error of the
    slope is the same relative error of the bandwidth). With fewer than two sizes,
    or a slope that is not positive (times that do not grow with size), there is no
    line: the fit is the largest size's own measurement (method "measured").
    """
    factor = busbw_factor(collective, nranks)
    sizes = sorted({r.size for r in rep.rows if r.size > 0})[-fitted_sizes(judged_sizes) :]
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
    line = _line(timed)
    if line is None:
        return measured
    latency, slope, slope_se, constrained = line  # us, us per byte
    algbw = 1.0 / slope / 1e3  # bytes per us -> GB/s
    n = len(timed)
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
        busbw_se=round(algbw * factor * slope_se / slope, 6),
        latency_constrained=constrained,
    )


def consistency(rep: nccl_parse.NcclReport, nranks: int, pinned_nccl: str | None) -> str | None:
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


def judge(  # noqa: PLR0911 -- one return per verdict, in the order they are decided
    rep: nccl_parse.NcclReport, collective: str, nranks: int, th: Thresholds
) -> tuple[Outcome, str, list[Judged], Fit]:
    """The gate on one parsed run: wrong results, then the fitted busbw against the
    collective's threshold, then the largest measured size against the floor."""
    judged = []
    for row in rep.largest(fitted_sizes(th.judged_sizes)):
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
    if model.method == "fit" and th.line_rate_gbytes > 0 and model.busbw > th.line_rate_gbytes:
        model = replace(model, above_line_rate=True)
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
    if th.threshold_for(collective) is not None and model.largest_size < th.calibrated_bytes:
        # Below the tops real runs hold the verdict to, busbw says more about the
        # size than about the link: real healthy GB10 pairs measure 19 GB/s at 512 MiB.
        return (
            "not_judged",
            f"{NOT_CALIBRATED}: the sweep's top, {human(model.largest_size)}, is below "
            f"{human(th.calibrated_bytes)}, the smallest top at which this gate is "
            f"calibrated on real runs (validate_nccl_calibrated_bytes); {fitted}",
            judged,
            model,
        )
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
    margin = UNCERTAINTY_SE * model.busbw_se
    if model.busbw + margin < threshold:
        return "failed", f"{fitted}: below the {limit}", judged, model
    verdict = (
        f"{fitted}: below the {limit} by less than {UNCERTAINTY_SE:g} standard errors: not "
        "told apart from it, passes"
        if model.busbw < threshold
        else f"{fitted} (passes the {limit})"
    )
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
    return "passed", verdict, judged, model


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
    span = f"{human(model.sizes[0])}..{human(model.sizes[-1])}, {len(model.sizes)} sizes"
    latency = (
        "latency 0 us (held at 0: the free fit crossed below it)"
        if model.latency_constrained
        else f"latency {model.latency_us:.0f} us"
    )
    flag = (
        f"; ABOVE the line rate {line_rate:g} GB/s, which no link exceeds: rows too noisy "
        "to fit, or a wrong line rate"
        if model.above_line_rate
        else ""
    )
    return (
        f"fitted busbw {model.busbw:.3f} +- {model.busbw_se:.3f} GB/s (standard error) = "
        f"{share} (alpha-beta fit over {span}: {latency}, residual {model.residual:.1%}; "
        f"{largest}{flag})"
    )


def human(size: int) -> str:
    """A sweep size exactly (a power of two must not read rounded): 16 MiB, 3145729 B."""
    return human_bytes(size, exact=True)


SOCKETS = (
    "NCCL used the Socket transport, not RDMA (its INFO lines: 'Using network "
    "Socket' / 'via NET/Socket' / 'NET/IB : No device found.'): the RoCE devices "
    "in NCCL_IB_HCA were not usable; check ibv_devinfo and the roce_device checks"
)
UNSEEN = (
    "the log does not show which network NCCL used (no 'Using network IB' / 'via NET/IB' "
    "INFO line), so a silent fallback to sockets cannot be ruled out: run with "
    "NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,NET (the nccl role's nccl_debug and "
    "nccl_debug_subsys)"
)


def settle(
    outcome: Outcome,
    message: str,
    transport: str | None,
    rdma_expected: bool,
    problem: str | None = None,
) -> tuple[Outcome, str]:
    """The run's verdict from the gate's (:func:`judge`) and what else its log says.

    Where RDMA is expected: NCCL on sockets fails it (NCCL falls back to TCP silently,
    no usable RoCE device or no /dev/infiniband in a container, and still completes,
    about 2.5x slower); then ``problem`` (:func:`consistency`) fails it; then a log
    that does not show the transport at all leaves a pass "not judged" (a passing
    bandwidth is no proof of RDMA to the gate), and a failure failed, with the hint.
    ``transport`` is :attr:`NcclReport.transport` (NCCL's INFO lines, NCCL_DEBUG=INFO)."""
    if rdma_expected and transport == "socket":
        return "failed", f"{SOCKETS} ({message})"
    if problem:
        return "failed", f"{problem} ({message})"
    if rdma_expected and transport is None:
        if outcome == "passed":
            return "not_judged", f"{UNSEEN} (bandwidth: {message})"
        return outcome, f"{message}; {UNSEEN}"
    return outcome, message


# How far below the best pair a healthy pair can measure. Real healthy GB10 pairs
# (tests/fixtures/nccl) fit 23.07 and 24.22 GB/s, 4.8 % apart, and public runs of the
# same size spread 3-4 % (22.9-23.7 GB/s at 16 GiB, 22.1-22.9 at 4 GiB); 8 % keeps
# that noise clear while a node at 87 % of its peers, or the ~75 % of a second
# controller at PCIe Gen5 x2 (an old BIOS), is named. The old rule (below 0.7 of the
# best) left a blind band from 70 to 87 %, where the gate fails and no node is named.
HEALTHY_SPREAD = 0.08


@dataclass(frozen=True)
class PairVerdict:
    """One pair as localisation judged it: its busbw and whether it is slow, and why."""

    hosts: tuple[str, ...]
    busbw: float | None  # the fitted busbw (pair_busbw); None: nothing usable measured
    se: float  # its standard error (0 without a fit)
    slow: bool
    why: str

    def line(self) -> str:
        value = (
            "no measurement"
            if self.busbw is None
            else f"{self.busbw:.3f}" + (f" +- {self.se:.3f}" if self.se else "") + " GB/s"
        )
        return f"pair {'-'.join(self.hosts)}: {value}: {'SLOW' if self.slow else 'ok'} ({self.why})"


def pair_verdicts(pairs: Sequence[NcclRun], threshold: float | None = None) -> list[PairVerdict]:
    """Every pair's verdict, in the order of ``pairs``.

    A pair with no usable measurement (no result, wrong data) is slow. A measured pair
    is slow when it fails the absolute ``threshold`` (GB/s, the gate's margin of
    UNCERTAINTY_SE standard errors included) while the best pair passes it, or when it
    falls more than the healthy spread below the best pair: HEALTHY_SPREAD of the
    best's busbw, or their combined uncertainty where that is wider. Failing the
    threshold alone is not slow: on a cluster whose every pair misses it, the pairs
    still say which node is slower (and if none is, the cause is common)."""
    measured = {
        id(r): (v, r.fit.busbw_se if r.fit else 0.0)
        for r in pairs
        if _measured(r) and (v := pair_busbw(r)) is not None
    }
    best_run = max(measured.items(), key=lambda kv: kv[1][0], default=None)
    out = []
    for r in pairs:
        hosts = tuple(r.hosts)
        if id(r) not in measured or best_run is None:
            out.append(PairVerdict(hosts, None, 0.0, True, r.message or "no measurement"))
            continue
        value, se = measured[id(r)]
        best, best_se = best_run[1]
        if id(r) == best_run[0]:
            out.append(PairVerdict(hosts, value, se, False, "the best pair"))
            continue
        share = value / best if best > 0 else 0.0
        allowed = max(HEALTHY_SPREAD * best, UNCERTAINTY_SE * math.hypot(se, best_se))
        passes = threshold is None or value + UNCERTAINTY_SE * se >= threshold
        best_passes = threshold is not None and best + UNCERTAINTY_SE * best_se >= threshold
        if not passes and best_passes:
            why = (
                f"{share:.0%} of the best pair; below the threshold {threshold:.3f} GB/s, "
                "which the best pair reaches"
            )
            out.append(PairVerdict(hosts, value, se, True, why))
        elif best - value > allowed:
            why = (
                f"{share:.0%} of the best pair's {best:.3f} GB/s: more than the healthy "
                f"spread ({allowed / best:.0%}) below it"
            )
            out.append(PairVerdict(hosts, value, se, True, why))
        else:
            out.append(PairVerdict(hosts, value, se, False, f"{share:.0%} of the best pair"))
    return out


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
    """The node(s) whose pairs are all slow while others are not, or the pairs, or the
    fabric (:func:`pair_verdicts` says which pair is slow). ``threshold`` (GB/s) is the
    gate's, for the verdicts and the words of the findings; ``where(node)`` names the
    place to look at on a named node (its twin and switch port)."""
    verdicts = pair_verdicts(pairs, threshold)
    ok = {frozenset(v.hosts): not v.slow for v in verdicts}
    values = [v.busbw for v in verdicts if v.busbw is not None]
    best = max(values, default=0.0)
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
        mine = [v for v in verdicts if node in v.hosts]
        numbers = [v.busbw for v in mine if v.busbw is not None]
        detail = (
            f"{min(numbers):.3f} GB/s, {min(numbers) / best:.0%} of the best pair"
            if len(numbers) == len(mine) and best > 0
            else next(v.why for v in mine if v.busbw is None)
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
            Finding(v.hosts[0], "-".join(v.hosts), f"pair {' - '.join(v.hosts)}: {r.message}")
            for v, r in zip(verdicts, pairs, strict=True)
            if v.slow
        ]
    return findings


# ------------------------------------------------------------------ a saved log
def data_failures(rep: nccl_parse.NcclReport) -> list[str]:
    """What in the log itself fails it, whatever the bandwidth and whatever the collective:
    results nccl-tests counted wrong (its ``#wrong`` column, printed ``%5g`` per half in
    src/common.cu, or the older maximum-error column beyond its bound) and out-of-bounds
    values (its summary line)."""
    bad = []
    if rep.wrong:
        bad.append(f"{rep.wrong} wrong result(s) (#wrong)")
    if rep.oob_values:
        bad.append(f"{rep.oob_values} out-of-bounds value(s)")
    return bad


def collective_of(rep: nccl_parse.NcclReport, source: str, given: str | None = None) -> str:
    """The gate's name for the log's collective (``all_gather_perf`` -> all_gather), or
    ``given`` (``report nccl --collective``) for a log that does not print its own."""
    name = (rep.collective or "").removesuffix("_perf")
    if given is not None:
        if given not in PROGRAMS:
            raise SparkctlError(
                f"--collective {given}: the gate judges {', '.join(PROGRAMS)}", ExitCode.BAD_INPUT
            )
        if rep.collective and name != given:
            raise SparkctlError(
                f"{source}: the log is {rep.collective}, not --collective {given}",
                ExitCode.BAD_INPUT,
            )
        return given
    if name not in PROGRAMS:
        raise SparkctlError(
            f"{source}: the gate judges {', '.join(PROGRAMS)}; this log is "
            f"{rep.collective or 'of no named collective'}",
            ExitCode.BAD_INPUT,
            hint=None
            if rep.collective
            else "name it: --collective all_gather (or all_reduce, reduce_scatter)",
        )
    return name


def ranks_of(rep: nccl_parse.NcclReport, collective: str, source: str) -> int:
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


def gate_log(
    rep: nccl_parse.NcclReport,
    th: Thresholds,
    source: str,
    collective: str | None = None,
    *,
    rdma_expected: bool = True,
) -> NcclRun:
    """A saved log judged exactly as ``validate`` judges a run it launched (the ranks
    the log names, no pinned NCCL to compare with: that is the node's record; the
    transport judged as :func:`settle` does, where ``rdma_expected``, as on a Spark).

    Wrong data fails the log first: whether or not its collective can be named and its
    ranks counted, a log with ``#wrong`` or out-of-bounds values is FAILED, not a log
    the gate cannot read."""
    try:
        collective = collective_of(rep, source, collective)
        nranks = ranks_of(rep, collective, source)
    except SparkctlError:
        failures = data_failures(rep)
        if not failures:
            raise
        return NcclRun(
            collective=collective or (rep.collective or "unnamed").removesuffix("_perf"),
            scope="all",
            hosts=rep.hosts,
            outcome="failed",
            message=f"{'; '.join(failures)}: the data did not arrive intact (bandwidth not "
            "judged: the log names no collective the gate judges)",
            log=Path(source).name,
            report=rep.to_dict(),
        )
    outcome, message, judged, model = judge(rep, collective, nranks, th)
    outcome, message = settle(
        outcome, message, rep.transport, rdma_expected, consistency(rep, nranks, None)
    )
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

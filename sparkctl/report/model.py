"""The data of one validation run: what ``report.json`` holds.

Every part is a plain dataclass with ``to_dict``/``from_dict`` so a report
written by one run can be read back (``--baseline``) and compared. The
schema is documented in docs/report-schema.md; bump :data:`SCHEMA` when a
field changes meaning.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Literal

SCHEMA = 1

# "not_judged": the run completed but the gate cannot vouch for it (an NCCL run whose
# transport its log does not show, where RDMA is expected); it does not pass.
Outcome = Literal["passed", "failed", "skipped", "error", "not_judged"]
OUTCOMES: tuple[Outcome, ...] = ("passed", "failed", "skipped", "error", "not_judged")


@dataclass(frozen=True)
class Check:
    """One assertion on one host (one pytest case of the suite, or a cluster check).

    ``subject`` narrows it down: an interface, a peer and twin ("spark2 via a"),
    a RoCE device; None when the check is about the host as a whole.
    """

    check: str  # e.g. "twin_up", "mesh_jumbo"
    host: str  # node name, or "cluster" for checks across nodes
    subject: str | None
    outcome: Outcome
    message: str  # why it failed or was skipped; what was seen when it passed
    duration_s: float = 0.0

    @property
    def ok(self) -> bool:
        return self.outcome in ("passed", "skipped")

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Check:
        return cls(**data)


@dataclass(frozen=True)
class Thresholds:
    """What the bandwidth gate judges against (from the inventory and hardware profile).

    ``fractions`` holds the per-collective fractions where the inventory gives a
    mapping (``validate_busbw_min_fraction: {all_gather: 0.875, all_reduce: null}``);
    a collective it names with None is measured and reported but not gated on
    bandwidth. A collective it does not name, and every collective when the
    inventory gives one number, is judged at ``min_fraction``.
    """

    line_rate_gbytes: float  # one port, GB/s: 25.0 on a Spark, the shaped rate in the lab
    min_fraction: float  # the fitted busbw must reach this fraction of line rate
    judged_sizes: int  # how many of the largest sizes are fitted and judged
    baseline_tolerance: float  # a drop beyond this fraction of the baseline fails
    fractions: dict[str, float | None] = field(default_factory=dict)
    # The largest size measured must reach this fraction of the threshold (0: no floor,
    # as reports written before the fitted gate had).
    floor_ratio: float = 0.0
    # The smallest sweep top at which the gate is calibrated on real runs of the
    # hardware (validate_nccl_calibrated_bytes); a run that tops below it is not judged
    # on bandwidth. 0 in reports written before it was.
    calibrated_bytes: int = 0

    @property
    def min_busbw_gbytes(self) -> float:
        return self.line_rate_gbytes * self.min_fraction

    def fraction_for(self, collective: str) -> float | None:
        """The fraction ``collective`` is gated at; None: not gated on bandwidth."""
        return self.fractions.get(collective, self.min_fraction)

    def threshold_for(self, collective: str) -> float | None:
        """GB/s the fitted busbw of ``collective`` must reach; None: not gated."""
        fraction = self.fraction_for(collective)
        return None if fraction is None else self.line_rate_gbytes * fraction

    def floor_for(self, collective: str) -> float | None:
        """GB/s the largest measured size of ``collective`` must reach; None: no floor."""
        threshold = self.threshold_for(collective)
        return None if threshold is None or self.floor_ratio <= 0 else threshold * self.floor_ratio

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "min_busbw_gbytes": self.min_busbw_gbytes}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Thresholds:
        return cls(
            line_rate_gbytes=float(data["line_rate_gbytes"]),
            min_fraction=float(data["min_fraction"]),
            judged_sizes=int(data["judged_sizes"]),
            baseline_tolerance=float(data["baseline_tolerance"]),
            fractions={
                str(k): None if v is None else float(v)
                for k, v in (data.get("fractions") or {}).items()
            },
            floor_ratio=float(data.get("floor_ratio", 0.0)),
            calibrated_bytes=int(data.get("calibrated_bytes", 0)),
        )


@dataclass(frozen=True)
class Judged:
    """One judged size of a run: busbw (the lower of out-of-place and in-place)."""

    size: int
    busbw: float
    fraction: float  # of the line rate
    wrong: int


FitMethod = Literal["fit", "measured"]


@dataclass(frozen=True)
class Fit:
    """The alpha-beta model of one run: time = latency + bytes / bandwidth.

    Fitted by least squares over the judged sizes, out-of-place and in-place
    times together (nccl-tests' ``Avg bus bandwidth``, which NVIDIA's Spark script
    gates, averages the two halves too). ``busbw`` is the fitted bandwidth times
    the collective's busbw factor: what busbw tends to at sizes where latency no
    longer counts, which a memory-safe sweep never reaches. ``method`` is
    "measured" where no line can be fitted (one size, or times that do not grow
    with size): ``busbw`` is then the largest size's measurement itself.
    """

    method: FitMethod
    sizes: list[int]  # the sizes fitted (ascending, distinct)
    busbw: float  # GB/s
    algbw: float  # GB/s: bytes / (time - latency), before the busbw factor
    latency_us: float  # the model's time at 0 bytes, never below 0 (see latency_constrained)
    residual: float  # RMS of (measured - model) / measured over every fitted time
    factor: float  # the busbw factor used (2(n-1)/n for all_reduce, (n-1)/n otherwise)
    largest_size: int
    largest_busbw: float  # GB/s at the largest size, mean of the halves from size and time
    # The standard error of ``busbw`` (GB/s) from the scatter of the times about the line;
    # 0 where no line was fitted or the points sit on it.
    busbw_se: float = 0.0
    # The free fit's latency came out below 0 (noise, not physics): refitted through 0.
    latency_constrained: bool = False
    # ``busbw`` is above the line rate: no link carries more, so the rows are too noisy
    # for the fit or the line rate is wrong.
    above_line_rate: bool = False

    def model_busbw(self, size: int) -> float:
        """busbw the model predicts at ``size`` bytes (GB/s)."""
        if self.method != "fit":
            return self.busbw
        t_us = self.latency_us + size / (self.algbw * 1e3)
        return size / t_us / 1e3 * self.factor if t_us > 0 else self.busbw

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Fit:
        return cls(**{**data, "sizes": [int(s) for s in data["sizes"]]})


@dataclass(frozen=True)
class NcclRun:
    """One nccl-tests run: a collective over all nodes ("all") or one pair ("pair")."""

    collective: str  # all_reduce, all_gather, reduce_scatter
    scope: Literal["all", "pair"]
    hosts: list[str]
    outcome: Outcome
    message: str
    command: list[str] = field(default_factory=list)
    log: str | None = None  # file name in the run directory
    report: dict[str, Any] | None = None  # NcclReport.to_dict(): every row, avg, oob, errors
    judged: list[Judged] = field(default_factory=list)
    duration_s: float = 0.0
    fit: Fit | None = None  # the alpha-beta model the gate judged; None where no rows

    @property
    def key(self) -> str:
        return (
            f"{self.collective}[{','.join(self.hosts)}]"
            if self.scope == "pair"
            else self.collective
        )

    def busbw_by_size(self) -> dict[int, float]:
        """size -> the lower busbw of out-of-place and in-place, for every row."""
        if not self.report:
            return {}
        return {
            int(r["size"]): min(float(r["out_of_place"]["busbw"]), float(r["in_place"]["busbw"]))
            for r in self.report["rows"]
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> NcclRun:
        fit = data.get("fit")
        return cls(
            **{
                **data,
                "judged": [Judged(**j) for j in data.get("judged", [])],
                "fit": Fit.from_dict(fit) if fit else None,
            }
        )


@dataclass(frozen=True)
class Finding:
    """What localisation concluded: a node or a link to look at."""

    host: str
    subject: str | None  # interface / switch port / pair
    message: str

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Finding:
        return cls(**data)


@dataclass(frozen=True)
class BaselineItem:
    collective: str
    size: int
    baseline_busbw: float
    current_busbw: float
    change: float  # (current - baseline) / baseline
    outcome: Outcome

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> BaselineItem:
        return cls(**data)


@dataclass(frozen=True)
class Baseline:
    """The comparison with an earlier run."""

    path: str
    run_id: str
    tolerance: float
    items: list[BaselineItem]
    outcome: Outcome
    message: str

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Baseline:
        return cls(**{**data, "items": [BaselineItem.from_dict(i) for i in data["items"]]})


@dataclass
class Report:
    """Everything one ``validate`` run found; ``report.json`` is ``to_dict()``."""

    run_id: str
    cluster: str
    inventory: str
    started: str  # ISO 8601, UTC
    sparkctl_version: str
    hosts: list[str]
    thresholds: Thresholds
    checks: list[Check] = field(default_factory=list)
    nccl: list[NcclRun] = field(default_factory=list)
    localisation: list[Finding] = field(default_factory=list)
    baseline: Baseline | None = None
    notes: list[str] = field(default_factory=list)
    duration_s: float = 0.0
    schema: int = SCHEMA

    @property
    def verdict(self) -> Literal["passed", "failed", "not_judged"]:
        """failed: a check, an all-node run or the baseline failed; not_judged: nothing
        failed, but an all-node run could not be judged (its transport unseen, or a sweep
        below the calibrated size); passed otherwise."""
        gate = [r.outcome for r in self.nccl if r.scope == "all"]
        if (
            not all(c.ok for c in self.checks)
            or any(o not in ("passed", "skipped", "not_judged") for o in gate)
            or (self.baseline is not None and self.baseline.outcome == "failed")
        ):
            return "failed"
        return "not_judged" if "not_judged" in gate else "passed"

    def failed_checks(self) -> list[Check]:
        return [c for c in self.checks if not c.ok]

    def to_dict(self) -> dict[str, Any]:
        return {
            "schema": self.schema,
            "run_id": self.run_id,
            "cluster": self.cluster,
            "inventory": self.inventory,
            "started": self.started,
            "duration_s": round(self.duration_s, 3),
            "sparkctl_version": self.sparkctl_version,
            "verdict": self.verdict,
            "hosts": list(self.hosts),
            "thresholds": self.thresholds.to_dict(),
            "checks": [asdict(c) for c in self.checks],
            "nccl": [asdict(r) for r in self.nccl],
            "localisation": [asdict(f) for f in self.localisation],
            "baseline": asdict(self.baseline) if self.baseline else None,
            "notes": list(self.notes),
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Report:
        if data.get("schema") != SCHEMA:
            raise ValueError(f"report schema {data.get('schema')!r}, this sparkctl reads {SCHEMA}")
        return cls(
            run_id=data["run_id"],
            cluster=data["cluster"],
            inventory=data["inventory"],
            started=data["started"],
            sparkctl_version=data["sparkctl_version"],
            hosts=list(data["hosts"]),
            thresholds=Thresholds.from_dict(data["thresholds"]),
            checks=[Check.from_dict(c) for c in data["checks"]],
            nccl=[NcclRun.from_dict(r) for r in data["nccl"]],
            localisation=[Finding.from_dict(f) for f in data["localisation"]],
            baseline=Baseline.from_dict(data["baseline"]) if data.get("baseline") else None,
            notes=list(data.get("notes", [])),
            duration_s=float(data.get("duration_s", 0.0)),
        )


# The sizes a TP group's decode all-reduces (one token's hidden state a request: 4 KiB
# to 16 KiB in bf16 for hidden sizes 2048-8192, times the batch): latency's sizes.
LATENCY_MAX_BYTES = 1 << 20


def latency_rows(
    report: Report, max_bytes: int | None = LATENCY_MAX_BYTES
) -> list[tuple[int, float, float]]:
    """(size, out-of-place us, in-place us) of the all-node all_reduce run, up to 1 MiB
    (validate_nccl_latency_min_bytes starts its sweep there), or every size with
    ``max_bytes`` None."""
    run = next((r for r in report.nccl if r.collective == "all_reduce" and r.scope == "all"), None)
    if run is None or not run.report:
        return []
    rows = sorted(run.report["rows"], key=lambda r: int(r["size"]))
    return [
        (int(r["size"]), float(r["out_of_place"]["time_us"]), float(r["in_place"]["time_us"]))
        for r in rows
        if int(r["size"]) > 0 and (max_bytes is None or int(r["size"]) <= max_bytes)
    ]

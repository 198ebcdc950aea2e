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

Outcome = Literal["passed", "failed", "skipped", "error"]
OUTCOMES: tuple[Outcome, ...] = ("passed", "failed", "skipped", "error")


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
    """What the bandwidth gate judges against (from the inventory and hardware profile)."""

    line_rate_gbytes: float  # one port, GB/s: 25.0 on a Spark, the shaped rate in the lab
    min_fraction: float  # busbw at the largest sizes must reach this fraction of line rate
    judged_sizes: int  # how many of the largest sizes are judged
    baseline_tolerance: float  # a drop beyond this fraction of the baseline fails

    @property
    def min_busbw_gbytes(self) -> float:
        return self.line_rate_gbytes * self.min_fraction

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "min_busbw_gbytes": self.min_busbw_gbytes}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Thresholds:
        return cls(line_rate_gbytes=float(data["line_rate_gbytes"]),
                   min_fraction=float(data["min_fraction"]),
                   judged_sizes=int(data["judged_sizes"]),
                   baseline_tolerance=float(data["baseline_tolerance"]))


@dataclass(frozen=True)
class Judged:
    """One judged size of a run: busbw (the lower of out-of-place and in-place)."""

    size: int
    busbw: float
    fraction: float  # of the line rate
    wrong: int


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

    @property
    def key(self) -> str:
        return f"{self.collective}[{','.join(self.hosts)}]" if self.scope == "pair" \
            else self.collective

    def busbw_by_size(self) -> dict[int, float]:
        """size -> the lower busbw of out-of-place and in-place, for every row."""
        if not self.report:
            return {}
        return {int(r["size"]): min(float(r["out_of_place"]["busbw"]),
                                    float(r["in_place"]["busbw"]))
                for r in self.report["rows"]}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> NcclRun:
        return cls(**{**data, "judged": [Judged(**j) for j in data.get("judged", [])]})


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
    def verdict(self) -> Literal["passed", "failed"]:
        ok = all(c.ok for c in self.checks) \
            and all(r.outcome in ("passed", "skipped") for r in self.nccl if r.scope == "all") \
            and (self.baseline is None or self.baseline.outcome != "failed")
        return "passed" if ok else "failed"

    def failed_checks(self) -> list[Check]:
        return [c for c in self.checks if not c.ok]

    def to_dict(self) -> dict[str, Any]:
        return {
            "schema": self.schema, "run_id": self.run_id, "cluster": self.cluster,
            "inventory": self.inventory, "started": self.started,
            "duration_s": round(self.duration_s, 3), "sparkctl_version": self.sparkctl_version,
            "verdict": self.verdict, "hosts": list(self.hosts),
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
            run_id=data["run_id"], cluster=data["cluster"], inventory=data["inventory"],
            started=data["started"], sparkctl_version=data["sparkctl_version"],
            hosts=list(data["hosts"]), thresholds=Thresholds.from_dict(data["thresholds"]),
            checks=[Check.from_dict(c) for c in data["checks"]],
            nccl=[NcclRun.from_dict(r) for r in data["nccl"]],
            localisation=[Finding.from_dict(f) for f in data["localisation"]],
            baseline=Baseline.from_dict(data["baseline"]) if data.get("baseline") else None,
            notes=list(data.get("notes", [])), duration_s=float(data.get("duration_s", 0.0)),
        )

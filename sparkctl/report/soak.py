"""A burn-in (``sparkctl validate --soak``): what ``soak.json`` holds (soak_html writes it).

One :class:`Round` per repetition of the node checks and the NCCL sweep: the
sweep's busbw per size (the gate's figure: the lower of out-of-place and
in-place), its errors, the failed checks, and each node's GPU readings as
nvidia-smi reported them after the round. The :class:`Verdict` is computed by
``sparkctl.validate.soak.judge`` from the rounds alone; ``soak.html`` is drawn
from this data (:mod:`sparkctl.report.soak_html`). Each round's full report is
kept beside it, ``round-NNN/report.json``.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Literal

from sparkctl.report.model import Check, Thresholds

SOAK_SCHEMA = 1
SOAK_JSON = "soak.json"
SOAK_HTML = "soak.html"

ProblemKind = Literal["drop", "variance", "errors", "throttling"]


@dataclass(frozen=True)
class NodeReading:
    """One node's GPU after a round; None where nvidia-smi did not report the figure."""

    node: str
    temperature_c: float | None = None
    power_w: float | None = None
    clock_sm_mhz: float | None = None
    clock_event_reasons: int | None = None  # NVML's clocks event reasons bitmask
    note: str = ""  # why figures are missing: refused fields, a node that did not answer

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> NodeReading:
        return cls(**data)


@dataclass(frozen=True)
class RoundNccl:
    """One collective's all-node run in a round: busbw per size and its errors."""

    collective: str
    outcome: str  # the gate's outcome for the run
    message: str
    busbw: dict[int, float]  # size -> GB/s, the lower of out-of-place and in-place
    fitted_busbw: float | None = None
    wrong: int = 0
    errors: list[str] = field(default_factory=list)

    @property
    def largest_size(self) -> int | None:
        return max(self.busbw) if self.busbw else None

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "busbw": {str(k): v for k, v in sorted(self.busbw.items())}}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> RoundNccl:
        return cls(
            **{**data, "busbw": {int(k): float(v) for k, v in data.get("busbw", {}).items()}}
        )


@dataclass(frozen=True)
class Round:
    index: int  # 1-based
    started_s: float  # seconds since the soak started
    duration_s: float
    nccl: list[RoundNccl] = field(default_factory=list)
    failed_checks: list[Check] = field(default_factory=list)
    checks: int = 0  # checks run in the round, failed or not
    nodes: list[NodeReading] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @property
    def ended_s(self) -> float:
        return self.started_s + self.duration_s

    def run(self, collective: str) -> RoundNccl | None:
        return next((r for r in self.nccl if r.collective == collective), None)

    def to_dict(self) -> dict[str, Any]:
        return {
            "index": self.index,
            "started_s": round(self.started_s, 3),
            "duration_s": round(self.duration_s, 3),
            "nccl": [r.to_dict() for r in self.nccl],
            "failed_checks": [asdict(c) for c in self.failed_checks],
            "checks": self.checks,
            "nodes": [asdict(n) for n in self.nodes],
            "notes": list(self.notes),
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Round:
        return cls(
            index=int(data["index"]),
            started_s=float(data["started_s"]),
            duration_s=float(data["duration_s"]),
            nccl=[RoundNccl.from_dict(r) for r in data.get("nccl", [])],
            failed_checks=[Check.from_dict(c) for c in data.get("failed_checks", [])],
            checks=int(data.get("checks", 0)),
            nodes=[NodeReading.from_dict(n) for n in data.get("nodes", [])],
            notes=list(data.get("notes", [])),
        )


@dataclass(frozen=True)
class Problem:
    """One reason a soak is unstable, naming the round, the node (or collective), the figure."""

    kind: ProblemKind
    round: int | None  # None: across rounds (variance)
    subject: str  # a node, or a collective
    message: str

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Problem:
        return cls(**data)


@dataclass(frozen=True)
class Verdict:
    problems: list[Problem]
    # per collective, at the largest size every round swept: busbw's coefficient of
    # variation across rounds and its median (None: fewer than two rounds / no figure)
    cv: dict[str, float | None]
    median: dict[str, float | None]
    size: dict[str, int | None]
    tolerances: dict[str, float]
    notes: list[str] = field(default_factory=list)  # seen, not failing (soft clock events)

    @property
    def stable(self) -> bool:
        return not self.problems

    @property
    def outcome(self) -> Literal["stable", "unstable"]:
        return "stable" if self.stable else "unstable"

    def reason(self, limit: int = 3) -> str:
        if self.stable:
            return "stable"
        shown = "; ".join(p.message for p in self.problems[:limit])
        more = len(self.problems) - limit
        return f"unstable: {shown}" + (f" (+{more} more)" if more > 0 else "")

    def to_dict(self) -> dict[str, Any]:
        return {
            "outcome": self.outcome,
            "reason": self.reason(),
            "problems": [asdict(p) for p in self.problems],
            "cv": dict(self.cv),
            "median": dict(self.median),
            "size": dict(self.size),
            "tolerances": dict(self.tolerances),
            "notes": list(self.notes),
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Verdict:
        return cls(
            problems=[Problem.from_dict(p) for p in data.get("problems", [])],
            cv=dict(data.get("cv", {})),
            median=dict(data.get("median", {})),
            size=dict(data.get("size", {})),
            tolerances=dict(data.get("tolerances", {})),
            notes=list(data.get("notes", [])),
        )


@dataclass
class Soak:
    """Everything one ``validate --soak`` found; ``soak.json`` is ``to_dict()``."""

    run_id: str
    cluster: str
    inventory: str
    started: str  # ISO 8601, UTC
    sparkctl_version: str
    hosts: list[str]
    thresholds: Thresholds
    requested_s: float  # --soak DURATION
    rounds: list[Round]
    verdict: Verdict
    duration_s: float = 0.0
    notes: list[str] = field(default_factory=list)
    schema: int = SOAK_SCHEMA

    def to_dict(self) -> dict[str, Any]:
        return {
            "schema": self.schema,
            "kind": "soak",
            "run_id": self.run_id,
            "cluster": self.cluster,
            "inventory": self.inventory,
            "started": self.started,
            "requested_s": self.requested_s,
            "duration_s": round(self.duration_s, 3),
            "sparkctl_version": self.sparkctl_version,
            "hosts": list(self.hosts),
            "thresholds": self.thresholds.to_dict(),
            "verdict": self.verdict.to_dict(),
            "rounds": [r.to_dict() for r in self.rounds],
            "notes": list(self.notes),
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Soak:
        return cls(
            run_id=data["run_id"],
            cluster=data["cluster"],
            inventory=data["inventory"],
            started=data["started"],
            sparkctl_version=data["sparkctl_version"],
            hosts=list(data["hosts"]),
            thresholds=Thresholds.from_dict(data["thresholds"]),
            requested_s=float(data["requested_s"]),
            rounds=[Round.from_dict(r) for r in data["rounds"]],
            verdict=Verdict.from_dict(data["verdict"]),
            duration_s=float(data.get("duration_s", 0.0)),
            notes=list(data.get("notes", [])),
        )

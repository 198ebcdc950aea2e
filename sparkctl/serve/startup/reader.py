"""Read an SGLang rank's start-up log: how far it got, what went wrong, which NCCL transport.

``sparkctl serve up`` follows every rank's journal
(``journalctl -u sparkctl-sglang.service -o cat -f``) while the
tensor-parallel group starts. Each line may announce a start-up
:class:`Phase` (:func:`phase_of`) and may carry a known failure
:class:`Signature` (:func:`match`): what it means and what to change, in
sparkctl's terms (inventory variables, environment variables, commands).
A rank that stops making progress is diagnosed by :func:`hang_signature`
from the phase it is stuck in, because the worst multi-node failure prints
nothing at all: with TP0's ``SGLANG_HOST_IP`` off the fabric, start-up hangs
after "CustomAllreduce is disabled because this process group spans across
nodes.", for ever. NCCL's own INFO lines (NCCL_DEBUG=INFO) say whether the
data goes over RDMA (``ib``) or TCP sockets (``socket``) and which NCCL the
process loaded; :mod:`sparkctl.nccl_parse` reads those, and :class:`RankLog`
keeps what it says.

What the lines are is data with its origin, in catalogue.yml beside this file
(:mod:`.catalogue` reads it): the phases' patterns, the failures and their
texts, the hang thresholds, each pattern with its sources and example lines.
This module is the parser over them.

Pure functions over strings: no I/O, no clock. The caller measures how
long a rank has been in its phase and asks :func:`hang_signature`.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from types import MappingProxyType

from sparkctl import nccl_parse
from sparkctl.serve.startup import catalogue
from sparkctl.serve.startup.catalogue import Pattern, Phase, Rule, Signature, Source

__all__ = [
    "HANG_AFTER",
    "HOST_IP_HANG",
    "PATTERNS",
    "SIGNATURES",
    "Pattern",
    "Phase",
    "RankLog",
    "Signature",
    "Source",
    "furthest_phase",
    "hang_signature",
    "match",
    "milestones",
    "phase_of",
    "rank_of",
]

_CATALOGUE = catalogue.load()
_PHASE_PATTERNS: tuple[tuple[Phase, Pattern], ...] = _CATALOGUE.phases
_GENERIC_FAILURES: tuple[Pattern, ...] = _CATALOGUE.generic_failures
_RULES: tuple[Rule, ...] = _CATALOGUE.rules
_HANG_RULES: dict[str, Rule] = {r.id: r for r in _CATALOGUE.hang_rules}
_BY_ID: dict[str, Rule] = {
    r.id: r for r in (*_RULES, *_HANG_RULES.values(), nccl_parse.SOCKET_TRANSPORT_RULE)
}

# The rule ids this code names (tests/unit/test_sglang_logs.py holds each to the data).
#: The message-queue hang after NCCL init; what a c10d timeout after NCCL was up is too.
HOST_IP_HANG = "host_ip_hang"
_DIST_INIT_UNREACHABLE = "dist_init_unreachable"

#: Every signature this module can report, by id (``line`` and ``rank`` empty).
SIGNATURES: Mapping[str, Signature] = MappingProxyType(
    {id_: rule.signature() for id_, rule in _BY_ID.items()}
)

#: Every pattern a rank's log is read with, with what it stands for: a phase's value, a
#: signature id, ``failure`` (ends start-up without a signature), ``transport:ib`` /
#: ``transport:socket`` or ``nccl_version`` (NCCL's own lines, sparkctl.nccl_parse).
PATTERNS: tuple[tuple[str, Pattern], ...] = (
    *((phase.value, p) for phase, p in _PHASE_PATTERNS),
    *(("failure", p) for p in _GENERIC_FAILURES),
    *((rule.id, p) for rule in _RULES for p in rule.patterns),
    *((f"transport:{kind}", p) for kind, ps in nccl_parse.TRANSPORT_PATTERNS.items() for p in ps),
    *(("nccl_version", p) for p in nccl_parse.NCCL_VERSION_PATTERNS),
)

# Phase -> (seconds, the rule whose hang it is), from the rules' hang_after.
_HANGS: dict[Phase, tuple[float, Rule]] = {
    phase: (seconds, rule)
    for rule in (*_RULES, *_HANG_RULES.values())
    for phase, seconds in rule.hang_after
}
#: Seconds without progress after which :func:`hang_signature` calls a phase a hang
#: (catalogue.yml's ``hang_after``, which says why each).
HANG_AFTER: Mapping[Phase, float] = MappingProxyType(
    {phase: _HANGS[phase][0] for phase in sorted(_HANGS)}
)

_RANK = re.compile(r"^\[[^\]]*\bTP(\d+)\b|^\[rank(\d+)\]")


def rank_of(line: str) -> int | None:
    """The TP rank a line names in its prefix (``[... TP3]``, ``[rank3]:``), else None."""
    m = _RANK.search(line)
    if m is None:
        return None
    return int(m.group(1) or m.group(2))


def _rule_for(line: str) -> Rule | None:
    for rule in _RULES:
        if rule.matches(line):
            return rule
    return None


def phase_of(line: str) -> Phase | None:
    """The phase a log line announces; ``FAILED`` for a line that ends start-up.

    Warnings (a :class:`Signature` with ``fatal=False``) and ordinary lines,
    e.g. ``NCCL INFO`` chatter or the deprecated-endpoint warning, announce
    nothing and give None.
    """
    rule = _rule_for(line)
    if (rule is not None and rule.fatal) or any(p.search(line) for p in _GENERIC_FAILURES):
        return Phase.FAILED
    for phase, pattern in _PHASE_PATTERNS:
        if pattern.search(line):
            return phase
    return None


@dataclass
class RankLog:
    """One rank's log as it streams in: its phase, the signatures seen so far, and the NCCL
    transport its INFO lines showed.

    Feeding lines one at a time gives the same answer as :func:`match` over
    the whole log, including what only context can tell: a c10d timeout after
    NCCL was up is the message-queue hang (``host_ip_hang``), not an
    unreachable rendezvous.
    """

    rank: int | None = None
    phase: Phase = Phase.STARTING  # furthest phase, FAILED included
    progress: Phase = Phase.STARTING  # furthest phase short of FAILED
    milestones: list[Phase] = field(default_factory=list)
    signatures: list[Signature] = field(default_factory=list)
    transport: str | None = None  # as nccl_parse.nccl_transport() over the lines fed so far
    nccl: str | None = None  # the NCCL version the lines name (nccl_parse.nccl_version())

    def feed(self, line: str) -> list[Signature]:
        """Take one line; return the signatures it adds (new ids only)."""
        line = line.rstrip("\r\n")
        kind = nccl_parse.transport_of(line)
        if kind and self.transport != "socket":
            self.transport = kind
        version = nccl_parse.nccl_version(line)
        # The first version named; NCCL's banner adds its build ("+cuda13.0") to SGLang's.
        if version and (self.nccl is None or version.startswith(f"{self.nccl}+")):
            self.nccl = version
        phase = phase_of(line)
        rule = _rule_for(line)
        if (
            rule is not None
            and rule.id == _DIST_INIT_UNREACHABLE
            and self.progress >= Phase.NCCL_READY
        ):
            rule = _BY_ID[HOST_IP_HANG]
        if phase is not None and (not self.milestones or phase > self.milestones[-1]):
            self.milestones.append(phase)
        if phase is not None and phase > self.phase:
            self.phase = phase
        if phase is not None and phase is not Phase.FAILED and phase > self.progress:
            self.progress = phase
        if rule is None or any(s.id == rule.id for s in self.signatures):
            return []
        sig = rule.signature(line, self.rank if self.rank is not None else rank_of(line))
        self.signatures.append(sig)
        return [sig]


def match(lines: Iterable[str], *, rank: int | None = None) -> list[Signature]:
    """Every known signature in ``lines``, once per id, with the first line that showed it.

    In order of first appearance. ``rank`` labels every signature; without it
    the rank is read from each line's ``[... TPn]`` prefix where there is one.
    """
    log = RankLog(rank=rank)
    for line in lines:
        log.feed(line)
    return log.signatures


def furthest_phase(lines: Iterable[str]) -> Phase:
    """How far a rank got: the highest phase announced (``STARTING`` if none)."""
    log = RankLog()
    for line in lines:
        log.feed(line)
    return log.phase


def milestones(lines: Iterable[str]) -> list[Phase]:
    """The phases a rank reached, in the order it first reached each new furthest one."""
    log = RankLog()
    for line in lines:
        log.feed(line)
    return log.milestones


def hang_signature(
    last_phase: Phase, seconds: float, *, rank: int | None = None, line: str = ""
) -> Signature | None:
    """What a rank that has made no progress for ``seconds`` in ``last_phase`` is stuck on.

    Before or at the rendezvous (``STARTING``, ``DIST_INIT``): the dist-init
    address, port or firewall. After NCCL init succeeded (``NCCL_READY``):
    the ``SGLANG_HOST_IP`` message-queue hang. During CUDA graph capture: the
    multi-node capture deadlock. None while the wait is still plausible
    (:data:`HANG_AFTER`), and for phases where waiting is normal (a rank other
    than TP0 rests at ``ENGINE_READY``; large models load for long).
    ``line`` is the rank's last log line, kept in the signature.
    """
    hang = _HANGS.get(last_phase)
    if hang is None or seconds < hang[0]:
        return None
    rule = hang[1]
    where = f"No progress for {seconds:.0f} s in phase {last_phase.value}. "
    return replace(rule.signature(line, rank), explanation=where + rule.explanation)

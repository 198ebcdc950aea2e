"""Which node or link sets a TP group's pace: the one apart from its peers.

Every token of a TP group waits for its slowest rank at every all-reduce, so the group
runs at the pace of its slowest node or link. Equal work gives equal figures: in NCCL's
ring every link carries the same bytes (and in the lab's stand-in, a star through TP0,
TP0's port carries those of every worker). So a figure alone names nothing; a node is
named when a figure sets it **apart from the other ranks of its group**, each finding
with its figures and a score (how far apart), the highest score the pace-setter:

- **a twin near its line rate while its peers' are not** (>= :data:`BUSY_LINE` of the
  twin's line rate and at least :data:`APART` times the peers' median): the link itself
  is the bound;
- **a twin that negotiated below the fabric's speed** (``/sys/class/net/*/speed`` under
  roce_fabric's expected Mb/s: a 200G port at 100G);
- **congestion on one node**: its RoCE port sending or handling congestion notification
  packets (CNPs) at :data:`CNP_RATE` a second or more, at least :data:`APART` times its
  peers';
- **a slow path over TCP** (the socket transport, and the lab): a sender whose
  connections to one peer had data in flight (the kernel's ``tcpi_busy_time``, its
  growth over the level) :data:`BUSY_APART` times as long as the median of its peers',
  and at least :data:`BUSY_MIN` of the level, names that peer's link: the same bytes
  took longer to leave over it. Its fastest path-limited delivery (the kernel's
  delivery rate samples that the path, not the sender, limited) goes in the finding's
  figures beside its peers'. Neither the RTT nor that delivery rate alone names a
  link: a collective's messages are requests and replies, so the RTT holds the peer's
  own turn, which on the lab's shared cores varies more than a shaped port adds; and a
  healthy peer's delivery came 2.5-4.4x below its peers' in unshaped runs, as far apart
  as a shaped one's (docs/benchmarks.md, "Bench");
- **a GPU that throttles** (an NVML hardware slowdown reason in any sample: thermal,
  power brake, HW slowdown: the soak's reasons), or whose SM clock is
  :data:`CLOCK_APART` or more below its peers' median, or whose power draw is
  :data:`POWER_APART` or more away from it while the group is busy.

A group of one rank has no peers: nothing is named there.
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from sparkctl.bench.sample import NodeSample, rates

BUSY_LINE = 0.75
APART = 2.0
CNP_RATE = 10.0
CLOCK_APART = 0.10
POWER_APART = 0.25
MIN_PATH_SAMPLES = 3  # path-limited delivery samples a peer's figure needs
# A peer's busy share (its sender's connections with data in flight) against the
# median of the sender's peers', and the least share that counts. Measured on the lab's
# star (docs/benchmarks.md, "Bench"): a port at a quarter 2.3-2.6x, healthy peers at
# most 1.43x (the last in the head's order, at concurrency 4).
BUSY_APART = 1.8
BUSY_MIN = 0.2
BUSY_GPU = 50.0  # % utilisation: the group is busy
# NVML clocks event reasons that slow the GPU for hardware reasons (nvml.h)
HW_SLOWDOWN, HW_THERMAL, HW_POWER_BRAKE = 0x8, 0x40, 0x80
_HW_REASONS = {HW_SLOWDOWN: "hw_slowdown", HW_THERMAL: "hw_thermal_slowdown"} | {
    HW_POWER_BRAKE: "hw_power_brake_slowdown"
}


@dataclass(frozen=True)
class Finding:
    node: str
    subject: str  # "link (twin a)", "GPU"
    message: str
    score: float
    figures: Mapping[str, float] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {
            "node": self.node,
            "subject": self.subject,
            "message": self.message,
            "score": round(self.score, 3),
            "figures": {k: round(v, 4) for k, v in self.figures.items()},
        }


@dataclass(frozen=True)
class NodeFigures:
    """One node over one level, from its first and last samples (and each between)."""

    node: str
    twin_util: Mapping[str, float]  # share of the twin's line rate, the busier direction
    twin_speed: Mapping[str, int]  # Mb/s, where the driver said
    cnp_per_s: Mapping[str, float]  # sent + handled
    # peer address -> (the fastest path-limited delivery, bits/s; how many such samples)
    peer_delivery_bps: Mapping[str, tuple[float, int]]
    gpu_util: float | None
    power_w: float | None
    clock_mhz: float | None
    hw_reasons: int  # OR of the hardware slowdown bits seen
    # peer address -> the share of the level its connections had data in flight
    peer_busy: Mapping[str, float] = field(default_factory=dict)


def _median(values: Sequence[float | None]) -> float | None:
    known = [v for v in values if v is not None]
    return statistics.median(known) if known else None


def deliveries(samples: Sequence[NodeSample]) -> dict[str, tuple[float, int]]:
    """Per peer address: the fastest delivery rate the kernel sampled on the node's
    connections to it while the path, not the application, limited the flight, over
    the samples where each connection had moved bytes since the one before."""
    per_peer: dict[str, tuple[float, int]] = {}
    before: dict[tuple[str, int, str, int], tuple[int, int]] = {}
    for s in samples:
        seen = {}
        for c in s.tcp:
            key = (c.local, c.local_port, c.peer, c.peer_port)
            seen[key] = (c.bytes_sent, c.bytes_received)
            moved = key in before and seen[key] != before[key]
            if moved and c.delivery_bps and not c.app_limited:
                fastest, count = per_peer.get(c.peer, (0.0, 0))
                per_peer[c.peer] = (max(fastest, c.delivery_bps), count + 1)
        before = seen
    return per_peer


def busy_shares(samples: Sequence[NodeSample]) -> dict[str, float]:
    """Per peer address: the time the node's connections to it had data in flight
    (tcpi_busy_time's growth, summed over them) as a share of the level's time. A
    connection opened during the level counts from its start."""
    if len(samples) < 2 or samples[-1].t <= samples[0].t:
        return {}
    first = {(c.local, c.local_port, c.peer, c.peer_port): c.busy_ms for c in samples[0].tcp}
    busy: dict[str, float] = {}
    for c in samples[-1].tcp:
        if c.busy_ms is None:
            continue
        before = first.get((c.local, c.local_port, c.peer, c.peer_port)) or 0
        if c.busy_ms >= before:
            busy[c.peer] = busy.get(c.peer, 0.0) + (c.busy_ms - before) / 1000
    dt = samples[-1].t - samples[0].t
    return {peer: b / dt for peer, b in busy.items()}


def node_figures(
    node: str, samples: Sequence[NodeSample], line_bytes_per_s: float | None
) -> NodeFigures | None:
    if len(samples) < 2:
        return None
    first, last = samples[0], samples[-1]
    dt = last.t - first.t
    util = (
        {t: r.utilisation(line_bytes_per_s) for t, r in rates(first, last).items()}
        if line_bytes_per_s
        else {}
    )
    speed = {t: v for t, c in last.twins.items() if (v := c.speed_mbps) is not None}
    cnp: dict[str, float] = {}
    for t, c in last.twins.items():
        b = first.twins.get(t)
        if b is None or dt <= 0:
            continue
        moved = [
            x - y
            for x, y in ((c.cnp_sent, b.cnp_sent), (c.cnp_handled, b.cnp_handled))
            if x is not None and y is not None and x >= y
        ]
        if moved:
            cnp[t] = sum(moved) / dt
    reasons = 0
    for s in samples:
        reasons |= (s.clock_event_reasons or 0) & (HW_SLOWDOWN | HW_THERMAL | HW_POWER_BRAKE)
    return NodeFigures(
        node,
        util,
        speed,
        cnp,
        deliveries(samples),
        _median([s.gpu_util for s in samples[1:]]),
        _median([s.power_w for s in samples[1:]]),
        _median([s.clock_sm_mhz for s in samples[1:]]),
        reasons,
        busy_shares(samples),
    )


def _link_findings(n: NodeFigures, peers: Sequence[NodeFigures], speed_mbps: int) -> list[Finding]:
    out: list[Finding] = []
    peer_util = _median([max(p.twin_util.values(), default=None) for p in peers]) or 0.0
    for twin, u in sorted(n.twin_util.items()):
        if u >= BUSY_LINE and u >= APART * peer_util:
            out.append(
                Finding(
                    n.node,
                    f"link (twin {twin})",
                    f"twin {twin} at {u:.0%} of its line rate while its peers' busiest twins "
                    f"are at {peer_util:.0%}",
                    u / max(peer_util, 0.01),
                    {"utilisation": u, "peers_utilisation": peer_util},
                )
            )
    for twin, v in sorted(n.twin_speed.items()):
        if speed_mbps and v < speed_mbps:
            out.append(
                Finding(
                    n.node,
                    f"link (twin {twin})",
                    f"twin {twin} links at {v} Mb/s where the fabric runs {speed_mbps} Mb/s",
                    speed_mbps / v,
                    {"speed_mbps": v, "expected_mbps": speed_mbps},
                )
            )
    peer_cnp = _median([max(p.cnp_per_s.values(), default=None) for p in peers]) or 0.0
    for twin, c in sorted(n.cnp_per_s.items()):
        if c >= CNP_RATE and c >= APART * max(peer_cnp, 1.0):
            out.append(
                Finding(
                    n.node,
                    f"link (twin {twin})",
                    f"twin {twin}: {c:.0f} congestion notifications a second (its peers "
                    f"{peer_cnp:.0f})",
                    c / max(peer_cnp, 1.0),
                    {"cnp_per_s": c, "peers_cnp_per_s": peer_cnp},
                )
            )
    return out


def _gpu_findings(n: NodeFigures, peers: Sequence[NodeFigures]) -> list[Finding]:
    out: list[Finding] = []
    if n.hw_reasons:
        names = [name for bit, name in _HW_REASONS.items() if n.hw_reasons & bit]
        out.append(
            Finding(n.node, "GPU", f"GPU throttling ({', '.join(names)})", 10.0, {})  # always apart
        )
    clock, peer_clock = n.clock_mhz, _median([p.clock_mhz for p in peers])
    if clock and peer_clock and clock <= (1 - CLOCK_APART) * peer_clock:
        out.append(
            Finding(
                n.node,
                "GPU",
                f"SM clock {clock:.0f} MHz, its peers' {peer_clock:.0f} MHz",
                peer_clock / clock,
                {"clock_mhz": clock, "peers_clock_mhz": peer_clock},
            )
        )
    power, peer_power = n.power_w, _median([p.power_w for p in peers])
    busy = _median([p.gpu_util for p in [n, *peers]]) or 0.0
    if (
        power
        and peer_power
        and busy >= BUSY_GPU
        and abs(power - peer_power) >= POWER_APART * peer_power
    ):
        out.append(
            Finding(
                n.node,
                "GPU",
                f"power draw {power:.0f} W, its peers' {peer_power:.0f} W while busy",
                max(power, peer_power) / min(power, peer_power),
                {"power_w": power, "peers_power_w": peer_power},
            )
        )
    return out


def _busy_findings(have: Sequence[NodeFigures], addresses: Mapping[str, str]) -> list[Finding]:
    """Each sender's peers compared: the peer whose connections were busy (data in
    flight) for :data:`BUSY_APART` times the median share of the sender's peers, and
    :data:`BUSY_MIN` of the level or more, named with the sender's figures; its
    path-limited delivery to it beside its peers' goes with them as evidence, not in
    the message (it swings too far to judge by: docs/benchmarks.md, "Bench")."""
    best: dict[str, Finding] = {}
    members = {n.node for n in have}
    for sender in have:
        shares: dict[str, float] = {}
        fastest: dict[str, float] = {}
        for address, share in sender.peer_busy.items():
            peer = addresses.get(address)
            if peer in members and peer != sender.node:
                shares[peer] = shares.get(peer, 0.0) + share
        for address, (rate, count) in sender.peer_delivery_bps.items():
            peer = addresses.get(address)
            if peer in shares and count >= MIN_PATH_SAMPLES:
                fastest[peer] = max(fastest.get(peer, 0.0), rate)
        if len(shares) < 2:
            continue
        # the median over every peer, the busy one included: with three peers a healthy
        # one that waits behind the others in the sender's queue is not apart
        typical = statistics.median(shares.values())
        for peer, share in shares.items():
            if share < BUSY_MIN or share < BUSY_APART * typical:
                continue
            figures = {"busy_share": share, "peers_busy_share": typical}
            message = (
                f"{sender.node}'s connections to it had data in flight {share:.0%} of the "
                f"level, to its peers typically {typical:.0%}"
            )
            others = [v for p, v in fastest.items() if p != peer]
            if peer in fastest and others:
                figures |= {
                    "delivery_mbps": fastest[peer] / 1e6,
                    "peers_delivery_mbps": statistics.median(others) / 1e6,
                }
            f = Finding(peer, "link", message, share / max(typical, 1e-3), figures)
            if peer not in best or f.score > best[peer].score:
                best[peer] = f
    return list(best.values())


def findings(
    groups: Sequence[Sequence[str]],
    figures: Mapping[str, NodeFigures],
    *,
    speed_mbps: int = 0,
    addresses: Mapping[str, str] | None = None,
) -> list[Finding]:
    """Every node apart from the peers of its group, the strongest first. ``addresses``:
    each fabric address's node (the TCP rule reads connections by peer address)."""
    out: list[Finding] = []
    for members in groups:
        have = [figures[m] for m in members if m in figures]
        if len(have) < 2:
            continue
        for n in have:
            peers = [p for p in have if p.node != n.node]
            out += _link_findings(n, peers, speed_mbps) + _gpu_findings(n, peers)
        out += _busy_findings(have, addresses or {})
    return sorted(out, key=lambda f: -f.score)

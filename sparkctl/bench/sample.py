"""What every node does while a load level runs: one shell command a node a sample.

Each sample reads, on every node at once (over the serve commands' SSH):

- ``MemAvailable`` (/proc/meminfo): on a GB10 the GPU's memory is the machine's RAM
  (docs: serve/memory.py says why MemAvailable, not MemFree);
- each fabric twin's bytes received and sent: the netdev's ``statistics/rx_bytes`` and
  ``tx_bytes`` (sysfs-class-net), and, where the twin has a RoCE device, its port
  counters ``port_rcv_data`` / ``port_xmit_data`` (sysfs-class-infiniband: in units of
  4 bytes, "octets divided by 4"): RDMA traffic bypasses the netdev's counters on a
  ConnectX-7, so the RDMA figures are the link's where they exist;
- the GPU's utilisation, power and temperature (``nvidia-smi --query-gpu=...
  --format=csv,noheader,nounits``), where nvidia-smi answers.

Two samples make rates: bytes a second on each twin, as a share of the twin's line
rate (a twin carries about half of its port, 92.57 + 97.28 Gb/s over the two twins
in NVIDIA's perftest guide).
"""

from __future__ import annotations

import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

GPU_QUERY = "utilization.gpu,power.draw,temperature.gpu"
MARK = "@@sparkctl-sample"


@dataclass(frozen=True)
class TwinCounters:
    rx_bytes: int
    tx_bytes: int
    source: str  # "rdma" (port counters x 4) or "netdev"


@dataclass(frozen=True)
class NodeSample:
    """One node at one moment."""

    t: float  # the node's clock, seconds since the epoch
    mem_available: int | None  # bytes
    twins: Mapping[str, TwinCounters] = field(default_factory=dict)
    gpu_util: float | None = None  # %
    power_w: float | None = None
    temp_c: float | None = None


def sample_command(twins: Sequence[tuple[str, str, str]]) -> str:
    """The command for a node whose twins are ``(twin, netdev, ibdev)``: prints ``key
    value...`` lines after :data:`MARK`. Every name is quoted; a missing counter or
    tool prints ``-``."""
    parts = [
        f"echo {MARK}",
        "echo t $(date +%s.%N)",
        "awk '/^MemAvailable:/ {print \"mem_kb\", $2}' /proc/meminfo",
    ]
    for twin, netdev, ibdev in twins:
        net = shlex.quote(f"/sys/class/net/{netdev}/statistics")
        parts.append(
            f"echo net {shlex.quote(twin)} $(cat {net}/rx_bytes 2>/dev/null || echo -) "
            f"$(cat {net}/tx_bytes 2>/dev/null || echo -)"
        )
        if ibdev:
            ib = shlex.quote(f"/sys/class/infiniband/{ibdev}/ports/1/counters")
            parts.append(
                f"echo rdma {shlex.quote(twin)} $(cat {ib}/port_rcv_data 2>/dev/null || echo -) "
                f"$(cat {ib}/port_xmit_data 2>/dev/null || echo -)"
            )
    parts.append(
        f"echo gpu $(nvidia-smi --query-gpu={GPU_QUERY} --format=csv,noheader,nounits "
        "2>/dev/null | head -n 1 | tr -d ' ' || echo -)"
    )
    return "; ".join(parts) + "; true"


def _num(word: str) -> float | None:
    try:
        return float(word)
    except ValueError:
        return None  # "-", "[N/A]", "[Not Supported]"


def parse_sample(text: str) -> NodeSample | None:
    """What :func:`sample_command` printed; None when the mark is missing (no answer)."""
    if MARK not in text:
        return None
    lines = text.split(MARK, 1)[1].splitlines()
    t: float | None = None
    mem: int | None = None
    net: dict[str, tuple[int, int]] = {}
    rdma: dict[str, tuple[int, int]] = {}
    gpu: list[float | None] = [None, None, None]
    for line in lines:
        words = line.split()
        if not words:
            continue
        key, rest = words[0], words[1:]
        if key == "t" and rest:
            t = _num(rest[0])
        elif key == "mem_kb" and rest and rest[0].isdigit():
            mem = int(rest[0]) * 1024
        elif key in ("net", "rdma") and len(rest) == 3 and rest[1].isdigit() and rest[2].isdigit():
            (net if key == "net" else rdma)[rest[0]] = (int(rest[1]), int(rest[2]))
        elif key == "gpu" and rest:
            values = rest[0].split(",")
            gpu = [_num(v) for v in values[:3]] + [None] * (3 - len(values[:3]))
    if t is None:
        return None
    twins = {name: TwinCounters(4 * rx, 4 * tx, "rdma") for name, (rx, tx) in rdma.items()} | {
        name: TwinCounters(rx, tx, "netdev") for name, (rx, tx) in net.items() if name not in rdma
    }
    return NodeSample(t, mem, twins, gpu[0], gpu[1], gpu[2])


@dataclass(frozen=True)
class TwinRate:
    """One twin between two samples."""

    rx_bytes_per_s: float
    tx_bytes_per_s: float
    source: str

    def utilisation(self, line_bytes_per_s: float) -> float:
        """The busier direction as a share of the twin's line rate."""
        return max(self.rx_bytes_per_s, self.tx_bytes_per_s) / line_bytes_per_s

    def to_dict(self) -> dict[str, Any]:
        return {
            "rx_bytes_per_s": round(self.rx_bytes_per_s, 1),
            "tx_bytes_per_s": round(self.tx_bytes_per_s, 1),
            "source": self.source,
        }


def rates(before: NodeSample, after: NodeSample) -> dict[str, TwinRate]:
    """Each twin's bytes a second between two samples of one node (a counter that went
    back, a reset, gives no rate)."""
    dt = after.t - before.t
    out: dict[str, TwinRate] = {}
    if dt <= 0:
        return out
    for name, b in before.twins.items():
        a = after.twins.get(name)
        if a is None or a.source != b.source or a.rx_bytes < b.rx_bytes or a.tx_bytes < b.tx_bytes:
            continue
        out[name] = TwinRate(
            (a.rx_bytes - b.rx_bytes) / dt, (a.tx_bytes - b.tx_bytes) / dt, a.source
        )
    return out

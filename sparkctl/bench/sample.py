"""What every node does while a load level runs: one shell command a node a sample.

Each sample reads, on every node at once (over the serve commands' SSH):

- ``MemAvailable`` (/proc/meminfo): on a GB10 the GPU's memory is the machine's RAM
  (docs: serve/memory.py says why MemAvailable, not MemFree);
- each fabric twin's bytes received and sent: the netdev's ``statistics/rx_bytes`` and
  ``tx_bytes`` (sysfs-class-net), and, where the twin has a RoCE device, its port
  counters ``port_rcv_data`` / ``port_xmit_data`` (sysfs-class-infiniband: in units of
  4 bytes, "octets divided by 4"): RDMA traffic bypasses the netdev's counters on a
  ConnectX-7, so the RDMA figures are the link's where they exist;
- each twin's link speed (``/sys/class/net/<netdev>/speed``, Mb/s: a port that
  negotiated 100G instead of 200G) and, with a RoCE device, its congestion
  notification counters ``np_cnp_sent`` and ``rp_cnp_handled`` (``hw_counters``;
  NVIDIA's "Understanding mlx5 Linux Counters": CNPs this node sent as the receiver of
  ECN-marked packets, and CNPs it handled as a sender told to slow down);
- the server's own memory: its cgroup's ``memory.current`` (cgroup v2), the unit's
  with the venv method, the container's ``docker-<id>.scope`` with the container
  method (docker's systemd cgroup driver, docs.docker.com "Runtime metrics");
- the GPU's utilisation, power and temperature (``nvidia-smi --query-gpu=...
  --format=csv,noheader,nounits``), and in a second query its SM clock and clock
  event reasons, where nvidia-smi answers (the GB10's driver may refuse a field, as
  the soak found);
- the TCP connections on the node's fabric addresses (``ss -tinH state established``):
  each one's bytes and the kernel's last delivery rate sample (``delivery_rate``, and
  whether the sender, not the path, limited it: ``app_limited``; iproute2's
  ``tcp_show_info``). Where the ranks' collectives run over sockets (NCCL's socket
  transport, the lab) a slow or shaped link shows there as a path that never delivers
  faster than its rate; over RDMA there are none, and the speed and CNP counters speak.

Two samples make rates: bytes a second on each twin, as a share of the twin's line
rate (a twin carries about half of its port, 92.57 + 97.28 Gb/s over the two twins
in NVIDIA's perftest guide).
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from sparkctl.collection import tool_output

GPU_QUERY = "utilization.gpu,power.draw,temperature.gpu"
CLOCK_QUERY = "clocks.sm,clocks_event_reasons.active"
MARK = "@@sparkctl-sample"
TCP_MARK = "@@tcp"
END_MARK = "@@end"


@dataclass(frozen=True)
class TwinCounters:
    rx_bytes: int
    tx_bytes: int
    source: str  # "rdma" (port counters x 4) or "netdev"
    speed_mbps: int | None = None  # the netdev's link speed; None: unknown or down
    cnp_sent: int | None = None  # np_cnp_sent
    cnp_handled: int | None = None  # rp_cnp_handled


@dataclass(frozen=True)
class TcpConn:
    """One TCP connection of a node's fabric address at one moment."""

    local: str
    peer: str
    rtt_ms: float | None
    bytes_sent: int
    bytes_received: int
    local_port: int = 0
    peer_port: int = 0
    delivery_bps: float | None = None  # the kernel's last delivery rate sample, bits/s
    app_limited: bool = True  # that sample was limited by the sender, not the path
    busy_ms: int | None = None  # cumulative time with data in flight (tcpi_busy_time)


@dataclass(frozen=True)
class NodeSample:
    """One node at one moment."""

    t: float  # the node's clock, seconds since the epoch
    mem_available: int | None  # bytes
    twins: Mapping[str, TwinCounters] = field(default_factory=dict)
    gpu_util: float | None = None  # %
    power_w: float | None = None
    temp_c: float | None = None
    clock_sm_mhz: float | None = None
    clock_event_reasons: int | None = None  # NVML's bitmask
    server_memory: int | None = None  # bytes in the server's cgroup
    tcp: tuple[TcpConn, ...] = ()


def sample_command(
    twins: Sequence[tuple[str, str, str]],
    *,
    fabric_addresses: Sequence[str] = (),
    server_memory: str = "",
) -> str:
    """The command for a node whose twins are ``(twin, netdev, ibdev)``: prints ``key
    value...`` lines after :data:`MARK`. Every name is quoted; a missing counter or
    tool prints ``-``. ``fabric_addresses`` (IPv4, the plan's) select the TCP
    connections listed; ``server_memory`` is a shell command that prints the
    server's cgroup's bytes (:func:`server_memory_command`)."""
    parts = [
        f"echo {MARK}",
        "echo t $(date +%s.%N)",
        "awk '/^MemAvailable:/ {print \"mem_kb\", $2}' /proc/meminfo",
    ]
    for twin, netdev, ibdev in twins:
        net = shlex.quote(f"/sys/class/net/{netdev}")
        t = shlex.quote(twin)
        parts.append(
            f"echo net {t} $(cat {net}/statistics/rx_bytes 2>/dev/null || echo -) "
            f"$(cat {net}/statistics/tx_bytes 2>/dev/null || echo -)"
        )
        parts.append(f"echo speed {t} $(cat {net}/speed 2>/dev/null || echo -)")
        if ibdev:
            port = f"/sys/class/infiniband/{ibdev}/ports/1"
            ib = shlex.quote(f"{port}/counters")
            hw = shlex.quote(f"{port}/hw_counters")
            parts.append(
                f"echo rdma {t} $(cat {ib}/port_rcv_data 2>/dev/null || echo -) "
                f"$(cat {ib}/port_xmit_data 2>/dev/null || echo -)"
            )
            parts.append(
                f"echo cnp {t} $(cat {hw}/np_cnp_sent 2>/dev/null || echo -) "
                f"$(cat {hw}/rp_cnp_handled 2>/dev/null || echo -)"
            )
    if server_memory:
        parts.append(f"echo srv $({{ {server_memory}; }} 2>/dev/null || echo -)")
    for key, query in (("gpu", GPU_QUERY), ("clk", CLOCK_QUERY)):
        parts.append(
            f"echo {key} $(nvidia-smi --query-gpu={query} --format=csv,noheader,nounits "
            "2>/dev/null | head -n 1 | tr -d ' ' || echo -)"
        )
    if fabric_addresses:
        selector = " or ".join(f"src {a}" for a in fabric_addresses)
        parts.append(
            f"echo {TCP_MARK}; ss -tinH state established {shlex.quote(f'( {selector} )')} "
            f"2>/dev/null; echo {END_MARK}"
        )
    return "; ".join(parts) + "; true"


# Where a container's memory cgroup is (docs.docker.com, "Runtime metrics": "Find the
# cgroup for a given container"): cgroup v2 (DGX OS) and v1, with docker's systemd cgroup
# driver (a docker-<id>.scope in system.slice) or its cgroupfs driver (docker/<id>).
CONTAINER_CGROUP_FILES = (
    "/sys/fs/cgroup/system.slice/docker-{id}.scope/memory.current",
    "/sys/fs/cgroup/docker/{id}/memory.current",
    "/sys/fs/cgroup/memory/system.slice/docker-{id}.scope/memory.usage_in_bytes",
    "/sys/fs/cgroup/memory/docker/{id}/memory.usage_in_bytes",
)


def server_memory_command(install_method: str, unit: str, engine: str, container: str) -> str:
    """A command that prints the bytes of the server's own memory cgroup, or fails: the
    container's (:data:`CONTAINER_CGROUP_FILES`) with the container method, else the
    unit's as systemd accounts it (``MemoryCurrent``; ``[not set]`` without accounting)."""
    if install_method == "container":
        files = " ".join(f.replace("{id}", "$id") for f in CONTAINER_CGROUP_FILES)
        return (
            f"id=$({{sudo}}{shlex.quote(engine)} inspect --format '{{{{.Id}}}}' "
            f"{shlex.quote(container)}) && for f in {files}; do "
            '[ -r "$f" ] && { cat "$f"; break; }; done'
        )
    return f"systemctl show -p MemoryCurrent --value {shlex.quote(unit)}"


def _num(word: str) -> float | None:
    try:
        return float(word)
    except ValueError:
        return None  # "-", "[N/A]", "[Not Supported]"


def _int(word: str) -> int | None:
    return int(word) if word.isdigit() else None


def _tcp(lines: Sequence[str]) -> tuple[TcpConn, ...]:
    try:
        conns = tool_output.ss_tcp_info("\n".join(lines))
    except tool_output.ToolOutputError:
        return ()  # an ss that printed something else: no connection figures this sample
    return tuple(
        TcpConn(
            c["local"],
            c["peer"],
            c["rtt_ms"],
            c["bytes_sent"] or 0,
            c["bytes_received"] or 0,
            c["local_port"],
            c["peer_port"],
            c["delivery_rate_bps"],
            c["app_limited"],
            c["busy_ms"],
        )
        for c in conns
    )


def parse_sample(text: str) -> NodeSample | None:
    """What :func:`sample_command` printed; None when the mark is missing (no answer)."""
    if MARK not in text:
        return None
    body = text.split(MARK, 1)[1]
    tcp: tuple[TcpConn, ...] = ()
    if TCP_MARK in body:
        body, _, rest = body.partition(TCP_MARK)
        tcp = _tcp(rest.split(END_MARK, 1)[0].strip("\n").splitlines())
    rows: dict[str, list[list[str]]] = {}
    for line in body.splitlines():
        words = line.split()
        if words:
            rows.setdefault(words[0], []).append(words[1:])

    def first(key: str) -> str:
        found = [r[0] for r in rows.get(key, []) if r]
        return found[0] if found else "-"

    t = _num(first("t"))
    mem = _int(first("mem_kb"))
    mem = mem * 1024 if mem is not None else None
    srv = _int(first("srv"))
    net: dict[str, tuple[int, int]] = {}
    rdma: dict[str, tuple[int, int]] = {}
    for key, into in (("net", net), ("rdma", rdma)):
        for r in rows.get(key, []):
            if len(r) == 3 and r[1].isdigit() and r[2].isdigit():
                into[r[0]] = (int(r[1]), int(r[2]))
    # -1 or nothing: the link is down or the driver does not say
    speed = {r[0]: _int(r[1]) or None for r in rows.get("speed", []) if len(r) == 2}
    cnp = {r[0]: (_int(r[1]), _int(r[2])) for r in rows.get("cnp", []) if len(r) == 3}
    gpu = ([*first("gpu").split(","), "-", "-", "-"])[:3]
    clk = ([*first("clk").split(","), "-", "-"])[:2]
    mask = clk[1].strip()
    reasons = int(mask, 16) if re.fullmatch(r"0x[0-9a-fA-F]+", mask) else None
    if t is None:
        return None

    def counters(name: str, rx: int, tx: int, source: str) -> TwinCounters:
        sent, handled = cnp.get(name, (None, None))
        return TwinCounters(rx, tx, source, speed.get(name), sent, handled)

    twins = {name: counters(name, 4 * rx, 4 * tx, "rdma") for name, (rx, tx) in rdma.items()} | {
        name: counters(name, rx, tx, "netdev") for name, (rx, tx) in net.items() if name not in rdma
    }
    return NodeSample(
        t, mem, twins, _num(gpu[0]), _num(gpu[1]), _num(gpu[2]), _num(clk[0]), reasons, srv, tcp
    )


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

"""One reading of a node in one command: what ``sparkctl status`` shows and what drifts.

Every node is read with a single SSH command (in parallel, through the run's one
ControlMaster connection per node), which prints one section per reading:

- the kernel (``uname -r``) and ``/proc/meminfo``;
- the GPU from ``nvidia-smi --query-gpu``: name, driver, temperature, utilisation,
  power. On GB10, ``memory.*`` reads "Not Supported" (NVIDIA/gpu-operator #1794): the
  node's memory is MemAvailable, never CUDA's free, which tracks MemFree so that page
  cache looks used (unsloth PR #10705). The SM clock and the thermal clock-event
  reasons are asked apart, because an nvidia-smi that lacks a field refuses the whole
  query (exit 2, nvidia-smi(1) RETURN VALUE); DCGM reads the SM clock on GB10
  (driver 580.142: rwlove/home-ops PR #13238) - not checked here on a GB10;
- each fabric twin's ``/sys/class/net/<netdev>/`` operstate, mtu, speed,
  carrier_changes and error/drop/byte counters (Documentation/ABI/testing/sysfs-class-net
  and sysfs-class-net-statistics in the Linux tree);
- the SGLang unit (``systemctl show``), and with the container method the image the
  running container was started from (``docker inspect --format {{.Image}}``);
- the records provision left: NCCL's version record and roce_fabric's GID index.

:meth:`NodeReading.fingerprint` is what a node is built from (kernel, driver, NCCL, the
served image, MTU and speed per twin, GID index): validate keeps it beside a passing run
(``fingerprint.json``) and status names what changed since then (drift since last-good).
"""

from __future__ import annotations

import json
import shlex
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from sparkctl.collection import tool_output
from sparkctl.paths import write_atomic
from sparkctl.plan import NodePlan, Plan
from sparkctl.remote import Runner

MARK = "==> sparkctl:"
FINGERPRINT_FILE = "fingerprint.json"
UNIT_PROPERTIES = (
    "ActiveState",
    "SubState",
    "Result",
    "NRestarts",
    "ActiveEnterTimestamp",
    "StateChangeTimestamp",
    "MainPID",
)
GPU_FIELDS = ["name", "driver_version", "temperature.gpu", "utilization.gpu", "power.draw"]
CLOCK_FIELDS = [
    "clocks.current.sm",
    "clocks_event_reasons.hw_thermal_slowdown",
    "clocks_event_reasons.sw_thermal_slowdown",
]
LINK_FILES = (
    "operstate",
    "mtu",
    "speed",
    "carrier_changes",
    "statistics/rx_errors",
    "statistics/tx_errors",
    "statistics/rx_dropped",
    "statistics/tx_dropped",
    "statistics/rx_bytes",
    "statistics/tx_bytes",
)
# The counters whose growth between two looks is news (errors, drops, carrier flaps).
COUNTERS = ("carrier_changes", "rx_errors", "tx_errors", "rx_dropped", "tx_dropped")

# sh: run a reading, then print its section marker with the exit code and its output.
_READ = (
    'r() { n=$1; shift; o=$("$@" 2>&1); c=$?; '
    f'printf \'%s%s rc=%s\\n%s\\n\' \'{MARK}\' "$n" "$c" "$o"; }}'
)


def script(nplan: NodePlan, sudo: str = "") -> str:
    """The one command that reads a node (``sudo``: the prefix for root, or "")."""
    s = nplan.sglang
    q = shlex.quote
    parts = [
        _READ,
        "r kernel uname -r",
        "r meminfo cat /proc/meminfo",
        f"r gpu nvidia-smi --query-gpu={','.join(GPU_FIELDS)} --format=csv",
        f"r clocks nvidia-smi --query-gpu={','.join(CLOCK_FIELDS)} --format=csv",
    ]
    for t in nplan.roce_fabric.twins:
        files = " ".join(q(f"/sys/class/net/{t.netdev}/{f}") for f in LINK_FILES)
        parts.append(f"r link:{t.twin} grep -H -s . {files}")
    parts.append(f"r unit systemctl show -p {','.join(UNIT_PROPERTIES)} {q(s.unit)}")
    parts.append(f"r nccl_record cat {q(nplan.nccl.version_file)}")
    parts.append(f"r roce_record cat {q(nplan.nccl.record_file)}")
    if s.install_method == "container":
        parts.append(
            f"r image {sudo}{q(s.engine)} inspect --format {q('{{.Image}}')} {q(s.container_name)}"
        )
    parts.append("r cgroup cat /proc/self/cgroup")
    parts.append("r mountinfo cat /proc/self/mountinfo")
    return "; ".join(parts) + "; true"


def sections(text: str) -> dict[str, tuple[int, str]]:
    """The script's output -> {section: (exit code, its output)}; what precedes the
    first marker (a login banner) is dropped."""
    out: dict[str, tuple[int, str]] = {}
    name: str | None = None
    rc = 0
    lines: list[str] = []
    for line in text.splitlines():
        if line.startswith(MARK):
            if name is not None:
                out[name] = (rc, "\n".join(lines).strip("\n"))
            head, _, code = line[len(MARK) :].rpartition(" rc=")
            name, rc, lines = head, int(code) if code.isdigit() else -1, []
        elif name is not None:
            lines.append(line)
    if name is not None:
        out[name] = (rc, "\n".join(lines).strip("\n"))
    return out


def _number(value: str | None) -> float | None:
    try:
        return float(str(value).split()[0])
    except (ValueError, IndexError):
        return None  # "[N/A]", "[Not Supported]", ""


@dataclass(frozen=True)
class Gpu:
    name: str
    driver: str
    temperature_c: float | None
    utilization_pct: float | None
    power_w: float | None
    sm_clock_mhz: float | None = None
    thermal_slowdown: bool | None = None  # None: nvidia-smi did not say


@dataclass(frozen=True)
class Link:
    """One fabric twin as sysfs shows it."""

    twin: str
    netdev: str
    operstate: str
    mtu: int | None
    speed_mbps: int | None  # None: unknown (a down link reads -1 or refuses the read)
    counters: dict[str, int] = field(default_factory=dict)


@dataclass(frozen=True)
class NodeReading:
    node: str
    reachable: bool
    error: str = ""
    kernel: str = ""
    meminfo: dict[str, int] = field(default_factory=dict)
    gpu: Gpu | None = None
    gpu_error: str = ""
    links: tuple[Link, ...] = ()
    unit: dict[str, str] = field(default_factory=dict)
    nccl_record: dict[str, str] = field(default_factory=dict)
    roce_record: dict[str, str] = field(default_factory=dict)
    image: str = ""  # the running container's image ID ("" when none runs)
    cgroup: tuple[str, str] = ("", "")  # /proc/self/cgroup, /proc/self/mountinfo

    def fingerprint(self) -> dict[str, str]:
        """What the node is built from, as flat strings (drift compares these)."""
        out = {
            "kernel": self.kernel,
            "driver": self.gpu.driver if self.gpu else "",
            "nccl": self.nccl_record.get("NCCL_VERSION", ""),
            "nccl_tests": self.nccl_record.get("NCCL_TESTS_VERSION", ""),
            "gid_index": self.roce_record.get("ROCE_GID_INDEX", ""),
        }
        if self.image:
            out["image"] = self.image
        for link in self.links:
            out[f"mtu {link.twin}"] = str(link.mtu) if link.mtu is not None else ""
            out[f"speed {link.twin}"] = str(link.speed_mbps) if link.speed_mbps else ""
        return out

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["links"] = [asdict(link) for link in self.links]
        data.pop("cgroup")
        data.pop("meminfo")
        data["mem_total"] = self.meminfo.get("MemTotal")
        data["mem_available"] = self.meminfo.get("MemAvailable")
        return data


def _gpu(secs: Mapping[str, tuple[int, str]]) -> tuple[Gpu | None, str]:
    rc, text = secs.get("gpu", (-1, "not read"))
    if rc != 0:
        return None, f"nvidia-smi rc {rc}: {text.strip()[-200:]}"
    try:
        rows = tool_output.nvidia_smi_csv(text, GPU_FIELDS)
    except tool_output.ToolOutputError as exc:
        return None, str(exc)
    if not rows:
        return None, "nvidia-smi listed no GPU"
    row = rows[0]
    clock: float | None = None
    slowdown: bool | None = None
    crc, ctext = secs.get("clocks", (-1, ""))
    if crc == 0:
        try:
            crow = tool_output.nvidia_smi_csv(ctext, CLOCK_FIELDS)[0]
        except (tool_output.ToolOutputError, IndexError):
            crow = {}
        clock = _number(crow.get("clocks.current.sm"))
        reasons = [crow.get(f) for f in CLOCK_FIELDS[1:]]
        if all(r in ("Active", "Not Active") for r in reasons):
            slowdown = "Active" in reasons
    return (
        Gpu(
            str(row.get("name") or ""),
            str(row.get("driver_version") or ""),
            _number(row.get("temperature.gpu")),
            _number(row.get("utilization.gpu")),
            _number(row.get("power.draw")),
            clock,
            slowdown,
        ),
        "",
    )


def sysfs_values(text: str, root: str) -> dict[str, str]:
    """``grep -H -s . FILE...`` under ``root`` -> {path below root: value}."""
    out: dict[str, str] = {}
    for line in text.splitlines():
        path, sep, value = line.partition(":")
        if sep and path.startswith(root):
            out[path[len(root) :]] = value.strip()
    return out


def _link(twin: str, netdev: str, text: str) -> Link:
    values = sysfs_values(text, f"/sys/class/net/{netdev}/")

    def integer(key: str) -> int | None:
        v = values.get(key, "")
        return int(v) if v.lstrip("-").isdigit() else None

    speed = integer("speed")
    counters = {
        name: value
        for name in (*COUNTERS, "rx_bytes", "tx_bytes")
        if (value := integer(name if name == "carrier_changes" else f"statistics/{name}"))
        is not None
    }
    return Link(
        twin,
        netdev,
        values.get("operstate", "missing" if not values else "unknown"),
        integer("mtu"),
        speed if speed is not None and speed > 0 else None,
        counters,
    )


def parse(node: str, nplan: NodePlan, rc: int, text: str) -> NodeReading:
    """One node's reading from what :func:`script` printed (rc: ssh's exit code)."""
    secs = sections(text)
    if "kernel" not in secs:
        lines = text.strip().splitlines()
        return NodeReading(node, False, f"rc {rc}: {lines[-1] if lines else 'no output'}")
    try:
        mem = tool_output.meminfo(secs.get("meminfo", (0, ""))[1])
    except tool_output.ToolOutputError:
        mem = {}
    gpu, gpu_error = _gpu(secs)

    def env(name: str) -> dict[str, str]:
        code, body = secs.get(name, (-1, ""))
        try:
            return tool_output.env_file(body) if code == 0 else {}
        except tool_output.ToolOutputError:
            return {}

    urc, utext = secs.get("unit", (-1, ""))
    irc, itext = secs.get("image", (-1, ""))
    return NodeReading(
        node=node,
        reachable=True,
        kernel=tool_output.uname_release(secs["kernel"][1]) if secs["kernel"][0] == 0 else "",
        meminfo=mem,
        gpu=gpu,
        gpu_error=gpu_error,
        links=tuple(
            _link(t.twin, t.netdev, secs.get(f"link:{t.twin}", (0, ""))[1])
            for t in nplan.roce_fabric.twins
        ),
        unit=tool_output.systemctl_show(utext) if urc == 0 else {},
        nccl_record=env("nccl_record"),
        roce_record=env("roce_record"),
        image=itext.strip() if irc == 0 and itext.strip().startswith("sha256:") else "",
        cgroup=(secs.get("cgroup", (0, ""))[1], secs.get("mountinfo", (0, ""))[1]),
    )


def read(
    plan: Plan,
    nodes: Sequence[str],
    runner: Runner,
    sudo: Mapping[str, str] | None = None,
    timeout: int = 20,
) -> dict[str, NodeReading]:
    """Every node read at once (one command each); ``sudo``: each node's root prefix."""
    sudo = sudo or {}

    def one(node: str) -> NodeReading:
        nplan = plan.node(node)
        rc, text = runner(node, script(nplan, sudo.get(node, "")), timeout)
        return parse(node, nplan, rc, text)

    with ThreadPoolExecutor(max_workers=max(1, len(nodes))) as pool:
        return dict(zip(nodes, pool.map(one, nodes), strict=True))


# ------------------------------------------------------------------ fingerprints
def save_fingerprint(
    run_dir: Path, readings: Mapping[str, NodeReading], image_nccl: Mapping[str, str]
) -> Path:
    """Keep every node's fingerprint beside a passing validate run (and the image's NCCL
    that serve up last saw, per node)."""
    data = {}
    for node, r in readings.items():
        if r.reachable:
            fp = r.fingerprint()
            if node in image_nccl:
                fp["image nccl"] = str(image_nccl[node])
            data[node] = fp
    path = run_dir / FINGERPRINT_FILE
    write_atomic(path, json.dumps(data, indent=1, sort_keys=True) + "\n")
    return path


def load_fingerprint(run_dir: Path) -> dict[str, dict[str, str]] | None:
    """What :func:`save_fingerprint` kept in ``run_dir``; None when none (or unreadable)."""
    try:
        data = json.loads((run_dir / FINGERPRINT_FILE).read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict):
        return None
    return {
        str(n): {str(k): str(v) for k, v in fp.items()}
        for n, fp in data.items()
        if isinstance(fp, dict)
    }


@dataclass(frozen=True)
class Drift:
    node: str
    what: str
    then: str
    now: str

    def __str__(self) -> str:
        return f"{self.node} {self.what}: {self.then or '(none)'} -> {self.now or '(none)'}"


def drift(
    then: Mapping[str, Mapping[str, str]], now: Mapping[str, Mapping[str, str]]
) -> list[Drift]:
    """What changed per node between two fingerprints (a key absent now is not drift: the
    reading may have failed; an image absent is a stopped service, not a new image)."""
    out = []
    for node in sorted(set(then) & set(now)):
        for key in sorted(then[node]):
            if key in now[node] and now[node][key] and now[node][key] != then[node][key]:
                out.append(Drift(node, key, then[node][key], now[node][key]))
    return out

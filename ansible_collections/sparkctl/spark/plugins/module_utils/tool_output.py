"""The one parser of what sparkctl's node tools print: text in, plain values out.

Every reading of a node tool's output - by a role's module on the node, by a
role's filter on the controller, by validate's checks, by ``serve`` - goes
through this file, so that they cannot disagree: a newer driver's banner, a
GB10's ``[N/A]`` memory or an ibdev2netdev that lists the P2 twins first is
read the same way everywhere. Tested on real outputs kept under
``tests/fixtures/<tool>/`` (tests/unit/test_tool_output.py).

How it is shared (standard library only, Python 3.11): it is the module_utils of
the sparkctl.spark collection, and everything imports it by the one name
``ansible_collections.sparkctl.spark.plugins.module_utils.tool_output``:

- the collection's modules (Ansible packs it into each module it sends to a node);
- its filter plugins, on the controller (Ansible's collection loader);
- sparkctl's own code (validate's checks, serve): the checkout, or the
  site-packages a wheel installed into, holds ``ansible_collections/``, a
  namespace package Python imports from as Ansible does.

A reader raises :class:`ToolOutputError` (a ValueError) that quotes the
offending text when the output is not what the tool prints, so a check or a
task fails with that message instead of a traceback or a silent default.
"""

from __future__ import annotations

import csv
import io
import ipaddress
import json
import re
import shlex
from typing import Any


class ToolOutputError(ValueError):
    """The text is not what the tool prints."""


def _quote(text: str, limit: int = 200) -> str:
    text = str(text)
    return repr(text if len(text) <= limit else text[:limit] + "...")


# ------------------------------------------------------------------ versions
def version_tuple(text: str) -> tuple[int, ...]:
    """``"580.95.05"`` -> (580, 95, 5); ``"13.0"`` -> (13, 0)."""
    parts = re.findall(r"\d+", str(text))
    if not parts:
        raise ToolOutputError(f"no version number in {_quote(text)}")
    return tuple(int(p) for p in parts)


def at_least(have: str, want: str) -> bool:
    """``have`` >= ``want`` as dotted versions (missing parts count as 0)."""
    a, b = version_tuple(have), version_tuple(want)
    width = max(len(a), len(b))
    return a + (0,) * (width - len(a)) >= b + (0,) * (width - len(b))


def debian_upstream_version(debian_version: str | None) -> str | None:
    """'580.95.05-0ubuntu0.24.04.2' -> '580.95.05' (dpkg's version without epoch and revision).

    Debian Policy 5.6.12: [epoch:]upstream_version[-debian_revision].
    """
    if not debian_version or not debian_version.strip():
        return None
    version = debian_version.strip()
    if ":" in version:
        version = version.split(":", 1)[1]
    if "-" in version:
        version = version.rsplit("-", 1)[0]
    return version


# ------------------------------------------------------------------ nvidia-smi
# "| NVIDIA-SMI 580.95.05   Driver Version: 580.95.05   CUDA Version: 13.0   |";
# drivers from R610 print "KMD Version: ..." and "CUDA UMD Version: ..." instead
# (sgl-project/sglang #27487, driver 610.43.02; nvidia-smi docs: "deprecated
# Driver Version and CUDA Version in favor of KMD Version and CUDA UMD Version").
# `nvidia-smi --version` prints "DRIVER version : ..." and "CUDA Version : ...".
_SMI_VERSION = re.compile(r"NVIDIA-SMI(?: version)?\s*:?\s*([0-9]+(?:\.[0-9]+)+)")
_SMI_CUDA = re.compile(r"CUDA (?:UMD )?Version\s*:\s*([0-9]+(?:\.[0-9]+)*)")
_SMI_DRIVER = re.compile(r"(?:Driver|DRIVER|KMD) [Vv]ersion\s*:\s*([0-9]+(?:\.[0-9]+)*)")
NOT_AVAILABLE = frozenset(
    {
        "[N/A]",
        "N/A",
        "[Not Supported]",
        "Not Supported",
        "[Unknown Error]",
        "[Insufficient Permissions]",
    }
)


def nvidia_smi_banner(text: str) -> dict[str, str | None]:
    """Versions in the banner of plain ``nvidia-smi`` (or ``nvidia-smi --version``).

    ``cuda_version`` is the highest CUDA the driver supports ("CUDA Version" /
    "CUDA UMD Version"), ``driver_version`` the kernel driver's ("Driver Version" /
    "KMD Version"); None where the banner does not say.
    """
    found = {
        key: rx.search(text)
        for key, rx in (
            ("smi_version", _SMI_VERSION),
            ("driver_version", _SMI_DRIVER),
            ("cuda_version", _SMI_CUDA),
        )
    }
    return {key: m.group(1) if m else None for key, m in found.items()}


def nvidia_smi_cuda(text: str) -> str:
    """The CUDA version of nvidia-smi's banner; an error when the banner has none."""
    cuda = nvidia_smi_banner(text)["cuda_version"]
    if cuda is None:
        raise ToolOutputError(
            "no 'CUDA Version' or 'CUDA UMD Version' in nvidia-smi's banner: "
            + _quote(" ".join(text.split()[:40]))
        )
    return cuda


_HEADER_CELL = re.compile(r"^(?P<name>[^\[\]]+?)\s*(?:\[(?P<unit>[^\]]*)\])?\Z")


def nvidia_smi_csv(text: str, fields: list[str] | None = None) -> list[dict[str, str | None]]:
    """Rows of ``nvidia-smi --query-gpu=... --format=csv`` keyed by their header.

    The header names each column (``memory.total [MiB]`` -> key ``memory.total``,
    its unit stripped from the values: ``1024 MiB`` -> ``1024``), so columns are
    read by name, never by position. ``[N/A]`` and the other placeholders become
    None: a GB10 has no memory of its own and prints ``[N/A]`` for every
    memory.* field. For ``--format=csv,noheader`` pass ``fields`` (the query's
    names, in its order); with a header, ``fields`` must be among its names.
    """
    rows = [
        [cell.strip() for cell in row]
        for row in csv.reader(io.StringIO(text), skipinitialspace=True)
        if any(cell.strip() for cell in row)
    ]
    if not rows:
        raise ToolOutputError("nvidia-smi printed no CSV")
    head = [_HEADER_CELL.match(cell) for cell in rows[0]]
    head_names = [m.group("name") if m else cell for m, cell in zip(head, rows[0], strict=True)]
    has_header = set(head_names) & set(fields) if fields else True
    units: list[str | None]
    if has_header:
        if fields is None and any(c in NOT_AVAILABLE or c[:1].isdigit() for c in rows[0]):
            raise ToolOutputError(
                f"no nvidia-smi CSV header in {_quote(text)} (query with "
                "--format=csv, or pass the query's fields)"
            )
        names = head_names
        units = [m.group("unit") if m and m.group("unit") else None for m in head]
        body = rows[1:]
        missing = [f for f in fields or [] if f not in names]
        if missing:
            raise ToolOutputError(
                f"nvidia-smi's header {', '.join(rows[0])!r} lacks {', '.join(missing)}"
            )
    else:
        names, units, body = list(fields or []), [None] * len(fields or []), rows
    out: list[dict[str, str | None]] = []
    for row in body:
        if len(row) != len(names):
            raise ToolOutputError(
                f"nvidia-smi CSV line {', '.join(row)!r}: {len(row)} fields, "
                f"header has {len(names)} ({', '.join(names)})"
            )
        entry: dict[str, str | None] = {}
        for name, unit, cell in zip(names, units, row, strict=True):
            value: str | None = None if cell in NOT_AVAILABLE else cell
            if value is not None and unit and value.endswith(" " + unit):
                value = value[: -len(unit) - 1]
            entry[name] = value
        out.append(entry)
    return out


# nvidia-smi refuses a field its driver does not know with 'Field "x" is not a valid
# field to query.' and exit 2 (nvidia-smi(1), RETURN VALUE 2: invalid argument).
_SMI_REFUSED = re.compile(r'Field "([^"]+)" is not a valid field to query')


def nvidia_smi_refused_field(text: str) -> str | None:
    """The field a ``--query-gpu`` was refused for, or None when it was not refused so."""
    m = _SMI_REFUSED.search(text)
    return m.group(1) if m else None


# ------------------------------------------------------------------ kernel, modules, nvcc
def uname_release(text: str) -> str:
    """``uname -r`` output -> the release; an error when it is not one word."""
    words = text.split()
    if len(words) != 1:
        raise ToolOutputError(f"unexpected `uname -r` output {_quote(text)}")
    return words[0]


def modinfo(text: str) -> dict[str, str]:
    """``modinfo`` output ('field:   value' lines) -> the first value of each field.

    nvidia.ko repeats alias/parm/depends lines; filename, version and vermagic
    appear once.
    """
    fields: dict[str, str] = {}
    for line in text.splitlines():
        key, sep, value = line.partition(":")
        if not sep or not key or " " in key.strip():
            continue
        fields.setdefault(key.strip(), value.strip())
    return fields


# "Cuda compilation tools, release 13.0, V13.0.88"
_NVCC_VERSION = re.compile(r"release ([0-9]+\.[0-9]+), V([0-9]+(?:\.[0-9]+)*)")
# compute_121, sm_121, and the arch-specific / family forms (sm_121a, sm_100f).
_NVCC_TARGET = re.compile(r"^(?:compute|sm|lto)_[0-9]+[a-z]?\Z")


def nvcc_version(text: str) -> dict[str, str]:
    """``nvcc --version`` -> {release, version}."""
    match = _NVCC_VERSION.search(text)
    if not match:
        raise ToolOutputError(
            "no 'release X.Y, VX.Y.Z' line in nvcc --version output " + _quote(text.strip())
        )
    return {"release": match.group(1), "version": match.group(2)}


def nvcc_targets(text: str) -> list[str]:
    """``nvcc --list-gpu-arch`` / ``--list-gpu-code``: one target per line."""
    targets = [line.strip() for line in text.splitlines() if line.strip()]
    bad = [t for t in targets if not _NVCC_TARGET.match(t)]
    if bad:
        raise ToolOutputError(f"unexpected lines in nvcc's target list: {', '.join(bad[:3])}")
    return targets


def dpkg_query(text: str) -> dict[str, list[dict[str, str]]]:
    """``dpkg-query -W -f '${Package}\\t${Version}\\t${Architecture}\\t${db:Status-Abbrev}\\n'``
    -> package_facts' shape (plus ``selection``: hold or install).

    Only installed packages (current state ``i``) are kept, as package_facts does.
    """
    out: dict[str, list[dict[str, str]]] = {}
    for line in text.splitlines():
        fields = line.split("\t")
        if len(fields) != 4 or len(fields[3]) < 2 or fields[3][1] != "i":
            continue
        name, version, arch, status = fields
        name = name.split(":")[0]
        out.setdefault(name, []).append(
            {
                "name": name,
                "version": version,
                "arch": arch,
                "source": "apt",
                "selection": "hold" if status[0] == "h" else "install",
            }
        )
    return out


_DPKG_NAME = re.compile(r"^[a-z0-9][a-z0-9.+-]*(?::\S+)?\Z")


def dpkg_list(text: str) -> dict[str, list[dict[str, str]]]:
    """``dpkg -l`` (``ii  name[:arch]  version  arch  description`` lines) -> the same
    shape as :func:`dpkg_query` (package_facts' plus ``selection``).

    The first letter is the desired state (``h`` hold, ``i`` install, ``r``/``p`` remove
    or purge), the second the current one; only installed packages (``i``) are kept.
    The header (``Desired=...``, ``||/ Name ...``, ``+++-===``) and a ``grep``'s other
    lines are skipped. The name loses its ``:arch`` (``libnvidia-container1:arm64``):
    apt-mark and package_facts name packages without it.
    """
    out: dict[str, list[dict[str, str]]] = {}
    for line in text.splitlines():
        fields = line.split()
        if len(fields) < 4 or len(fields[0]) < 2 or fields[0][1] != "i":
            continue
        if fields[0][0] not in "uihrp" or not _DPKG_NAME.match(fields[1]):
            continue
        name = fields[1].split(":")[0]
        out.setdefault(name, []).append(
            {
                "name": name,
                "version": fields[2],
                "arch": fields[3],
                "source": "apt",
                "selection": "hold" if fields[0][0] == "h" else "install",
            }
        )
    return out


# "mysql-client/noble-updates,noble-security 8.0.40-0ubuntu0.24.04.1 all [upgradable from: ...]"
_APT_UPGRADABLE = re.compile(
    r"^(?P<name>[a-z0-9][a-z0-9.+-]*)/(?P<pockets>\S+) (?P<version>\S+) (?P<arch>\S+)"
    r" \[upgradable from: (?P<installed>[^\]\s]+)\]\s*\Z"
)


def apt_upgradable(text: str) -> list[dict[str, Any]]:
    """``apt list --upgradable`` -> one entry per package, security updates first:
    {name, version (the candidate), installed, arch, pockets, security}.

    A line is ``name/pocket[,pocket...] candidate arch [upgradable from: installed]``;
    apt's ``Listing...`` line and its "does not have a stable CLI interface" warning
    (on stderr, but often merged) are skipped. ``security`` is true when one of the
    pockets the candidate comes from is a ``-security`` one (``noble-security``,
    ESM's ``noble-apps-security``). Otherwise apt's order (by name) is kept.
    """
    rows: list[dict[str, Any]] = []
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith(("Listing", "WARNING:")):
            continue
        m = _APT_UPGRADABLE.match(line)
        if m is None:
            if "[upgradable from:" in line:
                raise ToolOutputError(f"not an `apt list --upgradable` line: {_quote(line)}")
            continue
        pockets = m.group("pockets").split(",")
        rows.append(
            {
                "name": m.group("name"),
                "version": m.group("version"),
                "installed": m.group("installed"),
                "arch": m.group("arch"),
                "pockets": pockets,
                "security": any(p.endswith("-security") for p in pockets),
            }
        )
    return sorted(rows, key=lambda r: not r["security"])


# ------------------------------------------------------------------ PCIe links (sysfs)
# drivers/pci/probe.c, pci_speed_string(): "2.5 GT/s PCIe" ... "64.0 GT/s PCIe" since
# Linux 5.7; "2.5 GT/s" ... "32 GT/s" before; "Unknown" when the link is down.
_PCIE_SPEED = re.compile(r"^(?P<gts>[0-9]+(?:\.[0-9]+)?) GT/s(?: PCIe)?\Z")


def pcie_link_speed(text: str) -> float | None:
    """A PCI device's ``current_link_speed`` / ``max_link_speed`` (sysfs) -> GT/s;
    None for ``Unknown`` (no link trained)."""
    value = text.strip()
    if value in ("Unknown", "Unknown speed"):
        return None
    m = _PCIE_SPEED.match(value)
    if m is None:
        raise ToolOutputError(f"not a PCIe link speed: {_quote(value)}")
    return float(m.group("gts"))


def pcie_link_width(text: str) -> int:
    """A PCI device's ``current_link_width`` / ``max_link_width`` (sysfs, lanes) -> int."""
    value = text.strip()
    if not value.isdigit():
        raise ToolOutputError(f"not a PCIe link width: {_quote(value)}")
    return int(value)


# ------------------------------------------------------------------ RDMA devices
# "rocep1s0f1 port 1 ==> enp1s0f1np1 (Up)"; -v puts PCI address, device, fw in
# front and the port state after the port: "0000:01:00.1 rocep1s0f1 (MT4129 - NA)
#  fw 28.45.4028 port 1 (ACTIVE) ==> enp1s0f1np1 (Up)" (the Mellanox script).
_IBDEV = re.compile(
    r"^(?:(?P<pci>[0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.\d)\s+)?"
    r"(?P<ibdev>\S+)(?:\s+\([^)]*\))?(?:\s+.*?\s+fw\s+\S+)?\s+port\s+(?P<port>\d+)"
    r"(?:\s+\((?P<port_state>\w+)\s*\))?\s+==>\s+(?P<netdev>\S+)"
    r"\s+\((?P<state>Up|Down)\)\s*\Z"
)


def ibdev2netdev(text: str) -> list[dict[str, Any]]:
    """``ibdev2netdev`` (plain or ``-v``) -> one entry per line, in the tool's order:
    {ibdev, port, netdev, state ("Up"/"Down"), pci (``-v`` only), port_state (``-v`` only)}.

    The order is the kernel's listing of /sys/class/infiniband, which on a DGX
    Spark may put the P2 twins first (roceP2p1s0f0 before rocep1s0f0): look
    devices up by name, never by line number.
    """
    out: list[dict[str, Any]] = []
    for raw in text.splitlines():
        line = raw.strip()
        if not line:
            continue
        m = _IBDEV.match(line)
        if not m:
            raise ToolOutputError(f"not an ibdev2netdev line: {_quote(line)}")
        out.append(
            {
                "ibdev": m.group("ibdev"),
                "port": int(m.group("port")),
                "netdev": m.group("netdev"),
                "state": m.group("state"),
                "pci": m.group("pci"),
                "port_state": m.group("port_state"),
            }
        )
    return out


_IPV4_MAPPED_PREFIX = "0000:0000:0000:0000:0000:ffff:"


def gid_to_ipv4(gid: str) -> str | None:
    """The IPv4 address of an IPv4-mapped GID (``...:ffff:c0a8:640b``), else None."""
    gid = gid.strip().lower()
    if not gid.startswith(_IPV4_MAPPED_PREFIX):
        return None
    tail = gid[len(_IPV4_MAPPED_PREFIX) :].split(":")
    if len(tail) != 2 or not all(len(part) == 4 for part in tail):
        return None
    try:
        raw = bytes.fromhex(tail[0] + tail[1])
    except ValueError:
        return None
    return str(ipaddress.IPv4Address(raw))


def show_gids(text: str) -> list[dict[str, Any]]:
    """Rows of ``show_gids`` (MLNX_OFED/DOCA script), tab- or space-separated:
    {dev, port, index, gid, ipv4, ver ("v1"/"v2"), ndev}.

    A row is ``DEV PORT INDEX GID [IPv4] VER [NDEV]``: the IPv4 column is empty
    for non-IPv4 GIDs and the netdev column on InfiniBand ports, so rows are
    recognised by shape (numeric PORT and INDEX, a ``vN`` version), not by
    column position. Header, dashes and ``n_gids_found=`` are skipped.
    """
    rows: list[dict[str, Any]] = []
    for line in text.splitlines():
        fields = line.split()
        if len(fields) < 5 or not (fields[1].isdigit() and fields[2].isdigit()):
            continue
        dev, port, index, gid = fields[0], int(fields[1]), int(fields[2]), fields[3].lower()
        rest = fields[4:]
        ipv4 = None
        if rest and rest[0].count(".") == 3:
            ipv4 = rest.pop(0)
        if not rest or not rest[0].lower().startswith("v"):
            continue
        rows.append(
            {
                "dev": dev,
                "port": port,
                "index": index,
                "gid": gid,
                "ipv4": ipv4 or gid_to_ipv4(gid),
                "ver": rest[0].lower(),
                "ndev": rest[1] if len(rest) > 1 else None,
            }
        )
    return rows


def ibv_devinfo(text: str) -> list[dict[str, Any]]:
    """``ibv_devinfo`` -> one entry per ``hca_id:`` block, with its ports:
    {hca_id, fw_ver, vendor_part_id, board_id, ..., ports: [{port, state,
    active_mtu, link_layer, ...}]}. States keep only their name (``PORT_ACTIVE``),
    MTUs their bytes (``4096 (5)`` -> ``4096``).
    """
    devices: list[dict[str, Any]] = []
    port: dict[str, Any] | None = None
    for raw in text.splitlines():
        line = raw.strip()
        key, sep, value = line.partition(":")
        if not sep:
            continue
        key, value = key.strip(), value.strip()
        if key == "hca_id":
            devices.append({"hca_id": value, "ports": []})
            port = None
        elif not devices:
            raise ToolOutputError(f"ibv_devinfo line before any hca_id: {_quote(line)}")
        elif key == "port" and value.isdigit():
            port = {"port": int(value)}
            devices[-1]["ports"].append(port)
        else:
            word = (
                value.split(" (")[0]
                if key in ("state", "phys_state", "max_mtu", "active_mtu")
                else value
            )
            (port if port is not None else devices[-1])[key] = word
    if not devices:
        raise ToolOutputError(f"no hca_id in ibv_devinfo output {_quote(text)}")
    return devices


# ------------------------------------------------------------------ netdevs
_ETH_SPEED = re.compile(r"^\s*Speed:\s*(?P<speed>\d+)\s*Mb/s\s*$", re.M)
_ETH_SPEED_UNKNOWN = re.compile(r"^\s*Speed:\s*Unknown!?\s*$", re.M)
_ETH_FIELD = re.compile(
    r"^\s*(?P<key>Link detected|Duplex|Auto-negotiation|Port|Lanes):"
    r"\s*(?P<value>\S.*?)\s*$",
    re.M,
)


def ethtool(text: str) -> dict[str, Any]:
    """``ethtool <netdev>`` -> {speed_mbps (None when Unknown), link_detected, duplex,
    auto_negotiation, port, lanes}; an error without a Speed line (not ethtool's
    settings output, or ``| grep Speed`` left nothing)."""
    speed = _ETH_SPEED.search(text)
    if speed is None and _ETH_SPEED_UNKNOWN.search(text) is None:
        raise ToolOutputError(f"ethtool output has no Speed line: {_quote(text)}")
    fields = {m.group("key"): m.group("value") for m in _ETH_FIELD.finditer(text)}
    link = fields.get("Link detected")
    lanes = fields.get("Lanes")
    return {
        "speed_mbps": int(speed.group("speed")) if speed else None,
        "link_detected": None if link is None else link == "yes",
        "duplex": fields.get("Duplex"),
        "auto_negotiation": fields.get("Auto-negotiation"),
        "port": fields.get("Port"),
        "lanes": int(lanes) if lanes and lanes.isdigit() else None,
    }


_SS_ADDR = re.compile(r"^(?P<host>\[[0-9a-fA-F:.%\w]+\]|[^\s]+):(?P<port>\d+|\*)$")
_SS_KV = re.compile(r"(?P<key>[a-z_]+):(?P<value>[^\s(]+)")
_SS_RATE = re.compile(
    r"\b(?P<key>delivery_rate|pacing_rate|send) (?P<value>[\d.]+)(?P<unit>[KMG]?)bps"
)


def _ss_endpoint(word: str) -> tuple[str, int]:
    m = _SS_ADDR.match(word)
    if m is None or m.group("port") == "*":
        raise ToolOutputError(f"ss: not an address:port: {_quote(word)}")
    return m.group("host").strip("[]"), int(m.group("port"))


def ss_tcp_info(text: str) -> list[dict[str, Any]]:
    """``ss -tinH state established [filter]`` (iproute2's ``tcp_show_info``) -> one
    entry a connection: {local, local_port, peer, peer_port, send_q, recv_q, rtt_ms,
    rttvar_ms, min_rtt_ms, bytes_sent, bytes_received, retrans, delivery_rate_bps,
    app_limited, busy_ms};
    a figure the kernel did not print is None. With ``state established`` ss leaves
    the State column out: ``Recv-Q Send-Q Local:Port Peer:Port``, then a
    tab-indented line of ``key:value`` figures (``rtt:<srtt>/<rttvar>`` in ms)."""
    out: list[dict[str, Any]] = []
    current: dict[str, Any] | None = None
    for line in text.splitlines():
        if not line.strip():
            continue
        if line[0] in " \t":
            if current is None:
                raise ToolOutputError(f"ss: figures before a socket line: {_quote(line)}")
            kv = {m.group("key"): m.group("value") for m in _SS_KV.finditer(line)}
            rtt = kv.get("rtt", "").split("/")
            rates = {
                m.group("key"): float(m.group("value"))
                * {"": 1, "K": 1e3, "M": 1e6, "G": 1e9}[m.group("unit")]
                for m in _SS_RATE.finditer(line)
            }
            retrans = kv.get("retrans", "").split("/")
            current.update(
                rtt_ms=float(rtt[0]) if rtt[0] else None,
                rttvar_ms=float(rtt[1]) if len(rtt) > 1 and rtt[1] else None,
                min_rtt_ms=float(kv["minrtt"]) if "minrtt" in kv else None,
                bytes_sent=int(kv["bytes_sent"]) if "bytes_sent" in kv else None,
                bytes_received=int(kv["bytes_received"]) if "bytes_received" in kv else None,
                retrans=int(retrans[-1]) if retrans[-1].isdigit() else None,
                delivery_rate_bps=rates.get("delivery_rate"),
                # the last delivery sample was limited by the application, not the path
                app_limited=" app_limited" in line,
                # tcpi_busy_time: the time the connection had data in flight (sending,
                # or held back by the peer's window or the send buffer), cumulative
                busy_ms=int(kv["busy"][:-2]) if kv.get("busy", "").endswith("ms") else None,
            )
            continue
        words = line.split()
        if len(words) < 4 or not (words[0].isdigit() and words[1].isdigit()):
            raise ToolOutputError(
                f"ss: not a socket line of -tinH state established: {_quote(line)}"
            )
        local, local_port = _ss_endpoint(words[2])
        peer, peer_port = _ss_endpoint(words[3])
        current = {
            "local": local,
            "local_port": local_port,
            "peer": peer,
            "peer_port": peer_port,
            "recv_q": int(words[0]),
            "send_q": int(words[1]),
            "rtt_ms": None,
            "rttvar_ms": None,
            "min_rtt_ms": None,
            "bytes_sent": None,
            "bytes_received": None,
            "retrans": None,
            "delivery_rate_bps": None,
            "app_limited": False,
            "busy_ms": None,
        }
        out.append(current)
    return out


def _ip_json(text: str, what: str) -> list[dict[str, Any]]:
    try:
        data = json.loads(text or "[]")
    except json.JSONDecodeError as exc:
        raise ToolOutputError(f"{what} printed no JSON ({exc}): {_quote(text)}") from None
    if not isinstance(data, list) or not all(isinstance(d, dict) for d in data):
        raise ToolOutputError(f"{what} printed JSON that is not a list of objects: {_quote(text)}")
    return data


def ip_addr(text: str) -> dict[str, list[str]]:
    """``ip -j [-4] addr show`` -> {ifname: ["a.b.c.d/len", ...]} (IPv4 only, in order)."""
    out: dict[str, list[str]] = {}
    for link in _ip_json(text, "ip -j addr"):
        addrs = [
            f"{a['local']}/{a['prefixlen']}"
            for a in link.get("addr_info", [])
            if a.get("family") == "inet" and "local" in a
        ]
        out.setdefault(str(link["ifname"]), []).extend(addrs)
    return out


def ip_link(text: str) -> dict[str, dict[str, Any]]:
    """``ip -j link show`` (or ``ip -j addr``) -> {ifname: {mtu, operstate, address, flags,
    up (the UP flag), lower_up (carrier)}}."""
    out: dict[str, dict[str, Any]] = {}
    for link in _ip_json(text, "ip -j link"):
        flags = [str(f) for f in link.get("flags", [])]
        out[str(link["ifname"])] = {
            "mtu": int(link["mtu"]) if "mtu" in link else None,
            "operstate": link.get("operstate"),
            "address": link.get("address"),
            "flags": flags,
            "up": "UP" in flags,
            "lower_up": "LOWER_UP" in flags,
        }
    return out


def ip_neigh_mac(text: str) -> str | None:
    """``ip -j neigh show ADDR dev IF`` -> the neighbour's MAC (None if unresolved)."""
    try:
        entries = _ip_json(text, "ip -j neigh")
    except ToolOutputError:
        return None
    for entry in entries:
        if entry.get("lladdr") and "FAILED" not in entry.get("state", []):
            return str(entry["lladdr"])
    return None


_PING = re.compile(r"(\d+) packets transmitted, (\d+) (?:packets )?received")
_PING_ERROR = re.compile(
    r"too long|unreachable|cannot assign|Cannot assign|Operation not "
    r"permitted|unknown host|No route"
)


def ping(stdout: str, stderr: str = "") -> dict[str, Any]:
    """iputils ``ping``: {sent, received, error (its first error line, or None)}; sent 0 and
    an error when it printed no summary."""
    match = _PING.search(stdout)
    errors = [ln.strip() for ln in (stderr + "\n" + stdout).splitlines() if _PING_ERROR.search(ln)]
    if not match:
        return {
            "sent": 0,
            "received": 0,
            "error": errors[0] if errors else (stderr.strip() or "ping printed no summary"),
        }
    return {
        "sent": int(match.group(1)),
        "received": int(match.group(2)),
        "error": errors[0] if errors else None,
    }


# ------------------------------------------------------------------ perftest
_PERF_HEADER = re.compile(r"#bytes\s+#iterations\s+(?P<cols>.*)\Z")
_PERF_COL = re.compile(r"(?P<name>[A-Za-z_%. ]+?)\s*\[(?P<unit>[^\]]+)\]")
# perftest: format_factor = (report_fmt == MBS) ? 0x100000 : 125000000 - "MB/sec"
# is MiB/s, "Gb/sec" (--report_gbits) is 10^9 bit/s.
_TO_GBITS = {"Gb/sec": 1.0, "MB/sec": 0x100000 * 8 / 1e9}


def ib_write_bw(text: str) -> dict[str, Any]:
    """``ib_write_bw`` (perftest) result table -> {unit, rows, average_gbps}.

    The BW columns' unit is in the header (``BW average[Gb/sec]`` with
    ``--report_gbits``, ``BW average[MB/sec]`` without); each row is read by
    the header's column names and ``average_gbps`` is the last row's BW average
    in Gb/s whatever the unit. Lines between header and rows (perftest's
    "Conflicting CPU frequency" warnings) are skipped.
    """
    header: list[tuple[str, str]] | None = None
    rows: list[dict[str, Any]] = []
    for raw in text.splitlines():
        line = raw.strip()
        m = _PERF_HEADER.search(line)
        if m:
            header = [
                (c.group("name").strip(), c.group("unit"))
                for c in _PERF_COL.finditer(m.group("cols"))
            ]
            continue
        words = line.split()
        if header is None or len(words) < 2 or not (words[0].isdigit() and words[1].isdigit()):
            continue
        try:
            values = [float(w) for w in words[2:]]
        except ValueError:
            continue
        if len(values) != len(header):
            continue
        row: dict[str, Any] = {"bytes": int(words[0]), "iterations": int(words[1])}
        row.update({name: value for (name, _unit), value in zip(header, values, strict=True)})
        rows.append(row)
    if header is None:
        raise ToolOutputError(
            "no ib_write_bw result header (#bytes #iterations BW peak[...] "
            f"BW average[...] ...): {_quote(text[-300:])}"
        )
    units = dict(header)
    unit = units.get("BW average")
    if unit not in _TO_GBITS:
        raise ToolOutputError(f"ib_write_bw's BW average is in {unit!r}, not Gb/sec or MB/sec")
    if not rows:
        raise ToolOutputError(f"no ib_write_bw result row under its header: {_quote(text[-300:])}")
    return {
        "unit": unit,
        "rows": rows,
        "average_gbps": float(rows[-1]["BW average"]) * _TO_GBITS[unit],
    }


# ------------------------------------------------------------------ systemd
def systemctl_show(text: str) -> dict[str, str]:
    """``systemctl show -p A -p B UNIT`` -> {A: value, B: value} (the first of repeated keys)."""
    out: dict[str, str] = {}
    for line in str(text).splitlines():
        key, sep, value = line.partition("=")
        if sep and key.strip() and key.strip() not in out:
            out[key.strip()] = value
    return out


def systemctl_show_units(
    text: str, units: list[str], properties: list[str]
) -> dict[str, dict[str, str]]:
    """``systemctl show -p P1,P2 U1 U2`` (one block per unit, in order, blank-line
    separated) -> {unit: {property: value}}; "" for what is not shown."""
    blocks = str(text).strip("\n").split("\n\n") if str(text).strip() else []
    out: dict[str, dict[str, str]] = {}
    for i, unit in enumerate(units):
        shown = systemctl_show(blocks[i]) if i < len(blocks) else {}
        out[unit] = {p: shown.get(p, "") for p in properties}
    return out


def systemctl_environment_files(text: str) -> list[str]:
    """The paths of every ``EnvironmentFiles=`` line of ``systemctl show``
    (``/etc/x.env (ignore_errors=no)`` -> ``/etc/x.env``)."""
    return [
        re.sub(r" [(]ignore_errors=.*$", "", line.partition("=")[2])
        for line in str(text).splitlines()
        if line.startswith("EnvironmentFiles=")
    ]


_EXEC_ARGV = re.compile(r"argv\[\]=(?P<argv>.*?) ; ignore_errors=")


def execstart_argv(text: str) -> list[str]:
    """argv of the first command in ``systemctl show -p ExecStart [--value]`` output
    (``{ path=... ; argv[]=... ; ignore_errors=no ; ... }``); an error when there is none
    (the unit is not loaded).

    systemd 252 (Debian 12) joins argv[] with blanks and no quoting, newer
    releases quote words with blanks; sparkctl's units have no such words.
    """
    match = _EXEC_ARGV.search(str(text))
    if match is None:
        raise ToolOutputError(f"no argv[] in ExecStart {_quote(text)}: is the unit loaded?")
    return shlex.split(match.group("argv"))


_SPAN_UNITS = {
    "us": 1e-6,
    "ms": 1e-3,
    "s": 1,
    "min": 60,
    "h": 3600,
    "d": 86400,
    "w": 604800,
    "M": 2629800,
    "y": 31557600,
}
_SPAN = re.compile(r"(?P<n>\d+(?:\.\d+)?)(?P<unit>us|ms|min|s|h|d|w|M|y)")


def systemd_timespan(text: Any) -> float:
    """A time span as ``systemctl show`` prints it (``10min``, ``1min 30s``, ``infinity``)
    -> seconds."""
    value = str(text).strip()
    if value == "infinity":
        return float("inf")
    if re.fullmatch(r"\d+", value):
        return float(value)
    parts = value.split()
    matches = [_SPAN.fullmatch(p) for p in parts]
    if not parts or any(m is None for m in matches):
        raise ToolOutputError(f"{value!r} is not a systemd time span")
    return sum(float(m.group("n")) * _SPAN_UNITS[m.group("unit")] for m in matches if m)


# ------------------------------------------------------------------ environments
_ENV_KEY = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*\Z")


def env_file(text: str) -> dict[str, str]:
    """KEY=VALUE lines as sparkctl's roles write them (``/etc/nccl.conf``,
    ``/etc/sparkctl/*.env``, record files) -> dict.

    The common subset of the three readers of these files - NCCL's
    ``setEnvFile`` (split at the first ``=``, ``#`` lines skipped), systemd's
    ``EnvironmentFile=`` and docker's ``--env-file``: blank and ``#`` lines are
    skipped, a line that is not KEY=VALUE or sets a key twice is an error.
    """
    env: dict[str, str] = {}
    for number, raw in enumerate(str(text).splitlines(), start=1):
        line = raw.rstrip("\r")
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        key, sep, value = line.partition("=")
        if not sep or not _ENV_KEY.match(key):
            # The line itself stays out of the message: a secrets file is read with this too.
            raise ToolOutputError(f"line {number} is not KEY=VALUE")
        if key in env:
            raise ToolOutputError(f"line {number}: {key} is set twice")
        env[key] = value
    return env


def environ(text: str) -> dict[str, str]:
    """A process environment: ``/proc/PID/environ`` (NUL-separated ``KEY=VALUE``) or a
    container's ``docker inspect --format '{{json .Config.Env}}'`` (a JSON list of them)."""
    stripped = text.strip()
    if stripped.startswith("["):
        try:
            items = json.loads(stripped)
        except ValueError:
            raise ToolOutputError(f"Config.Env is not JSON: {_quote(stripped, 120)}") from None
        if not isinstance(items, list) or not all(isinstance(i, str) for i in items):
            raise ToolOutputError(f"Config.Env is not a list of strings: {_quote(stripped, 120)}")
    else:
        items = [i for i in text.split("\0") if i]
    out: dict[str, str] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if sep and key:
            out[key] = value
    return out


def docker_run_mounts(argv: list[str]) -> list[tuple[str, str]]:
    """(host path, container path) of every ``--volume``/``-v`` bind of a ``docker run``
    argv (as :func:`execstart_argv` reads it back from the unit)."""
    out = []
    for i, word in enumerate(argv[:-1]):
        if word in ("--volume", "-v"):
            src, _, rest = argv[i + 1].partition(":")
            out.append((src, rest.split(":", 1)[0] or src))
    return out


# ------------------------------------------------------------------ clock, memory
def chronyc_tracking(text: str) -> dict[str, Any]:
    """``chronyc -n tracking`` -> {reference (hex Reference ID), stratum, offset_s (system
    clock minus NTP time; negative when slow), leap}."""
    fields: dict[str, str] = {}
    for line in text.splitlines():
        key, sep, value = line.partition(":")
        if sep:
            fields[key.strip()] = value.strip()
    try:
        reference = fields["Reference ID"].split()[0]
        stratum = int(fields["Stratum"])
        words = fields["System time"].split()
        return {
            "reference": reference,
            "stratum": stratum,
            "offset_s": float(words[0]) * (-1.0 if "slow" in words else 1.0),
            "leap": fields["Leap status"],
        }
    except (KeyError, IndexError, ValueError) as exc:
        raise ToolOutputError(f"not chronyc tracking output ({exc}): {_quote(text)}") from None


# ------------------------------------------------------------------ cgroup memory
# cgroup v1's "no limit": PAGE_COUNTER_MAX in pages, printed in bytes (9223372036854771712
# with 4 KiB pages); anything this large is no limit.
_CGROUP_V1_UNLIMITED = 1 << 62
_CGROUP_FILES = {
    2: ("memory.max", "memory.current", "memory.stat"),
    1: ("memory.limit_in_bytes", "memory.usage_in_bytes", "memory.stat"),
}


def _mount_field(text: str) -> str:
    """A mountinfo path field: blanks and backslashes come octal-escaped (proc(5))."""
    return re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), text)


def memory_cgroup_dirs(proc_cgroup: str, mountinfo: str) -> dict[str, Any] | None:
    """Where a process's memory cgroup is, as this mount namespace sees it.

    ``/proc/PID/cgroup`` and ``/proc/self/mountinfo`` (proc(5), cgroups(7)) ->
    ``{"version": 1 or 2, "dirs": [the cgroup's directory, its parent, ... the
    mount point]}``; None where no memory controller is mounted. cgroup v1 where a
    v1 hierarchy carries the memory controller (a hybrid host: a controller is in one
    hierarchy only), else v2. The cgroup's path is taken relative to the mount's
    root, as OpenJDK's container support does (src/hotspot/os/linux/
    cgroupSubsystem_linux.cpp): inside a container whose /proc shows the host's path
    and whose mount's root is that path, the directory is the mount point itself."""
    mounts: list[tuple[str, str, str, set[str]]] = []  # (fstype, root, mountpoint, superopts)
    for line in mountinfo.splitlines():
        fields = line.split()
        if "-" not in fields[6:]:
            continue
        sep = fields.index("-", 6)
        if len(fields) < sep + 4 or len(fields) < 5:
            continue
        fstype, superopts = fields[sep + 1], set(fields[sep + 3].split(","))
        if fstype in ("cgroup", "cgroup2"):
            mounts.append((fstype, _mount_field(fields[3]), _mount_field(fields[4]), superopts))
    paths: dict[str, str] = {}  # "memory" (v1) or "" (v2) -> the process's cgroup path
    for line in proc_cgroup.splitlines():
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        if parts[0] == "0" and not parts[1]:
            paths[""] = parts[2]
        elif "memory" in parts[1].split(","):
            paths["memory"] = parts[2]
    v1 = next((m for m in mounts if m[0] == "cgroup" and "memory" in m[3]), None)
    v2 = next((m for m in mounts if m[0] == "cgroup2"), None)
    if v1 is not None and "memory" in paths:
        version, (_, root, point, _), path = 1, v1, paths["memory"]
    elif v1 is None and v2 is not None and "" in paths:
        version, (_, root, point, _), path = 2, v2, paths[""]
    else:
        return None
    root = root.rstrip("/")
    rel = path[len(root) :] if path == root or path.startswith(root + "/") else ""
    point = point.rstrip("/") or "/"
    parts = [p for p in rel.split("/") if p]
    dirs = ["/".join([point.rstrip("/"), *parts[:n]]) or "/" for n in range(len(parts), -1, -1)]
    return {"version": version, "dirs": dirs}


def memory_cgroup_files(place: dict[str, Any]) -> list[str]:
    """The files :func:`memory_cgroup` reads for :func:`memory_cgroup_dirs`' ``place``."""
    names = _CGROUP_FILES[int(place["version"])]
    return [f"{d.rstrip('/')}/{n}" for d in place["dirs"] for n in names]


def memory_cgroup(place: dict[str, Any], grep_output: str) -> dict[str, Any]:
    """``grep -H -s . FILES`` of :func:`memory_cgroup_files` -> the cgroup's memory.

    ``{"usage": bytes charged to the process's own cgroup (None: unreadable),
    "headroom": what the tightest limit from it up to the mount leaves (None: no
    limit), "limit": that limit, "bound": its directory}``. The headroom counts
    inactive file pages as free, the kernel reclaiming them before it fails an
    allocation: the working set is usage less inactive_file, as the kubelet's
    memory.available does (kubernetes.io/docs/concepts/scheduling-eviction/
    node-pressure-eviction; cAdvisor's working set)."""
    files = memory_cgroup_files(place)
    values: dict[str, list[str]] = {}
    for line in grep_output.splitlines():
        for f in files:
            if line.startswith(f + ":"):
                values.setdefault(f, []).append(line[len(f) + 1 :])
                break
    limit_name, usage_name, _ = _CGROUP_FILES[int(place["version"])]
    v1 = int(place["version"]) == 1

    def number(path: str) -> int | None:
        got = values.get(path, [])
        return int(got[0]) if got and got[0].strip().isdigit() else None

    def inactive_file(directory: str) -> int:
        stat = {
            w[0]: w[1]
            for w in (v.split() for v in values.get(f"{directory}/memory.stat", []))
            if len(w) == 2
        }
        # v1's hierarchical total_ counts the cgroup's descendants too, as usage does.
        word = stat.get("total_inactive_file" if v1 else "inactive_file", "0")
        return int(word) if word.isdigit() else 0

    dirs = [d.rstrip("/") for d in place["dirs"]]
    usage = number(f"{dirs[0]}/{usage_name}") if dirs else None
    best: dict[str, Any] = {"usage": usage, "headroom": None, "limit": None, "bound": None}
    for d in dirs:
        limit, used = number(f"{d}/{limit_name}"), number(f"{d}/{usage_name}")
        if limit is None or limit >= _CGROUP_V1_UNLIMITED or used is None:
            continue  # v2 writes "max"; v1 a page counter's maximum
        room = max(0, limit - used + inactive_file(d))
        if best["headroom"] is None or room < best["headroom"]:
            best.update(headroom=room, limit=limit, bound=d or "/")
    return best


def meminfo(text: str) -> dict[str, int]:
    """``/proc/meminfo`` -> {key: bytes}."""
    out = {}
    for line in text.splitlines():
        key, sep, value = line.partition(":")
        words = value.split()
        if sep and words and words[0].isdigit():
            scale = 1024 if len(words) > 1 and words[1] == "kB" else 1
            out[key.strip()] = int(words[0]) * scale
    if "MemAvailable" not in out:
        raise ToolOutputError("no MemAvailable in /proc/meminfo")
    return out

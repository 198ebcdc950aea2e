"""Readers for what the node checks see: tool output in, plain values out.

Every reader is a pure function with unit tests (tests/unit/test_checks_parse.py)
on output taken from the tools; the checks themselves only compare. A reader
raises :class:`ValueError` with the offending text when the output is not what
the tool prints, so a check fails with that message instead of a traceback.
"""

from __future__ import annotations

import json
import re
import shlex
from dataclasses import dataclass
from typing import Any


def version_tuple(text: str) -> tuple[int, ...]:
    """``"580.95.05"`` -> (580, 95, 5); ``"13.0"`` -> (13, 0)."""
    parts = re.findall(r"\d+", str(text))
    if not parts:
        raise ValueError(f"no version number in {text!r}")
    return tuple(int(p) for p in parts)


def at_least(have: str, want: str) -> bool:
    """``have`` >= ``want`` as dotted versions (missing parts count as 0)."""
    a, b = version_tuple(have), version_tuple(want)
    width = max(len(a), len(b))
    return a + (0,) * (width - len(a)) >= b + (0,) * (width - len(b))


@dataclass(frozen=True)
class Gpu:
    name: str
    driver: str


def nvidia_smi_query(text: str) -> list[Gpu]:
    """``nvidia-smi --query-gpu=name,driver_version --format=csv,noheader``."""
    gpus = []
    for line in text.splitlines():
        if not line.strip():
            continue
        fields = [f.strip() for f in line.split(",")]
        if len(fields) != 2 or not fields[1]:
            raise ValueError(f"not 'name, driver_version': {line!r}")
        gpus.append(Gpu(fields[0], fields[1]))
    if not gpus:
        raise ValueError("nvidia-smi listed no GPU")
    return gpus


def nvidia_smi_cuda(text: str) -> str:
    """The ``CUDA Version: 13.0`` of nvidia-smi's banner."""
    match = re.search(r"CUDA Version:\s*([0-9.]+)", text)
    if not match:
        raise ValueError("no 'CUDA Version' in nvidia-smi's banner")
    return match.group(1)


_IBDEV = re.compile(r"^(\S+) port (\d+) ==> (\S+) \((\w+)\)$")


def ibdev2netdev(text: str) -> dict[str, tuple[str, str]]:
    """``rocep1s0f1 port 1 ==> enp1s0f1np1 (Up)`` lines -> {ibdev: (netdev, state)}."""
    out: dict[str, tuple[str, str]] = {}
    for raw in text.splitlines():
        line = raw.strip()
        if not line:
            continue
        match = _IBDEV.match(line)
        if not match:
            raise ValueError(f"not an ibdev2netdev line: {line!r}")
        out[match.group(1)] = (match.group(3), match.group(4))
    return out


@dataclass(frozen=True)
class Tracking:
    reference: str  # Reference ID, hex
    stratum: int
    offset_s: float  # system clock minus NTP time, seconds (negative when slow)
    leap: str


def chronyc_tracking(text: str) -> Tracking:
    """``chronyc -n tracking``."""
    fields: dict[str, str] = {}
    for line in text.splitlines():
        key, sep, value = line.partition(":")
        if sep:
            fields[key.strip()] = value.strip()
    try:
        ref = fields["Reference ID"].split()[0]
        stratum = int(fields["Stratum"])
        words = fields["System time"].split()
        offset = float(words[0]) * (-1.0 if "slow" in words else 1.0)
        leap = fields["Leap status"]
    except (KeyError, IndexError, ValueError) as exc:
        raise ValueError(f"not chronyc tracking output ({exc}): {text[:200]!r}") from None
    return Tracking(ref, stratum, offset, leap)


def ip_addr_json(text: str) -> dict[str, list[str]]:
    """``ip -j -4 addr show`` -> {ifname: ["addr/prefix", ...]}."""
    try:
        data: Any = json.loads(text or "[]")
    except json.JSONDecodeError as exc:
        raise ValueError(f"ip -j printed no JSON: {exc}") from None
    out: dict[str, list[str]] = {}
    for link in data:
        addrs = [f"{a['local']}/{a['prefixlen']}" for a in link.get("addr_info", [])
                 if a.get("family") == "inet"]
        out.setdefault(str(link["ifname"]), []).extend(addrs)
    return out


def meminfo(text: str) -> dict[str, int]:
    """``/proc/meminfo`` -> {key: bytes}."""
    out = {}
    for line in text.splitlines():
        key, sep, value = line.partition(":")
        words = value.split()
        if sep and words:
            scale = 1024 if len(words) > 1 and words[1] == "kB" else 1
            out[key.strip()] = int(words[0]) * scale
    if "MemAvailable" not in out:
        raise ValueError("no MemAvailable in /proc/meminfo")
    return out


def systemctl_show(text: str) -> dict[str, str]:
    """``systemctl show -p A,B unit`` -> {A: value, B: value}."""
    return {k: v for k, sep, v in (line.partition("=") for line in text.splitlines()) if sep}


def env_file(text: str) -> dict[str, str]:
    """KEY=VALUE lines as the nccl role writes them (comments and blank lines skipped)."""
    env: dict[str, str] = {}
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        key, sep, value = line.partition("=")
        if not sep or not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", key):
            raise ValueError(f"line {number} is not KEY=VALUE: {line!r}")
        env[key] = value
    return env


_EXEC_ARGV = re.compile(r"argv\[\]=(?P<argv>.*?) ; ignore_errors=")


def execstart_argv(text: str) -> list[str]:
    """argv of the first command in ``systemctl show -p ExecStart --value`` output
    (``{ path=... ; argv[]=... ; ignore_errors=no ; ... }``); [] when there is none.

    systemd 252 (Debian 12) joins argv[] with blanks and no quoting, newer releases quote
    words with blanks; the role's words have none. The role reads the same output with its
    filter sglang_parse_execstart (roles/sglang/filter_plugins/sglang_args.py)."""
    match = _EXEC_ARGV.search(text)
    return shlex.split(match.group("argv")) if match else []


def container_mounts(argv: list[str]) -> list[tuple[str, str]]:
    """(host path, container path) of every ``--volume``/``-v`` bind of a ``docker run`` argv."""
    out = []
    for i, word in enumerate(argv[:-1]):
        if word in ("--volume", "-v"):
            src, _, rest = argv[i + 1].partition(":")
            out.append((src, rest.split(":", 1)[0] or src))
    return out


def environ(text: str) -> dict[str, str]:
    """A process environment: ``/proc/PID/environ`` (NUL-separated ``KEY=VALUE``) or a
    container's ``docker inspect --format '{{json .Config.Env}}'`` (a JSON list of them)."""
    stripped = text.strip()
    if stripped.startswith("["):
        try:
            items = json.loads(stripped)
        except ValueError:
            raise ValueError(f"Config.Env is not JSON: {stripped[:120]!r}") from None
        if not isinstance(items, list) or not all(isinstance(i, str) for i in items):
            raise ValueError(f"Config.Env is not a list of strings: {stripped[:120]!r}")
    else:
        items = [i for i in text.split("\0") if i]
    out: dict[str, str] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if sep and key:
            out[key] = value
    return out


def env_diff(actual: dict[str, str], expected: dict[str, str]) -> list[str]:
    """What differs, one phrase per variable (missing, unexpected, other value)."""
    diff = [f"{k} missing (want {expected[k]!r})" for k in sorted(expected.keys() - actual.keys())]
    diff += [f"{k}={actual[k]!r} not expected" for k in sorted(actual.keys() - expected.keys())]
    diff += [f"{k}={actual[k]!r}, want {expected[k]!r}"
             for k in sorted(actual.keys() & expected.keys()) if str(actual[k]) != str(expected[k])]
    return diff


@dataclass(frozen=True)
class Ping:
    sent: int
    received: int
    error: str | None  # "Message too long", "Network is unreachable", ...


def ping(stdout: str, stderr: str) -> Ping:
    """iputils ``ping`` output: packets sent/received and the first error it printed."""
    match = re.search(r"(\d+) packets transmitted, (\d+) (?:packets )?received", stdout)
    errors = [ln.strip() for ln in (stderr + "\n" + stdout).splitlines()
              if re.search(r"too long|unreachable|cannot assign|Cannot assign|Operation not "
                           r"permitted|unknown host|No route", ln)]
    if not match:
        return Ping(0, 0, errors[0] if errors else (stderr.strip() or "ping printed no summary"))
    return Ping(int(match.group(1)), int(match.group(2)), errors[0] if errors else None)


def neigh_mac(text: str) -> str | None:
    """``ip -j neigh show ADDR dev IF`` -> the neighbour's MAC (None if unresolved)."""
    try:
        data: Any = json.loads(text or "[]")
    except json.JSONDecodeError:
        return None
    for entry in data:
        if entry.get("lladdr") and "FAILED" not in entry.get("state", []):
            return str(entry["lladdr"])
    return None

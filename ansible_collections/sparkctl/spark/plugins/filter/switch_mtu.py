"""Filters of the switch_mtu role: the one place that knows each switch OS's words.

The tasks stay declarative and every driver's commands, payloads and parsers are
plain functions, unit-tested in tests/contract/test_switch_mtu.py. ``fabric`` is the
role's ``_switch_mtu_fabric`` (mtu, speed, autoneg, vlan, bridge: its defaults):

- ``switch_ports | switch_mtu_port_names(os)``    -> fabric ports, in natural order, checked
- ``switch_ports | switch_mtu_port_problems(os)``  -> what is wrong with the names
- ``switch_ports | switch_mtu_breakouts(os)``       -> {port: breakout mode} of the split ports
- ``switch_ports | switch_mtu_breakout_problems(os, speed)`` -> what is wrong with them
- ``ports | switch_mtu_nvue_document(fabric, release, breakout)`` -> the NVUE tree the fabric needs
- ``applied | switch_mtu_nvue_release``            -> the Cumulus Linux release (``nv config show``)
- ``doc | switch_mtu_nvue_patch``                  -> the ``nv config patch`` file
- ``doc | switch_mtu_nvue_differences(applied)``   -> what ``nv config show`` lacks of it
- ``path | switch_mtu_nvue_commands(secs)``        -> NVUE argv lists (stage/apply/...)
- ``results | switch_mtu_nvue_mtus``               -> {port: MTU} from ``nv show ... -o json``
- ``results | switch_mtu_sonic_tables``            -> CONFIG_DB tables from ``sonic-cfggen``
- ``ports | switch_mtu_sonic_conflicts(tables, vlan, breakout)`` -> rows refusing a VLAN member
- ``conflicts | switch_mtu_sonic_conflict_messages`` -> one line each, with its command
- ``ports | switch_mtu_sonic_commands(fabric, tables, clear, breakout)`` -> ``config`` argv lists
- ``tables | switch_mtu_sonic_mtus``               -> {port: MTU} from CONFIG_DB's PORT table
- ``result | switch_mtu_linux_mtus``               -> {device: MTU} from ``switch_port_mtu``
- ``live | switch_mtu_mismatches(devices, mtu)``   -> one message per wrong device

Standard library only: Ansible loads this file on the controller.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from typing import Any

try:
    from ansible.errors import AnsibleFilterError
except ImportError:  # pragma: no cover - the unit tests run with ansible installed
    AnsibleFilterError = ValueError

SWITCH_OSES = ("linux", "nvue", "sonic")

# Port names per switch OS. They travel as argv items and keys of JSON/YAML
# documents, never as shell words; still, a name the OS cannot have is refused
# before it reaches any command.
# Linux: IFNAMSIZ is 16 with the NUL, and a name is a sysfs path component; the
# kernel refuses '/', ':' and blanks (dev_valid_name in net/core/dev.c), and a
# leading '-' or '.' would read as an option or a relative path.
_LINUX_IFNAME = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,14}\Z")
# NVUE (Cumulus Linux): front-panel ports swpN, a breakout port swpNsM.
_NVUE_IFNAME = re.compile(r"^swp[0-9]{1,3}(s[0-9]{1,2})?\Z")
# SONiC: CONFIG_DB's own (native) names, which key the PORT and VLAN_MEMBER
# tables and which `config` takes by default; Eth1/1 is an alias of one.
_SONIC_IFNAME = re.compile(r"^Ethernet[0-9]{1,4}\Z")
PORT_FORMATS: dict[str, tuple[re.Pattern[str], str]] = {
    "linux": (
        _LINUX_IFNAME,
        "a Linux interface name: 1-15 letters, digits, _ . -",
    ),
    "nvue": (_NVUE_IFNAME, "an NVUE switch port like swp1 or a breakout port like swp1s0"),
    "sonic": (
        _SONIC_IFNAME,
        "a SONiC port name as CONFIG_DB keys it, like Ethernet0 (not an alias such as Eth1/1)",
    ),
}


def _natural_key(name: str) -> list[Any]:
    """swp2 before swp10, Eth1/2 before Eth1/10."""
    return [int(part) if part.isdigit() else part for part in re.split(r"(\d+)", name)]


def _ports(value: Any, switch_os: str | None = None) -> list[str]:
    """Port names from switch_ports (a mapping) or an already computed list; with
    ``switch_os``, each must have that OS's port-name format."""
    if isinstance(value, Mapping | list | tuple):
        names = list(value)
    else:
        raise AnsibleFilterError(
            f"expected switch_ports (a mapping port -> {{node, twin}}) or "
            f"a list of port names, got {type(value).__name__}"
        )
    if not all(isinstance(n, str) and n for n in names):
        raise AnsibleFilterError(f"port names must be non-empty strings: {names!r}")
    if switch_os is not None:
        if switch_os not in PORT_FORMATS:
            raise AnsibleFilterError(
                f"switch_os {switch_os!r} is not one of {', '.join(SWITCH_OSES)}"
            )
        pattern, hint = PORT_FORMATS[switch_os]
        bad = [n for n in names if not pattern.match(n)]
        if bad:
            raise AnsibleFilterError(f"switch_ports: {bad[0]!r} is not {hint}")
    return sorted(dict.fromkeys(names), key=_natural_key)


def _mtu(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise AnsibleFilterError(f"MTU must be an integer, got {value!r}")
    return value


def port_names(switch_ports: Any, switch_os: str | None = None) -> list[str]:
    """The fabric ports the switch must carry jumbo frames on, in natural order
    (with ``switch_os``: each one checked against that OS's port-name format)."""
    return _ports(switch_ports, switch_os)


def port_problems(switch_ports: Any, switch_os: str) -> list[str]:
    """Messages for port names the driver of ``switch_os`` cannot use (empty: all fine)."""
    if not isinstance(switch_ports, Mapping):
        return [
            f"switch_ports must be a mapping port -> {{node, twin}}, "
            f"not {type(switch_ports).__name__}"
        ]
    if not switch_ports:
        return [
            "switch_ports is empty: list the switch's fabric ports "
            "(port -> {node, twin}) in group_vars/<cluster>/"
        ]
    pattern, hint = PORT_FORMATS.get(switch_os, (None, ""))
    if pattern is None:
        return [f"switch_os {switch_os!r} is not one of {', '.join(SWITCH_OSES)}"]
    problems = []
    for name in switch_ports:
        if not isinstance(name, str) or not pattern.match(name):
            problems.append(f"switch_ports: {name!r} is not {hint}")
    return problems


# ------------------------------------------------------------------ breakout
# A port of switch_ports may be one sub-port of a split (broken-out) parent port:
# NVIDIA's switch playbook lets a 400G switch port feed two Sparks at 200G through a
# breakout cable. ``breakout`` names the parent's mode in the switch OS's own words:
# - NVUE: 1x 2x 4x 8x (`nv set interface swp1 link breakout 2x`); its sub-ports are
#   swp1s0, swp1s1 ..., so a sub-port's name says its parent (NVIDIA's Switch Port
#   Attributes page, "Breakout Ports").
# - SONiC: a mode of the platform's platform.json, exactly as
#   `config interface breakout <parent> <mode> -y` takes it (2x200G, or with its
#   speeds, 2x200G[100G,50G,40G,25G,10G,1G] on an SN4700); the parent is the
#   BREAKOUT_CFG port the sub-port is numbered from, which only the switch knows.
_NVUE_BREAKOUT = re.compile(r"^([1248])x\Z")
_NVUE_SUBPORT = re.compile(r"^(swp[0-9]{1,3})s([0-9]{1,2})\Z")
_SONIC_BREAKOUT = re.compile(r"^([1-8])x([1-9][0-9]{0,3}G)(\[[0-9]{1,4}G(,[0-9]{1,4}G)*\])?\Z")


def breakouts(switch_ports: Any, switch_os: str | None = None) -> dict[str, str]:
    """{port: breakout mode} of the ports of switch_ports that name one (``switch_os``
    is accepted for symmetry with the other filters; the words are judged by
    :func:`breakout_problems`)."""
    if not isinstance(switch_ports, Mapping):
        return {}
    return {
        str(port): spec["breakout"]
        for port, spec in switch_ports.items()
        if isinstance(spec, Mapping) and spec.get("breakout") is not None
    }


def _nvue_parent(port: str) -> str:
    found = _NVUE_SUBPORT.match(port)
    if not found:
        raise AnsibleFilterError(
            f"switch_ports.{port}: a port with a breakout is a sub-port named swpNsM "
            f"(swp1s0, swp1s1), not {port!r}"
        )
    return found.group(1)


def _nvue_breakout_problems(
    port: str, mode: str, switch_ports: Mapping[str, Any], parents: dict[str, str]
) -> list[str]:
    found, sub = _NVUE_BREAKOUT.match(mode), _NVUE_SUBPORT.match(port)
    if not found:
        return [
            f"switch_ports.{port}.breakout {mode!r} is not an NVUE breakout mode "
            "(1x, 2x, 4x or 8x, as in nv set interface swp1 link breakout 2x)"
        ]
    if not sub:
        return [
            f"switch_ports.{port}: a port with a breakout is a sub-port named "
            f"swpNsM (swp1s0, swp1s1 of swp1), not {port!r}"
        ]
    parent, count = sub.group(1), int(found.group(1))
    if int(sub.group(2)) >= count:
        return [
            f"switch_ports.{port}: breakout {mode} makes sub-ports "
            f"{parent}s0..{parent}s{count - 1}, not {port}"
        ]
    problems = []
    if parent in switch_ports:
        problems.append(
            f"switch_ports lists {parent} and its sub-port {port}: a split "
            "port carries no link of its own"
        )
    if parents.setdefault(parent, mode) != mode:
        problems.append(
            f"switch_ports: the sub-ports of {parent} ask for different "
            f"breakouts ({parents[parent]}, {mode})"
        )
    return problems


def _sonic_breakout_problems(port: str, mode: str, speed: Any) -> list[str]:
    found = _SONIC_BREAKOUT.match(mode)
    where = f"switch_ports.{port}.breakout"
    if not found:
        return [
            f"{where} {mode!r} is not a SONiC breakout mode (a platform.json "
            "mode as config interface breakout takes it: 2x200G or "
            "2x200G[100G,50G,40G,25G,10G,1G])"
        ]
    if speed is not None and found.group(2) != speed:
        return [
            f"{where} {mode} splits into {found.group(2)} ports, but switch_mtu_speed is {speed}"
        ]
    return []


def breakout_problems(switch_ports: Any, switch_os: str, speed: Any = None) -> list[str]:
    """Messages for breakouts the driver of ``switch_os`` cannot set (empty: all fine);
    ``speed`` is switch_mtu_speed, which a SONiC mode's sub-port speed must be."""
    modes = breakouts(switch_ports)
    if not modes:
        return []
    if switch_os not in ("nvue", "sonic"):
        return [
            f"switch_ports: {', '.join(sorted(modes))} name a breakout, which the "
            f"{switch_os} driver cannot set (NVUE and SONiC can); remove it"
        ]
    problems: list[str] = []
    parents: dict[str, str] = {}
    for port, mode in modes.items():
        if not isinstance(mode, str):
            problems.append(
                f"switch_ports.{port}.breakout must be a string, not {type(mode).__name__}"
            )
        elif switch_os == "nvue":
            problems += _nvue_breakout_problems(port, mode, switch_ports, parents)
        else:
            problems += _sonic_breakout_problems(port, mode, speed)
    return problems


def _breakout_map(breakout: Any, names: list[str]) -> dict[str, str]:
    if breakout is None:
        return {}
    if not isinstance(breakout, Mapping) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in breakout.items()
    ):
        raise AnsibleFilterError(f"expected {{port: breakout mode}}, got {breakout!r}")
    strays = sorted(set(breakout) - set(names))
    if strays:
        raise AnsibleFilterError(f"breakout for ports that are not fabric ports: {strays}")
    return dict(breakout)


# ------------------------------------------------------- the fabric's L2
# NVUE's speed words (`nv set interface swp1 link speed ?` lists 10M ... 800G,
# auto) and the Mb/s SONiC's PORT table holds (sonic-port.yang: speed, uint32
# Mb/s). Only speeds both name; a Spark's ConnectX-7 port runs at 200G.
SPEEDS_MBPS = {
    "10G": 10000,
    "25G": 25000,
    "40G": 40000,
    "50G": 50000,
    "100G": 100000,
    "200G": 200000,
    "400G": 400000,
}
# A bridge domain name NVUE takes in a path (interface.<swp>.bridge.domain.<name>).
_NVUE_BRIDGE = re.compile(r"^[A-Za-z][A-Za-z0-9_-]{0,14}\Z")


def _vlan(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= 4094:
        raise AnsibleFilterError(f"VLAN id must be an integer 1..4094, got {value!r}")
    return value


def _speed(value: Any) -> str:
    if not isinstance(value, str) or value not in SPEEDS_MBPS:
        raise AnsibleFilterError(f"speed must be one of {', '.join(SPEEDS_MBPS)}, got {value!r}")
    return value


def _autoneg(value: Any) -> bool:
    if not isinstance(value, bool):
        raise AnsibleFilterError(f"auto-negotiation must be a boolean, got {value!r}")
    return value


def _bridge(value: Any) -> str:
    if not isinstance(value, str) or not _NVUE_BRIDGE.match(value):
        raise AnsibleFilterError(
            f"bridge name must be a word of at most 15 characters "
            f"(letters, digits, _ -), got {value!r}"
        )
    return value


FABRIC_KEYS = ("mtu", "speed", "autoneg", "vlan", "bridge")


def _fabric(value: Any) -> tuple[int, str, bool, int, str]:
    """(mtu, speed, autoneg, vlan, bridge) from the role's ``_switch_mtu_fabric``."""
    if not isinstance(value, Mapping) or set(value) != set(FABRIC_KEYS):
        raise AnsibleFilterError(
            f"expected the fabric settings {{{', '.join(FABRIC_KEYS)}}}, got {value!r}"
        )
    return (
        _mtu(value["mtu"]),
        _speed(value["speed"]),
        _autoneg(value["autoneg"]),
        _vlan(value["vlan"]),
        _bridge(value["bridge"]),
    )


# --------------------------------------------------------------------- NVUE
# Cumulus Linux 5.15 renamed NVUE's on/off values to enabled/disabled, among them
# `nv set interface <id> link auto-negotiate on|off` -> `enabled|disabled` (NVIDIA,
# Cumulus Linux 5.15 "New and Changed NVUE Commands", On/Off tab). The role writes
# the word of the switch's release and takes either word as the same setting.
_RENAMED_IN = (5, 15)
_SAME_WORD = {"on": "enabled", "off": "disabled", "enabled": "on", "disabled": "off"}
_RELEASE = re.compile(r"(?<![0-9.])([0-9]+)\.([0-9]+)(?:\.([0-9]+))?")


def _release_tuple(release: Any) -> tuple[int, int] | None:
    if release is None or release == "":
        return None
    found = _RELEASE.search(str(release))
    if not found:
        raise AnsibleFilterError(f"not a Cumulus Linux release: {release!r}")
    return int(found.group(1)), int(found.group(2))


def autoneg_word(autoneg: bool, release: Any = None) -> str:
    """NVUE's word for auto-negotiation on or off in ``release`` (None: unknown, the
    words of 5.14 and earlier)."""
    newer = (_release_tuple(release) or (0, 0)) >= _RENAMED_IN
    if autoneg:
        return "enabled" if newer else "on"
    return "disabled" if newer else "off"


def nvue_document(
    ports: Any, fabric: Any, release: Any = None, breakout: Any = None
) -> dict[str, Any]:
    """The NVUE configuration the fabric needs, in NVUE's object model.

    The same tree a REST root PATCH (``PATCH /nvue_v1/?rev=<rev>``) carries and
    ``nv config patch`` reads under ``set:``: every port an access port of one
    VLAN in one bridge (NVIDIA's switch playbook: all Spark ports in a single
    bridge, one layer-2 domain), speed forced with auto-negotiation off (an
    enabled auto-negotiation takes precedence over the speed), and the MTU.
    ``release`` (:func:`nvue_release`) picks the auto-negotiation word;
    ``breakout`` ({sub-port: mode}) splits each sub-port's parent
    (``interface.swp1.link.breakout.2x``, as `nv set interface swp1 link breakout 2x`).
    """
    names = _ports(ports, "nvue")
    mtu, speed, autoneg, vlan, bridge = _fabric(fabric)
    word = autoneg_word(autoneg, release)
    doc: dict[str, Any] = {
        "bridge": {"domain": {bridge: {"vlan": {str(vlan): {}}}}},
        "interface": {
            name: {
                "link": {"mtu": mtu, "speed": speed, "auto-negotiate": word},
                "bridge": {"domain": {bridge: {"access": vlan}}},
            }
            for name in names
        },
    }
    for port, mode in sorted(_breakout_map(breakout, names).items()):
        if not _NVUE_BREAKOUT.match(mode):
            raise AnsibleFilterError(f"switch_ports.{port}.breakout {mode!r} is not 1x 2x 4x 8x")
        parent = doc["interface"].setdefault(_nvue_parent(port), {})
        parent.setdefault("link", {})["breakout"] = {mode: {}}
    return doc


def nvue_release(applied: Any) -> str | None:
    """The Cumulus Linux release in the header of ``nv config show -o json``
    (``[{"header": {"version": "Cumulus Linux 5.15.0", ...}}, {"set": {...}}]``),
    as "5.15.0"; None when the output has no header."""
    if isinstance(applied, Mapping) and "stdout" in applied:
        applied = applied["stdout"]
    if isinstance(applied, str):
        try:
            applied = json.loads(applied) if applied.strip() else []
        except ValueError as exc:
            raise AnsibleFilterError(f"nv config show did not print JSON: {exc}") from exc
    ops = applied if isinstance(applied, list) else [applied]
    for op in ops:
        header = op.get("header") if isinstance(op, Mapping) else None
        if isinstance(header, Mapping) and header.get("version"):
            found = _RELEASE.search(str(header["version"]))
            if found:
                return found.group(0)
    return None


def nvue_patch(document: Any) -> list[dict[str, Any]]:
    """The file ``nv config patch`` applies: a list of operations, here one ``set``."""
    if not isinstance(document, Mapping):
        raise AnsibleFilterError("expected the document of switch_mtu_nvue_document")
    return [{"set": dict(document)}]


def _nvue_tree(applied: Any) -> Mapping[str, Any]:
    """The configuration tree from ``nv config show -o json`` (a list of operations
    whose ``set`` entries hold the tree), a registered command result, JSON text,
    or a tree already."""
    if isinstance(applied, Mapping) and "stdout" in applied:
        applied = applied["stdout"]
    if isinstance(applied, str):
        try:
            applied = json.loads(applied) if applied.strip() else {}
        except ValueError as exc:
            raise AnsibleFilterError(f"nv config show did not print JSON: {exc}") from exc
    if isinstance(applied, list):
        tree: dict[str, Any] = {}
        for op in applied:
            if isinstance(op, Mapping) and isinstance(op.get("set"), Mapping):
                _merge(tree, op["set"])
        return tree
    if isinstance(applied, Mapping):
        return applied["set"] if isinstance(applied.get("set"), Mapping) else applied
    raise AnsibleFilterError("expected the output of nv config show -o json")


def _merge(into: dict[str, Any], more: Mapping[str, Any]) -> None:
    for key, value in more.items():
        if isinstance(value, Mapping) and isinstance(into.get(key), dict):
            _merge(into[key], value)
        else:
            into[key] = dict(value) if isinstance(value, Mapping) else value


def nvue_differences(document: Any, applied: Any) -> list[str]:
    """One message per leaf of ``document`` the applied configuration lacks or holds
    otherwise (empty: nothing to change). Values compare as text: NVUE prints
    numbers and the words of an enum alike; on/enabled and off/disabled are the same
    setting (Cumulus Linux 5.15 renamed them, and a switch upgraded from an earlier
    release may hold either)."""
    if not isinstance(document, Mapping):
        raise AnsibleFilterError("expected the document of switch_mtu_nvue_document")
    out: list[str] = []

    def walk(want: Mapping[str, Any], have: Any, path: list[str]) -> None:
        for key, value in want.items():
            here = [*path, str(key)]
            got = have.get(key, have.get(str(key))) if isinstance(have, Mapping) else None
            if isinstance(value, Mapping):
                if not isinstance(got, Mapping):
                    out.append(f"{'.'.join(here)}: missing")
                elif value:
                    walk(value, got, here)
            elif got is None:
                out.append(f"{'.'.join(here)}: unset, wanted {value}")
            elif str(got) != str(value) and _SAME_WORD.get(str(got)) != str(value):
                out.append(f"{'.'.join(here)}: {got}, wanted {value}")

    walk(document, _nvue_tree(applied), [])
    return out


def nvue_commands(patch_path: Any, confirm_seconds: int) -> dict[str, list[list[str]]]:
    """The NVUE commands (argv lists) that apply the patch file with a safety net.

    - ``stage``: detach whatever another session left pending (kept as a numbered
      revision, not lost), so our apply carries only our change; then
      ``nv config patch <file>`` (NVUE wants the full path) puts the document
      into the pending revision: the inventory's values travel as data.
    - ``apply``: ``nv config apply --confirm <N>s`` rolls back by itself unless
      confirmed within N seconds (NVUE command reference, "Config Commands").
    - ``confirm``: keeps the applied revision once the controller reconnected.
    - ``save``: writes the startup configuration; Cumulus Linux 5.9 and later
      already save on apply (auto-save), 5.8 and earlier need it to survive a reboot.
    """
    if not isinstance(patch_path, str) or not patch_path.startswith("/"):
        raise AnsibleFilterError(f"nv config patch needs an absolute path, got {patch_path!r}")
    if (
        isinstance(confirm_seconds, bool)
        or not isinstance(confirm_seconds, int)
        or confirm_seconds <= 0
    ):
        raise AnsibleFilterError(
            f"confirm time must be a positive number of seconds, got {confirm_seconds!r}"
        )
    return {
        "stage": [["nv", "config", "detach"], ["nv", "config", "patch", patch_path]],
        "apply": [["nv", "config", "apply", "--confirm", f"{confirm_seconds}s", "--assume-yes"]],
        # Not in NVIDIA's reference pages (they document --confirm and
        # --confirm-status only); this is the CLI's own "keep it" option.
        "confirm": [["nv", "config", "apply", "--confirm-yes"]],
        "save": [["nv", "config", "save"]],
    }


def _as_int(value: Any) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, str) and value.strip().isdigit():
        return int(value.strip())
    return None


def nvue_link_mtu(doc: Any) -> int | None:
    """The MTU in one ``nv show interface <port> link [--operational] -o json`` document.

    The link object carries ``mtu`` at its top level; a document that keeps the
    revisions apart (``{"operational": {...}, "applied": {...}}``) is read from
    its operational part, since that is what frames meet. None when absent.
    """
    if isinstance(doc, str):
        try:
            doc = json.loads(doc) if doc.strip() else {}
        except ValueError as exc:
            raise AnsibleFilterError(f"nv show did not print JSON: {exc}") from exc
    if not isinstance(doc, Mapping):
        return None
    if "mtu" in doc:
        return _as_int(doc["mtu"])
    if isinstance(doc.get("link"), Mapping):
        return nvue_link_mtu(doc["link"])
    for rev in ("operational", "applied"):
        if isinstance(doc.get(rev), Mapping):
            found = nvue_link_mtu(doc[rev])
            if found is not None:
                return found
    return None


def nvue_mtus(show_results: Any) -> dict[str, int | None]:
    """{port: MTU} from the registered loop over ``nv show interface <port> link -o json``.

    Accepts the loop's ``results`` list (``item`` + ``stdout``), the registered
    variable itself, or a plain mapping port -> JSON text.
    """
    if isinstance(show_results, Mapping) and "results" in show_results:
        show_results = show_results["results"]
    if isinstance(show_results, Mapping):
        return {str(port): nvue_link_mtu(doc) for port, doc in show_results.items()}
    if not isinstance(show_results, list):
        raise AnsibleFilterError("expected the results of a loop over nv show commands")
    return {str(r["item"]): nvue_link_mtu(r.get("stdout", "")) for r in show_results}


# -------------------------------------------------------------------- SONiC
# The CONFIG_DB tables the SONiC driver reads (`sonic-cfggen -d --var-json T`,
# what `show runningconfiguration ports` runs): PORT, VLAN and VLAN_MEMBER it
# changes; INTERFACE, PORTCHANNEL_MEMBER and (other VLANs') VLAN_MEMBER rows make
# `config vlan member add` refuse a port (sonic-utilities config/vlan.py
# add_vlan_member: "is a router interface!", "is part of portchannel!", "is already
# untagged member!"); BREAKOUT_CFG holds every parent port's breakout mode.
SONIC_TABLES = ("PORT", "VLAN", "VLAN_MEMBER", "INTERFACE", "PORTCHANNEL_MEMBER", "BREAKOUT_CFG")


def sonic_tables(results: Any) -> dict[str, dict[str, Any]]:
    """{table: rows} from the registered loop over ``sonic-cfggen -d --var-json <table>``.

    An empty table prints nothing (or ``{}``); a mapping table -> rows passes through.
    """
    if isinstance(results, Mapping) and "results" in results:
        results = results["results"]
    if isinstance(results, Mapping):
        pairs = list(results.items())
    elif isinstance(results, list):
        pairs = [(r["item"], r.get("stdout", "")) for r in results]
    else:
        raise AnsibleFilterError("expected the results of a loop over sonic-cfggen")
    tables: dict[str, dict[str, Any]] = {t: {} for t in SONIC_TABLES}
    for name, text in pairs:
        rows = text
        if isinstance(text, str):
            try:
                rows = json.loads(text) if text.strip() else {}
            except ValueError as exc:
                raise AnsibleFilterError(
                    f"sonic-cfggen --var-json {name} did not print JSON: {exc}"
                ) from exc
        if not isinstance(rows, Mapping):
            raise AnsibleFilterError(f"sonic-cfggen --var-json {name}: expected an object")
        tables[str(name)] = dict(rows)
    return tables


def _ethernet_index(name: str) -> int:
    return int(name[len("Ethernet") :])


def _sonic_parent(port: str, breakout_cfg: Mapping[str, Any]) -> str:
    """The BREAKOUT_CFG port ``port`` is numbered from: SONiC names a parent's
    sub-ports Ethernet<parent + lane offset> (sonic-config-engine portconfig.py,
    BreakoutCfg), so it is the parent with the largest number not above the port's."""
    below = [
        name
        for name in breakout_cfg
        if _SONIC_IFNAME.match(str(name)) and _ethernet_index(str(name)) <= _ethernet_index(port)
    ]
    if not below:
        raise AnsibleFilterError(
            f"{port} has a breakout, but CONFIG_DB's BREAKOUT_CFG has no parent port "
            f"numbered at or below it (show interfaces breakout lists the parents)"
        )
    return str(max(below, key=_ethernet_index))


def _sonic_known(tables: Any) -> dict[str, dict[str, Any]]:
    if not isinstance(tables, Mapping):
        raise AnsibleFilterError("expected {table: rows} (switch_mtu_sonic_tables)")
    return {t: dict(tables.get(t) or {}) for t in SONIC_TABLES}


def _sonic_pending(
    names: list[str], modes: Mapping[str, str], tables: Mapping[str, Mapping[str, Any]]
) -> dict[str, tuple[str, list[str]]]:
    """{parent: (mode, [sub-ports])} of the breakouts CONFIG_DB does not hold yet."""
    pending: dict[str, tuple[str, list[str]]] = {}
    for port in names:
        mode = modes.get(port)
        if mode is None:
            continue
        parent = _sonic_parent(port, tables["BREAKOUT_CFG"])
        row = tables["BREAKOUT_CFG"].get(parent) or {}
        if row.get("brkout_mode") == mode:
            continue
        held = pending.setdefault(parent, (mode, []))
        if held[0] != mode:
            raise AnsibleFilterError(
                f"the sub-ports of {parent} ask for different breakouts ({held[0]}, {mode})"
            )
        held[1].append(port)
    return pending


def sonic_conflicts(
    ports: Any, tables: Any, vlan: Any, breakout: Any = None
) -> list[dict[str, Any]]:
    """CONFIG_DB rows that make SONiC refuse a fabric port's VLAN membership (or its
    parent's breakout), each with the command that removes it, in order.

    One entry per row: ``port``, ``table``, ``key``, ``what`` and ``clear`` (argv):

    - INTERFACE ``EthernetN|a.b.c.d/len`` (an address; the default t1 preset gives
      every port one): ``config interface ip remove EthernetN a.b.c.d/len``; the
      removal of the last address also drops the ``EthernetN`` row (sonic-utilities
      config/main.py, ``ip remove``), unless the port is bound to a VRF:
      ``config interface vrf unbind EthernetN`` first.
    - INTERFACE ``EthernetN`` alone (a router interface without an address, as the
      l3 preset leaves every port): no ``config`` command removes it, so
      ``sonic-db-cli CONFIG_DB DEL INTERFACE|EthernetN``.
    - PORTCHANNEL_MEMBER ``PortChannelX|EthernetN``:
      ``config portchannel member del PortChannelX EthernetN``.
    - VLAN_MEMBER ``VlanX|EthernetN`` untagged in another VLAN (the l2 preset's
      Vlan1000): ``config vlan member del X EthernetN``. A parent port about to be
      split may be a member of no VLAN at all (its breakout refuses dependencies).
    """
    names = _ports(ports, "sonic")
    vid = str(_vlan(vlan))
    known = _sonic_known(tables)
    modes = _breakout_map(breakout, names)
    pending = _sonic_pending(names, modes, known)
    # The ports whose rows count: every fabric port CONFIG_DB has now, and every parent
    # of a pending breakout (whose sub-ports do not exist yet).
    checked = sorted({n for n in names if n in known["PORT"]} | set(pending), key=_natural_key)
    out: list[dict[str, Any]] = []

    def add(port: str, table: str, key: str, what: str, clear: list[str]) -> None:
        out.append({"port": port, "table": table, "key": key, "what": what, "clear": clear})

    for port in checked:
        splitting = port in pending
        iface = known["INTERFACE"]
        addresses = [k.split("|", 1)[1] for k in iface if k.startswith(port + "|")]
        bare = iface.get(port) if port in iface else None
        if isinstance(bare, Mapping) and bare.get("vrf_name"):
            add(
                port,
                "INTERFACE",
                port,
                f"bound to VRF {bare['vrf_name']}",
                ["config", "interface", "vrf", "unbind", port],
            )
        for address in sorted(addresses):
            add(
                port,
                "INTERFACE",
                f"{port}|{address}",
                f"has the address {address}",
                ["config", "interface", "ip", "remove", port, address],
            )
        if port in iface and not addresses:
            add(
                port,
                "INTERFACE",
                port,
                "is a router interface",
                ["sonic-db-cli", "CONFIG_DB", "DEL", f"INTERFACE|{port}"],
            )
        for key in sorted(known["PORTCHANNEL_MEMBER"]):
            channel, _, member = key.partition("|")
            if member == port:
                add(
                    port,
                    "PORTCHANNEL_MEMBER",
                    key,
                    f"is a member of {channel}",
                    ["config", "portchannel", "member", "del", channel, port],
                )
        for key in sorted(known["VLAN_MEMBER"]):
            name, _, member = key.partition("|")
            if member != port or not name.startswith("Vlan"):
                continue
            row = known["VLAN_MEMBER"][key]
            mode = row.get("tagging_mode") if isinstance(row, Mapping) else None
            other = name != f"Vlan{vid}"
            if splitting or (other and mode == "untagged"):
                add(
                    port,
                    "VLAN_MEMBER",
                    key,
                    f"is {'an untagged' if mode == 'untagged' else 'a tagged'} member of {name}",
                    ["config", "vlan", "member", "del", name[len("Vlan") :], port],
                )
    return out


def sonic_conflict_messages(conflicts: Any) -> list[str]:
    """One line per conflict of :func:`sonic_conflicts`: the port, the row, the command."""
    if not isinstance(conflicts, list):
        raise AnsibleFilterError("expected the list of switch_mtu_sonic_conflicts")
    return [
        f"{c['port']} {c['what']} (CONFIG_DB {c['table']} {c['key']}); "
        f"`{' '.join(c['clear'])}` removes it"
        for c in conflicts
    ]


def sonic_commands(
    ports: Any, fabric: Any, tables: Any = None, clear: bool = False, breakout: Any = None
) -> list[list[str]]:
    """The SONiC ``config`` commands (argv lists) that bring CONFIG_DB to the fabric's
    settings, only for what differs from ``tables`` (None: nothing known, all of it).

    - ``config vlan add <id>`` unless VLAN holds ``Vlan<id>``.
    - what refuses the membership (:func:`sonic_conflicts`): refused unless ``clear``,
      then removed first, by the command each conflict names.
    - ``config interface breakout <parent> <mode> -y`` for each parent whose
      BREAKOUT_CFG mode is not the one ``breakout`` ({port: mode}) asks (without
      tables, the parent is unknown and written as ``<BREAKOUT_CFG parent of P>``);
      its sub-ports are new ports, so every setting below follows for them.
    - per port, where PORT differs: ``config interface mtu|speed|autoneg`` (speed in
      Mb/s, autoneg ``enabled|disabled``; CONFIG_DB keeps ``on|off``, sonic-port.yang).
    - ``config switchport mode access <port>`` where PORT says ``mode: routed``
      (releases with switchport modes refuse a VLAN member in routed mode).
    - ``config vlan member add -u <id> <port>`` (untagged: the Sparks send untagged
      frames) unless VLAN_MEMBER holds ``Vlan<id>|<port>`` untagged; a tagged member
      is removed first.
    """
    names = _ports(ports, "sonic")
    mtu, speed, autoneg, vlan, _ = _fabric(fabric)  # SONiC's VLAN is the bridge
    modes = _breakout_map(breakout, names)
    known = tables is not None
    db = _sonic_known(tables) if known else {t: {} for t in SONIC_TABLES}
    port_rows, vlans, members = db["PORT"], db["VLAN"], db["VLAN_MEMBER"]
    vid, mbps = str(vlan), str(SPEEDS_MBPS[speed])
    vlan_key = f"Vlan{vid}"
    cmds: list[list[str]] = []
    if not known or vlan_key not in vlans:
        cmds.append(["config", "vlan", "add", vid])
    fresh: set[str] = set()
    if known:
        conflicts = sonic_conflicts(names, db, vlan, modes)
        if conflicts and not clear:
            raise AnsibleFilterError(
                "CONFIG_DB refuses the fabric's VLAN membership: "
                + "; ".join(sonic_conflict_messages(conflicts))
                + ". Remove them, or set switch_mtu_sonic_clear_conflicts: true and the role does"
            )
        cmds += [c["clear"] for c in conflicts]
        for parent, (mode, subs) in _sonic_pending(names, modes, db).items():
            cmds.append(["config", "interface", "breakout", parent, mode, "-y"])
            # The breakout recreates the parent's sub-ports: their old rows are gone.
            fresh.update([*subs, parent])
    else:
        for port in names:
            if port in modes:
                cmds.append(
                    [
                        "config",
                        "interface",
                        "breakout",
                        f"<BREAKOUT_CFG parent of {port}>",
                        modes[port],
                        "-y",
                    ]
                )
    cleared = {c["key"] for c in sonic_conflicts(names, db, vlan, modes)} if known else set()
    for name in names:
        new = name in fresh or not known
        key = f"{vlan_key}|{name}"
        cmds += _sonic_port_commands(
            name,
            {} if new else (port_rows.get(name) or {}),
            None if new or key in cleared else members.get(key),
            (str(mtu), mbps, autoneg, vid),
        )
    return cmds


def _sonic_port_commands(
    name: str, row: Mapping[str, Any], member: Any, want: tuple[str, str, bool, str]
) -> list[list[str]]:
    """One port's ``config`` commands, from its PORT row and fabric VLAN_MEMBER row."""
    mtu, mbps, autoneg, vid = want
    cmds: list[list[str]] = []
    if str(row.get("mtu")) != mtu:
        cmds.append(["config", "interface", "mtu", name, mtu])
    if str(row.get("speed")) != mbps:
        cmds.append(["config", "interface", "speed", name, mbps])
    if row.get("autoneg") != ("on" if autoneg else "off"):
        cmds.append(["config", "interface", "autoneg", name, "enabled" if autoneg else "disabled"])
    if isinstance(member, Mapping) and member.get("tagging_mode") == "untagged":
        return cmds
    if row.get("mode") == "routed":
        cmds.append(["config", "switchport", "mode", "access", name])
    if member is not None:
        cmds.append(["config", "vlan", "member", "del", vid, name])
    cmds.append(["config", "vlan", "member", "add", "-u", vid, name])
    return cmds


def sonic_mtus(tables: Any) -> dict[str, int | None]:
    """{port: MTU} from CONFIG_DB's PORT table (switch_mtu_sonic_tables)."""
    if not isinstance(tables, Mapping) or not isinstance(tables.get("PORT"), Mapping):
        raise AnsibleFilterError("expected {table: rows} with a PORT table")
    return {
        str(name): _as_int(row.get("mtu")) if isinstance(row, Mapping) else None
        for name, row in tables["PORT"].items()
    }


# -------------------------------------------------------------------- Linux
def linux_mtus(result: Any) -> dict[str, int | None]:
    """{device: live MTU} for ports and bridges from a ``switch_port_mtu`` result.

    Run the module in check mode to read: ``before`` is what sysfs holds now.
    """
    if not isinstance(result, Mapping):
        raise AnsibleFilterError("expected a registered switch_port_mtu result")
    live: dict[str, int | None] = {}
    for group in ("ports", "bridges"):
        for dev, state in (result.get(group) or {}).items():
            live[str(dev)] = _as_int(state.get("before")) if isinstance(state, Mapping) else None
    return live


# ------------------------------------------------------------------ generic
def mismatches(live: Any, devices: Iterable[str], mtu: int) -> list[str]:
    """One message per expected device whose live MTU is not ``mtu`` or was not reported."""
    if not isinstance(live, Mapping):
        raise AnsibleFilterError("expected a mapping device -> MTU")
    mtu = _mtu(mtu)
    problems = []
    for dev in devices:
        value = live.get(dev)
        if dev not in live or value is None:
            problems.append(f"{dev}: MTU not reported by the switch")
        elif value != mtu:
            problems.append(f"{dev}: MTU {value}, expected {mtu}")
    return problems


class FilterModule:
    """Filters of the switch_mtu role (see the module docstring)."""

    def filters(self) -> dict[str, Any]:
        return {
            "switch_mtu_port_names": port_names,
            "switch_mtu_port_problems": port_problems,
            "switch_mtu_breakouts": breakouts,
            "switch_mtu_breakout_problems": breakout_problems,
            "switch_mtu_nvue_document": nvue_document,
            "switch_mtu_nvue_patch": nvue_patch,
            "switch_mtu_nvue_release": nvue_release,
            "switch_mtu_nvue_differences": nvue_differences,
            "switch_mtu_nvue_commands": nvue_commands,
            "switch_mtu_nvue_mtus": nvue_mtus,
            "switch_mtu_sonic_tables": sonic_tables,
            "switch_mtu_sonic_conflicts": sonic_conflicts,
            "switch_mtu_sonic_conflict_messages": sonic_conflict_messages,
            "switch_mtu_sonic_commands": sonic_commands,
            "switch_mtu_sonic_mtus": sonic_mtus,
            "switch_mtu_linux_mtus": linux_mtus,
            "switch_mtu_mismatches": mismatches,
        }
